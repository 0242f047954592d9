"""msgpack encoding of every wire message, with validation on decode.

Encoders and decoders are built once: msgspec compiles a specialised (de)serialiser per
type, which is what keeps the worker's per-message cost in microseconds.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from zeromem.schemas.commands import Command
from zeromem.schemas.results import Result

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_command_decoder = msgspec.msgpack.Decoder(Command)
_result_decoder = msgspec.msgpack.Decoder(Result)
_batch_decoder = msgspec.msgpack.Decoder(list[msgspec.Raw])
_decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}

DecodeError = msgspec.DecodeError  # ValidationError is a subclass


def encode(message: Any) -> bytes:
    return _encoder.encode(message)


def decode_command(data: bytes) -> Command:
    """Raises ``DecodeError`` (or its subclass ``ValidationError``) with a readable reason."""
    return _command_decoder.decode(data)


def decode_result(data: bytes) -> Result:
    return _result_decoder.decode(data)


def decode(data: bytes, type_: type[T]) -> T:
    decoder: msgspec.msgpack.Decoder[T] | None = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.msgpack.Decoder(type_)
    return decoder.decode(data)


def encode_batch(encoded_commands: Sequence[bytes]) -> bytes:
    """A command batch: a msgpack array of commands, built from their encodings as they
    are (a publisher has each one encoded already; nothing is encoded twice)."""
    n = len(encoded_commands)
    if n < 16:
        head = bytes((0x90 | n,))
    elif n < 1 << 16:
        head = b"\xdc" + struct.pack(">H", n)
    else:
        head = b"\xdd" + struct.pack(">I", n)
    return head + b"".join(encoded_commands)


def batch_length(data: bytes) -> int | None:
    """How many commands a batch claims to hold (its msgpack array header), read without
    decoding it; None if ``data`` does not start with an array header."""
    if not data:
        return None
    head = data[0]
    if 0x90 <= head <= 0x9F:
        return head & 0x0F
    if head == 0xDC and len(data) >= 3:
        return int(struct.unpack_from(">H", data, 1)[0])
    if head == 0xDD and len(data) >= 5:
        return int(struct.unpack_from(">I", data, 1)[0])
    return None


def chunks(encoded: Sequence[bytes], limit: int, most: int) -> list[list[bytes]]:
    """``encoded`` cut, in order, into runs of at most ``most`` items and ``limit`` bytes
    (an item over ``limit`` on its own makes a run of one): the batch messages (or
    change-feed batches) a list of encoded commands (or results) goes out as."""
    chunks: list[list[bytes]] = []
    size = 0
    for data in encoded:
        if not chunks or len(chunks[-1]) == most or size + len(data) > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(data)
        size += len(data)
    return chunks


def split_batch(data: bytes) -> list[bytes]:
    """The encoded commands of a batch, each still undecoded, so that one bad command is
    refused on its own. Raises ``DecodeError`` if ``data`` is not a msgpack array."""
    return [bytes(raw) for raw in _batch_decoder.decode(data)]


def decode_results(data: bytes, batched: bool) -> list[Result]:
    """The results a change-feed message carries: one, or (``batched``: the message has a
    ``Zm-Batch`` header) an array of one owner's results, in the order they were applied."""
    if not batched:
        return [_result_decoder.decode(data)]
    return [_result_decoder.decode(part) for part in split_batch(data)]
