"""Encoders: turn long text or JSON-like values into short memory content, without a model.

See :mod:`zeromem.encoding.encoder` for how the default extractive encoder works and for the
exact guarantee on which ids, numbers, dates and amounts survive.
"""

from __future__ import annotations

from zeromem.encoding.encoder import (
    CONTENT_MAX_CHARS,
    ELLIPSIS,
    MAX_TOKEN_CHARS,
    MAX_UNIT_CHARS,
    TAIL_SEPARATOR,
    TOKEN_BUDGET,
    Encoder,
    ExtractiveEncoder,
    contains_token,
    default_encoder,
    encode_value,
    guaranteed_tokens,
    salient_tokens,
)

__all__ = [
    "CONTENT_MAX_CHARS",
    "ELLIPSIS",
    "MAX_TOKEN_CHARS",
    "MAX_UNIT_CHARS",
    "TAIL_SEPARATOR",
    "TOKEN_BUDGET",
    "Encoder",
    "ExtractiveEncoder",
    "contains_token",
    "default_encoder",
    "encode_value",
    "guaranteed_tokens",
    "salient_tokens",
]
