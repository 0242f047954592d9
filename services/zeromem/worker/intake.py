"""Turn a raw message into a command, or into the reason it must be dead-lettered.

Everything an agent could get wrong is caught here, before any state is touched: bytes
that are not msgpack, an unknown op, missing or mistyped fields, a key outside the grammar,
content over 200 characters, a value over the size limit, a tenant or an agent in the
payload that is not the subject's (the subject's are what the server checked), a shard that
is not the owner's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from zeromem import naming
from zeromem.schemas import Command, DecodeError, Patch, Put, decode_command, encode, owner_of


@dataclass(frozen=True, slots=True)
class Invalid:
    reason: str


# Room for the envelope (ids, key, content, tags) around a value at the size limit.
ENVELOPE_ALLOWANCE = 8 * 1024


@functools.lru_cache(maxsize=65536)
def _shard_of_key(tenant: str, key: str, shards: int) -> int:
    # Cached: a worker sees the same keys again and again, and hashing each command's owner
    # was a few percent of its time.
    return naming.shard_for(tenant, owner_of(key), shards)


def admit(
    subject_tenant: str, data: bytes, *, shard: int, shards: int, max_value_bytes: int,
    subject_agent: str | None = None,
) -> Command | Invalid:  # fmt: skip
    """``data`` as a command, or why not. ``subject_tenant`` and ``subject_agent``: the
    tenant and agent named by the subject it came on (``naming.parse_command_subject``);
    the server lets a credential publish only on its own, so the payload must agree."""
    if len(data) > max_value_bytes + ENVELOPE_ALLOWANCE:
        return Invalid(
            f"too_large: message is {len(data)} bytes, limit {max_value_bytes} for the value"
        )
    try:
        command = decode_command(data)
    except DecodeError as exc:
        return Invalid(f"invalid: {exc}")
    except RecursionError:
        return Invalid("invalid: value nested too deeply")
    if command.tenant != subject_tenant:
        return Invalid(
            f"tenant_mismatch: payload tenant {command.tenant!r} "
            f"on subject of tenant {subject_tenant!r}"
        )
    if subject_agent is not None and command.agent != subject_agent:
        return Invalid(
            f"agent_mismatch: payload agent {command.agent!r} on subject of agent {subject_agent!r}"
        )
    expected_shard = _shard_of_key(command.tenant, command.key, shards)
    if expected_shard != shard:
        return Invalid(
            f"wrong_shard: owner {owner_of(command.key)!r} belongs to shard {expected_shard} "
            f"of {shards}, published to shard {shard} (do publisher and workers agree on the "
            "shard count?)"
        )
    if len(data) > max_value_bytes and isinstance(command, (Put, Patch)):
        size = len(encode(command.value if isinstance(command, Put) else command.patch))
        if size > max_value_bytes:
            return Invalid(f"too_large: value is {size} bytes, limit {max_value_bytes}")
    return command
