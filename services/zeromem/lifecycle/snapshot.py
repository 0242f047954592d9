"""A comparable picture of the Redis state the command log determines.

Every memory hash, index, statistic, archive record, command result and shard position,
as plain Python values, so two states compare with ``==`` (a rebuild's check). Leases,
recall's usage ledger and the owners' data keys are not derived from the log and are left
out, as are Redis's own key expiries (a tombstone's expiry counts from when it was
written). With a ``vault``, a memory encrypted at rest is compared by what it holds
(``("sealed", plaintext)``): a Redis that lost its data lost the data keys too, and the
rebuild seals the same memories under new ones.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from zeromem.lifecycle.crypto import KeyUnavailableError, is_sealed
from zeromem.lifecycle.vault import Vault
from zeromem.store.keys import (
    ARCHIVE_SEAL,
    derived_from_log,
    layout,
    scope_pattern,
    shard_sequence_key,
)
from zeromem.store.pieces import scan_keys


async def snapshot(
    redis: Redis, tenant: str | None = None, vault: Vault | None = None
) -> dict[str, Any]:
    pattern = scope_pattern(tenant)
    names: list[Any] = sorted({raw async for raw in scan_keys(redis, pattern, 5000)})
    names = [n for n in names if derived_from_log(n.decode())]
    if tenant is None:
        positions = sorted({shard_sequence_key(p) for p in layout().pieces})
        names += [k.encode() for k in positions if await redis.exists(k)]
    out: dict[str, Any] = {}
    for start in range(0, len(names), 1000):
        chunk = names[start : start + 1000]
        async with redis.pipeline(transaction=False) as pipe:
            for name in chunk:
                pipe.type(name)
            types = await pipe.execute()
        async with redis.pipeline(transaction=False) as pipe:
            for name, kind in zip(chunk, types, strict=True):
                kind = kind.decode() if isinstance(kind, bytes) else kind
                if kind == "hash":
                    pipe.hgetall(name)
                elif kind == "zset":
                    pipe.zrange(name, 0, -1, withscores=True)
                elif kind == "set":
                    pipe.smembers(name)
                elif kind == "string":
                    pipe.get(name)
                else:
                    pipe.type(name)
            values = await pipe.execute()
        for name, value in zip(chunk, values, strict=True):
            if isinstance(value, set | list):
                value = sorted(value)
            out[name.decode()] = value
    if vault is not None:
        for name, value in out.items():
            if isinstance(value, dict) and any(map(is_sealed, value.values())):
                out[name] = await _opened(vault, name, value)
    return out


async def _opened(vault: Vault, name: str, fields: dict[bytes, Any]) -> dict[bytes, Any]:
    """A hash with its sealed fields opened: a memory's (``d``, ``rc``) or an owner's
    archive tier (each field a memory key)."""
    tenant = name.split(":", 2)[1]
    archive = name.endswith(":" + ARCHIVE_SEAL)
    memory = name.split(":", 3)[3] if not archive else ""
    places = {
        f: (f.decode(), ARCHIVE_SEAL) if archive else (memory, f.decode())
        for f, v in fields.items()
        if is_sealed(v)
    }
    await vault.prepare_open(tenant, [(key, fields[f]) for f, (key, _) in places.items()])
    out = dict(fields)
    for f, (key, field_name) in places.items():
        try:
            out[f] = ("sealed", vault.open(tenant, key, field_name, fields[f]))
        except KeyUnavailableError:
            out[f] = ("sealed", None)  # its key was shredded
    return out


def differences(before: dict[str, Any], after: dict[str, Any], limit: int = 10) -> list[str]:
    """Readable differences between two snapshots (empty when identical)."""
    out = []
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            out.append(f"{name}: {before.get(name)!r:.200} != {after.get(name)!r:.200}")
            if len(out) >= limit:
                break
    return out
