"""Redis replies narrowed to what zeromem's connections get.

Every connection zeromem opens leaves ``decode_responses`` off, so a string reply is bytes;
redis-py types one as ``bytes | str`` (it cannot know how the connection was made). These
narrow a reply once where it is read, and fail loudly on a decoding connection."""

from __future__ import annotations


def as_bytes(raw: object) -> bytes:
    if type(raw) is bytes:
        return raw
    raise TypeError(f"Redis answered {type(raw).__name__}, not bytes (decode_responses on?)")


def as_text(raw: object) -> str:
    return as_bytes(raw).decode()
