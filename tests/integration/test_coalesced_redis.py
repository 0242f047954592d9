"""The worker's script calls made in one turn of the event loop share one round trip, and
each caller still gets its own reply or error (``worker/coalesce.py``)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from zeromem.bus import _Connection, connect_redis, redis_options
from zeromem.settings import Settings
from zeromem.store import scripts
from zeromem.store.keys import layout
from zeromem.worker.coalesce import LATER_S, Coalesced

_ECHO = "return {KEYS[1], ARGV[1]}"
_FAILS = "return redis.error_reply('nope ' .. ARGV[1])"


@pytest.fixture
async def redis(settings: Settings):  # type: ignore[no-untyped-def]
    if layout().cluster:
        pytest.skip("the worker uses its cluster client as it is (no coalescing)")
    client = connect_redis(settings)
    yield client
    await client.aclose()


async def test_calls_of_one_turn_share_a_round_trip_each_with_its_own_reply(redis) -> None:  # type: ignore[no-untyped-def]
    echo = await redis.script_load(_ECHO)
    fails = await redis.script_load(_FAILS)
    coalesced = Coalesced(redis)
    calls = [coalesced.evalsha(echo, 1, f"k{i}", i) for i in range(5)]
    calls.insert(2, coalesced.evalsha(fails, 0, "x"))
    calls.append(coalesced.evalsha("0" * 40, 0))  # a script Redis does not know
    replies = await asyncio.gather(*calls, return_exceptions=True)
    assert coalesced.round_trips == 1 and coalesced.calls == 7
    assert [r for n, r in enumerate(replies) if n not in (2, 6)] == [
        [f"k{i}".encode(), str(i).encode()] for i in range(5)
    ]
    assert isinstance(replies[2], ResponseError) and "nope x" in str(replies[2])
    assert isinstance(replies[6], NoScriptError)


async def test_a_lone_call_goes_alone_and_a_script_falls_back_on_its_source(redis) -> None:  # type: ignore[no-untyped-def]
    coalesced = Coalesced(redis)
    await redis.script_flush()
    # Script.__call__ sends the source after NOSCRIPT, through the same client.
    assert await scripts.LEASE_RELEASE(coalesced, ["zm:test:no-lease"], ["token"]) == 0  # type: ignore[arg-type]
    assert coalesced.round_trips == 1
    first, second = await asyncio.gather(
        scripts.LEASE_RELEASE(coalesced, ["zm:test:a"], ["t"]),  # type: ignore[arg-type]
        scripts.LEASE_RELEASE(coalesced, ["zm:test:b"], ["t"]),  # type: ignore[arg-type]
    )
    assert (first, second) == (0, 0) and coalesced.round_trips == 2


async def test_a_failed_round_trip_fails_every_call_of_it(redis) -> None:  # type: ignore[no-untyped-def]
    echo = await redis.script_load(_ECHO)
    broken = connect_redis(Settings().with_urls("nats://127.0.0.1:1", "redis://127.0.0.1:1"))
    coalesced = Coalesced(broken)
    replies = await asyncio.gather(
        coalesced.evalsha(echo, 1, "a", 1),
        coalesced.evalsha(echo, 1, "b", 2),
        return_exceptions=True,
    )
    assert all(isinstance(r, RedisConnectionError) for r in replies)
    await broken.aclose()


async def test_a_later_command_goes_with_the_next_script_call_or_alone_after_a_while(redis) -> None:  # type: ignore[no-untyped-def]
    """A shard's applied position, noted after its commit answered, rides with the next
    round's script call instead of making a round trip of its own; with no call coming it
    goes alone within ``LATER_S``, and a stop sends what is left."""
    echo = await redis.script_load(_ECHO)
    coalesced = Coalesced(redis)
    await redis.delete("zm:test:later:a", "zm:test:later:b", "zm:test:later:c")
    coalesced.later("SET", "zm:test:later:a", 1)
    await asyncio.sleep(0)  # a turn of the loop, then another: nothing sent yet
    await asyncio.sleep(0)
    assert coalesced.round_trips == 0
    assert await coalesced.evalsha(echo, 1, "k", 1) == [b"k", b"1"]
    assert coalesced.round_trips == 1 and coalesced.calls == 2
    assert await redis.get("zm:test:later:a") == b"1"

    coalesced.later("SET", "zm:test:later:b", 2)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert coalesced.round_trips == 1
    await asyncio.sleep(LATER_S * 3)  # the timer (due first) sends it, alone
    assert coalesced.round_trips == 2
    await coalesced.drain()  # the round in flight answered
    assert await redis.get("zm:test:later:b") == b"2"

    coalesced.later("SET", "zm:test:later:c", 3)
    await coalesced.drain()
    assert coalesced.round_trips == 3
    assert await redis.get("zm:test:later:c") == b"3"
    await redis.delete("zm:test:later:a", "zm:test:later:b", "zm:test:later:c")


async def test_a_connection_redis_closed_while_idle_is_replaced_once(
    redis, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    """Rounds go on connections of ``Coalesced``'s own; one that Redis closed while it
    sat idle (a restart, a client kill) is noticed on its next use and replaced, and the
    call gets its reply, as the client's pool would have given it a live connection."""
    echo = await redis.script_load(_ECHO)
    # Named, so that only its connections are killed: the server is the session's.
    name = f"zm-test-coalesced-{uuid.uuid4().hex[:12]}"
    named = Redis.from_url(
        settings.store.server_url,
        client_name=name,
        connection_class=_Connection,
        **redis_options(settings),
    )
    coalesced = Coalesced(named)
    try:
        assert await coalesced.evalsha(echo, 1, "a", 1) == [b"a", b"1"]
        own = [c["id"] for c in await redis.client_list() if c.get("name") == name]
        assert own and all([await redis.client_kill_filter(_id=i) for i in own])
        assert await coalesced.evalsha(echo, 1, "b", 2) == [b"b", b"2"]
        assert await coalesced.evalsha(echo, 1, "c", 3) == [b"c", b"3"]
        await coalesced.drain()
    finally:
        await named.aclose()


async def test_a_round_past_the_clients_timeout_fails_and_leaves_no_reply_behind(
    settings: Settings,
) -> None:
    """The client's ``socket_timeout`` bounds a round as a whole. The connection that timed
    out still has the late reply coming: it is dropped, so that reply never answers the
    next round's call."""
    if layout().cluster:
        pytest.skip("the worker uses its cluster client as it is (no coalescing)")
    redis = connect_redis(settings, command_timeout_s=0.2)
    try:
        slow = await redis.script_load(
            "local t = redis.call('TIME') local stop = t[1] * 1e6 + t[2] + 400000 "
            "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] > stop return 'late'"
        )
        echo = await redis.script_load(_ECHO)
        coalesced = Coalesced(redis)
        with pytest.raises(RedisTimeoutError):
            await coalesced.evalsha(slow, 0)
        await asyncio.sleep(0.4)  # the slow script has answered, on the dropped connection
        assert await coalesced.evalsha(echo, 1, "k", 7) == [b"k", b"7"]
        await coalesced.drain()
    finally:
        await redis.aclose()
