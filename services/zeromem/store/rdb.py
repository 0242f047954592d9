"""A point-in-time copy of Redis, fetched over the replication protocol.

Why this copy is consistent: Redis runs every command, and every Lua script, alone on its
one thread, and the commit script writes a command's memory hash, its index entries, the
tenant's totals, its result record and the shard's applied position (``zm:shard-seq``) in
one call (``store/commit.lua``). For a full resynchronisation Redis forks; the child
serialises the memory the parent had at the instant of the fork, which falls between two
commands. So the copy holds each script's writes entirely or not at all, and the
positions it records are exactly the commands it holds: a consistent cut, while the
workers keep writing (the parent goes on serving; copy-on-write keeps the child's
picture). It is what ``redis-cli --rdb`` does.

``REPLCONF capa eof`` asks for the diskless transfer (the child writes the RDB to the
socket, never to Redis's own data directory, where a ``dump.rdb`` would keep an erased
tenant's data beyond ``erase-tenant``); ``REPLCONF rdb-only 1`` (Redis 7) says no
replication stream follows. Redis waits ``repl-diskless-sync-delay`` (5 s by default;
``zeromem up`` sets 0) for other replicas before it forks.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from zeromem.settings import Settings

_CHUNK = 1 << 20
_EOF_MARK_BYTES = 40


class SnapshotTransferError(RuntimeError):
    """Redis refused or broke the transfer of its point-in-time copy."""


def _command(*parts: str | bytes) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        out += [f"${len(data)}\r\n".encode(), data, b"\r\n"]
    return b"".join(out)


def _tls_context(settings: Settings) -> ssl.SSLContext:
    store = settings.store
    context = ssl.create_default_context(cafile=store.redis_tls_ca or None)
    if store.redis_tls_cert:
        context.load_cert_chain(store.redis_tls_cert, store.redis_tls_key or None)
    return context


async def _answer(reader: asyncio.StreamReader, what: str, optional: bool = False) -> None:
    line = await reader.readline()
    if line.startswith(b"+"):
        return
    if optional and line.startswith(b"-"):
        return  # an older server without this option: the transfer works without it
    raise SnapshotTransferError(f"Redis refused {what}: {line.decode(errors='replace').strip()}")


async def fetch_rdb(settings: Settings, into: Path, timeout_s: float = 600.0) -> int:
    """Write Redis's point-in-time copy (an RDB file) to ``into``; its size in bytes.
    Needs a user allowed SYNC and REPLCONF (the admin's)."""
    url = urlparse(settings.store.redis_url)
    user = unquote(url.username or "") or settings.store.redis_username
    password = unquote(url.password or "") or settings.store.redis_password
    tls = _tls_context(settings) if url.scheme == "rediss" else None
    reader, writer = await asyncio.open_connection(
        url.hostname or "127.0.0.1", url.port or 6379, ssl=tls, limit=_CHUNK
    )
    try:
        async with asyncio.timeout(timeout_s):
            if password:
                writer.write(_command("AUTH", *([user] if user else []), password))
                await _answer(reader, "the login")
            writer.write(_command("REPLCONF", "capa", "eof"))
            await _answer(reader, "REPLCONF capa eof")
            writer.write(_command("REPLCONF", "rdb-only", "1"))
            await _answer(reader, "REPLCONF rdb-only", optional=True)
            writer.write(_command("SYNC"))
            await writer.drain()
            header = b"\n"
            while header in (b"\n", b"\r\n"):  # newlines: the fork is on its way
                header = await reader.readline()
                if not header:
                    raise SnapshotTransferError("Redis closed the connection before the copy")
            if not header.startswith(b"$"):
                raise SnapshotTransferError(
                    f"Redis answered SYNC with {header.decode(errors='replace').strip()!r}"
                )
            with open(into, "wb") as out:  # noqa: ASYNC230 (a local file of ours)
                if header.startswith(b"$EOF:"):
                    return await _until_mark(reader, out, header[5:].strip())
                return await _sized(reader, out, int(header[1:]))
    finally:
        writer.close()


async def _sized(reader: asyncio.StreamReader, out: BinaryIO, size: int) -> int:
    left = size
    while left:
        data = await reader.read(min(left, _CHUNK))
        if not data:
            raise SnapshotTransferError(f"the copy ended {left} bytes early")
        out.write(data)
        left -= len(data)
    return size


async def _until_mark(reader: asyncio.StreamReader, out: BinaryIO, mark: bytes) -> int:
    """A diskless transfer: the copy ends with the 40 random bytes the header announced."""
    if len(mark) != _EOF_MARK_BYTES:
        raise SnapshotTransferError("Redis announced a malformed end mark")
    tail = b""
    written = 0
    while True:
        data = await reader.read(_CHUNK)
        if not data:
            raise SnapshotTransferError("the copy ended before its end mark")
        tail += data
        if tail.endswith(mark):
            body = tail[: -len(mark)]
            out.write(body)
            return written + len(body)
        keep = len(tail) - _EOF_MARK_BYTES  # what cannot be part of the mark
        if keep > 0:
            out.write(tail[:keep])
            written += keep
            tail = tail[keep:]
