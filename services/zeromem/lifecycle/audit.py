"""Building and reading the audit trail (stream ``ZM_AUDIT``).

The workers call ``write_entries`` once per batch and publish one ``AuditBatch`` per
tenant in it; the read services publish one entry per read. ``read_audit`` replays a
tenant's records in order (``zeromem audit``), dropping the repeats a redelivered batch
causes (the same command id audited twice).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from zeromem import naming
from zeromem.lifecycle.redact import Redactor
from zeromem.schemas import (
    REDACTED,
    Applied,
    Archive,
    AuditBatch,
    AuditEntry,
    Command,
    Conflict,
    Forget,
    MemoryType,
    Patch,
    Put,
    Rejected,
    Result,
    decode,
    status_of,
)


def write_entry(
    command: Command, seq: int, result: Result, redactor: Redactor, encrypted: bool = False
) -> AuditEntry:
    """One audited command: who, what, when, the result, versions before and after, and
    a redacted summary of the change (never a sensitive memory's content or value, nor
    any of a tenant whose memories are ``encrypted`` at rest: the audit stream is not
    sealed with the owners' keys, so it must not hold what they protect)."""
    before = after = 0
    reason = ""
    keys: tuple[str, ...] = ()
    if type(result) is Applied:
        before, after, keys = result.previous_version, result.version, result.keys
    elif type(result) is Conflict:
        before = after = result.current_version
        reason = f"expected version {result.expected_version}"
    elif type(result) is Rejected:
        reason = redactor.text(result.reason)
    return AuditEntry(
        kind="write",
        at=result.applied_at,
        tenant=result.tenant,
        agent=command.agent,
        op=result.op,
        key=result.key,
        status=status_of(result),
        command_id=command.id,
        seq=seq,
        version_before=before,
        version_after=after,
        reason=reason,
        keys=keys,
        detail=_detail(command, result, redactor, encrypted),
    )


def _detail(
    command: Command, result: Result, redactor: Redactor, encrypted: bool
) -> dict[str, Any]:
    applied = type(result) is Applied
    item = result.item if applied else None  # type: ignore[union-attr]
    if type(command) is Put:
        sensitive = encrypted or command.sensitive or (item is not None and item.sensitive)
        hidden = sensitive or redactor.key_is_sensitive(result.key)
        content = item.content if item else command.content
        return {
            "type": _TYPE_NAMES[command.type],
            # the agent's own content may hold a secret of a known shape ("token=sk-...")
            "content": REDACTED if hidden else (redactor.text(content) if content else content),
        }
    if type(command) is Patch:
        names = _field_names(command.patch, redactor)
        if (
            encrypted
            or not applied
            or item is None
            or item.sensitive
            or redactor.key_is_sensitive(result.key)
        ):
            # A refused patch's memory may be sensitive; only field names are certain to be safe.
            return {"fields": names}
        return {"fields": names, "patch": redactor.value(command.patch)}
    if type(command) is Forget:
        return {
            k: v
            for k, v in (
                ("prefix", command.prefix),
                ("since", command.since),
                ("until", command.until),
            )
            if v
        }
    if type(command) is Archive:
        return {
            "older_than": command.older_than,
            **({"prefix": command.prefix} if command.prefix else {}),
        }
    return {}


def _field_names(patch: Any, redactor: Redactor) -> list[str]:
    """A patch's top-level field names as text (a map may have bytes or integer keys, which
    do not sort together), a name shaped like a secret redacted."""
    if not isinstance(patch, dict):
        return []
    return sorted(
        redactor.text(k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k))
        for k in patch
    )


_TYPE_NAMES = {t: t.value for t in MemoryType}  # an enum's .value is a slow property


def read_entry(
    tenant: str, reader: str, op: str, keys: Iterable[str], detail: dict[str, Any] | None = None
) -> AuditEntry:
    return AuditEntry(
        kind="read",
        at=time.time(),
        tenant=tenant,
        agent=reader,
        op=op,
        status="read",
        keys=tuple(keys),
        detail=detail or {},
    )


