"""Turn a raw message into a command, or into the reason it must be dead-lettered.

Everything an agent could get wrong is caught here, before any state is touched: bytes
that are not msgpack, an unknown op, missing or mistyped fields, a key outside the grammar,
a tenant or an agent in the payload that is not the subject's (the subject's are what the
server checked), a shard that is not the owner's, and every limit of ``zeromem.limits``
(sizes, counts, nesting) with the rules that go with them (string map keys, no extension
types, finite numbers). A refusal names the limit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from zeromem import naming
from zeromem.limits import Limits, refusal
from zeromem.schemas import (
    Archive,
    Command,
    DecodeError,
    Expire,
    Forget,
    Patch,
    Put,
    decode_command,
    encode,
    owner_of,
)
from zeromem.shape import agent_refusal, finite_refusal, shape_refusal


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
    subject_tenant: str,
    data: bytes,
    *,
    shard: int,
    shards: int,
    limits: Limits,
    subject_agent: str | None = None,
) -> Command | Invalid:
    """``data`` as a command, or why not. ``subject_tenant`` and ``subject_agent``: the
    tenant and agent named by the subject it came on (``naming.parse_command_subject``);
    the server lets a credential publish only on its own, so the payload must agree."""
    value_bytes = limits.value_bytes
    if len(data) > value_bytes + ENVELOPE_ALLOWANCE:
        return Invalid(
            refusal(
                "value_bytes", f"message is {len(data)} bytes, limit {value_bytes} for the value"
            )
        )
    try:
        command = decode_command(data)
    except DecodeError as exc:
        return Invalid(f"invalid: {exc}")
    except RecursionError:
        return Invalid(refusal("nesting_depth", "value nested too deeply to decode"))
    if command.tenant != subject_tenant:
        return Invalid(
            f"tenant_mismatch: payload tenant {command.tenant!r} on subject of "
            f"tenant {subject_tenant!r}"
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
    reason = _envelope_refusal(command, limits) or _body_refusal(command, data, limits)
    return command if reason is None else Invalid(reason)


def _envelope_refusal(command: Command, limits: Limits) -> str | None:
    reason = agent_refusal(command.agent, limits.agent_chars)
    if reason is not None:
        return reason
    if len(command.key) > limits.key_chars:
        return refusal(
            "key_chars", f"key is {len(command.key)} characters, limit {limits.key_chars}"
        )
    # `type(command) is ...` each time (not a local alias) so the checker narrows command.
    if type(command) is Put:
        return finite_refusal(
            "ts, ttl_s, created_at or updated_at",
            command.ts,
            command.ttl_s,
            command.created_at,
            command.updated_at,
        )
    if type(command) is Expire:
        return finite_refusal("ts or ttl_s", command.ts, command.ttl_s)
    if type(command) is Forget:
        return finite_refusal(
            "ts, since or until", command.ts, command.since, command.until
        ) or _prefix_refusal(command.prefix, limits)
    if type(command) is Archive:
        return finite_refusal("ts or older_than", command.ts, command.older_than) or (
            _prefix_refusal(command.prefix, limits)
        )
    return finite_refusal("ts", command.ts)


def _prefix_refusal(prefix: str, limits: Limits) -> str | None:
    if len(prefix) > limits.key_chars:
        return refusal("key_chars", f"prefix is {len(prefix)} characters, limit {limits.key_chars}")
    return None


def _body_refusal(command: Command, data: bytes, limits: Limits) -> str | None:
    """The limits of what a put or a patch carries."""
    if type(command) is Put:
        body, where = command.value, "value"
    elif type(command) is Patch:
        body, where = command.patch, "patch"
    else:
        return None
    reason = shape_refusal(body, depth_limit=limits.nesting_depth, where=where)
    if reason is not None:
        return reason
    if len(data) > limits.value_bytes:  # only then can the value itself be over
        size = len(encode(body))
        if size > limits.value_bytes:
            return refusal("value_bytes", f"{where} is {size} bytes, limit {limits.value_bytes}")
    content = command.content
    if content is not None and len(content) > limits.content_chars:
        return refusal(
            "content_chars", f"content is {len(content)} characters, limit {limits.content_chars}"
        )
    tags = command.tags
    if tags:
        if len(tags) > limits.tags:
            return refusal("tags", f"{len(tags)} tags, limit {limits.tags}")
        longest = max(len(tag) for tag in tags)
        if longest > limits.tag_chars:
            return refusal("tag_chars", f"a tag of {longest} characters, limit {limits.tag_chars}")
    references = command.references
    if references and len(references) > limits.references:
        return refusal("references", f"{len(references)} references, limit {limits.references}")
    source = getattr(command, "source", None)
    if source is not None and len(source) > limits.source_chars:
        return refusal(
            "source_chars", f"source is {len(source)} characters, limit {limits.source_chars}"
        )
    return None
