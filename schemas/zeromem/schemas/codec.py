"""msgpack encoding of every wire message, with validation on decode.

Encoders and decoders are built once: msgspec compiles a specialised (de)serialiser per
type, which is what keeps the worker's per-message cost in microseconds.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from zeromem.schemas.commands import Command
from zeromem.schemas.results import Result

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_command_decoder = msgspec.msgpack.Decoder(Command)
_result_decoder = msgspec.msgpack.Decoder(Result)
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
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.msgpack.Decoder(type_)
    return decoder.decode(data)