def dead_letter_entry(
    tenant: str, subject: str, reason: str, seq: int, redactor: Redactor
) -> AuditEntry:
    return AuditEntry(
        kind="dead_letter",
        at=time.time(),
        tenant=tenant,
        status="dead_letter",
        seq=seq,
        reason=redactor.text(reason[:300]),
        detail={"subject": subject},
    )


async def read_audit(
    nc: NatsClient,
    tenant: str,
    *,
    key: str | None = None,
    agent: str | None = None,
    since: float | None = None,
    limit: int | None = None,
    idle_timeout: float = 2.0,
    shard: int | None = None,
    max_messages: int | None = None,
    read_limit_s: float = 60.0,
) -> list[AuditEntry]:
    """The tenant's audit records in stream order, filtered. A key matches an entry about
    it, a read of it, and a forget / archive that touched it.

    Read through a pull consumer whose filter (the tenant's audit subjects) is named in its
    create subject: the server lets an auditor's credential create no other (an agent's
    credential none at all). How many records there are is known when it is created, so
    the read stops at the last one without waiting. ``shard`` narrows the read to the
    write records of one shard (a key's history lies in its owner's shard);
    ``max_messages`` stops it after that many records (from ``since`` on). A read that
    cannot finish within ``read_limit_s`` raises TimeoutError rather than return a trail
    with a silent gap."""
    js = nc.jetstream()
    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    if since is not None:
        from datetime import UTC, datetime

        start = datetime.fromtimestamp(since, UTC).isoformat()
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME,
            # nats-py sends the field as given, and the server reads RFC 3339 text
            opt_start_time=start,  # type: ignore[arg-type]
        )
    config.name = nc._nuid.next().decode()
    config.filter_subject = (
        naming.audit_tenant_subject(tenant)
        if shard is None
        else naming.audit_write_subject(tenant, shard)
    )
    config.ack_policy = AckPolicy.NONE
    config.inactive_threshold = 60.0
    config.mem_storage = True
    config.num_replicas = 1
    try:
        info = await js.add_consumer(naming.AUDIT_STREAM, config)
    except NotFoundError:  # no audit stream yet: nothing was ever recorded
        return []
    except NatsTimeoutError:
        raise PermissionError(
            "no answer to opening the audit trail: this credential may not read it (issue "
            "one with `zeromem auth issue TENANT AGENT --audit`), or JetStream is down"
        ) from None
    remaining = min(info.num_pending or 0, max_messages or info.num_pending or 0)
    out: list[AuditEntry] = []
    seen: set[tuple[str, str]] = set()
    sub = await js.pull_subscribe_bind(consumer=config.name, stream=naming.AUDIT_STREAM)
    deadline = time.monotonic() + read_limit_s
    try:
        while remaining > 0:
            try:
                msgs = await sub.fetch(min(remaining, 256), timeout=idle_timeout)
            except Exception as exc:  # nats' own timeout type
                if "Timeout" not in type(exc).__name__:
                    raise
                # A slow fetch is not the end of the trail (a busy server answers late):
                # the consumer's count of what is left says whether records remain.
                remaining = min(remaining, (await sub.consumer_info()).num_pending or 0)
                if remaining and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the audit trail stopped answering with {remaining} records unread"
                    ) from None
                continue
            for msg in msgs:
                remaining -= 1
                for entry in decode(msg.data, AuditBatch).entries:
                    if entry.kind == "write":
                        ident = (entry.command_id, entry.status)
                        if ident in seen:
                            continue
                        seen.add(ident)
                    if _matches(entry, key, agent):
                        out.append(entry)
                remaining = min(remaining, msg.metadata.num_pending)
            if limit is not None and len(out) >= limit:
                break
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await js.delete_consumer(naming.AUDIT_STREAM, config.name)
    return out[-limit:] if limit else out


def _matches(entry: AuditEntry, key: str | None, agent: str | None) -> bool:
    if agent is not None and entry.agent != agent:
        return False
    if key is None:
        return True
    return entry.key == key or key in entry.keys


def audit_batches(entries: Sequence[AuditEntry]) -> dict[str, list[AuditEntry]]:
    by_tenant: dict[str, list[AuditEntry]] = {}
    for entry in entries:
        by_tenant.setdefault(entry.tenant, []).append(entry)
    return by_tenant
