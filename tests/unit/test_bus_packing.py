"""The read and write paths' Redis connection packs a command byte for byte as redis-py
does (zeromem.bus._Connection), whatever the arguments; what it does not pack itself it
leaves to redis-py, errors included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Connection
from redis.exceptions import DataError

from zeromem.bus import _Connection

ours, theirs = _Connection(), Connection()

heads = st.sampled_from(["EVALSHA_RO", "HMGET", "CONFIG GET", b"SCRIPT LOAD", b"ZADD", "zadd"])
arguments = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)


def packed(connection: Connection, *args: object) -> bytes:
    return b"".join(bytes(part) for part in connection.pack_command(*args))


@given(heads, st.lists(arguments, max_size=80))
def test_a_command_is_packed_as_redis_py_packs_it(head: str | bytes, rest: list[object]) -> None:
    assert packed(ours, head, *rest) == packed(theirs, head, *rest)


def test_what_it_does_not_pack_itself_redis_py_packs_or_refuses() -> None:
    big = b"x" * (theirs._buffer_cutoff + 1)
    for args in (("SET", "k", big), ("SET", "k", memoryview(b"abc")), ("SET", bytearray(b"k"), 1)):
        assert packed(ours, *args) == packed(theirs, *args)
    with pytest.raises(DataError):
        ours.pack_command("SET", "k", True)


def test_the_survey_arguments_go_in_one_buffer() -> None:
    args = ("EVALSHA_RO", "a" * 40, 2, "zm:t:o:{user:u1}:st", "zm:t:o:{user:u1}:t", 200, 1.2, "")
    assert len(ours.pack_command(*args)) == 1
    assert packed(ours, *args) == packed(theirs, *args)
