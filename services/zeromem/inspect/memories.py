"""The memories view's data: owners, pages of memories, one memory with its references,
TTL and archive state, and its version history from the audit trail. Every read goes
through the viewer's client (its credential); values are masked here, before a template
or a JSON reply sees them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from zeromem import naming
from zeromem.lifecycle.audit import read_audit
from zeromem.lifecycle.redact import Redactor
from zeromem.schemas import REDACTED, AuditEntry, MemoryItem, MemoryKey, owner_of
from zeromem.sdk.client import MemoryClient


@dataclass(frozen=True, slots=True)
class Masker:
    """What the page may show of a memory: a sensitive one (put with ``sensitive=True``,
    or a key name matching the sensitive pattern) shows neither value nor content; any
    other shows its value with sensitive fields (``password``...) redacted."""

    redactor: Redactor

    def hidden(self, key: str, sensitive: bool = False) -> bool:
        return sensitive or self.redactor.key_is_sensitive(key)

    def item(self, item: MemoryItem) -> dict[str, Any]:
        out: dict[str, Any] = {**_DEFAULTS, **msgspec.to_builtins(item)}  # every field named
        if self.hidden(item.key, item.sensitive):
            out["value"] = REDACTED
            out["content"] = REDACTED
            out["masked"] = True
        else:
            out["value"] = self.redactor.value(item.value)
            out["masked"] = out["value"] != msgspec.to_builtins(item.value)
        out["owner"] = owner_of(item.key)
        out["state"] = state_of(item)
        return out


# A memory's fields left at their defaults, which its wire form omits.
_DEFAULTS: dict[str, Any] = {
    f.name: msgspec.to_builtins(f.default)
    for f in msgspec.structs.fields(MemoryItem)
    if f.default is not msgspec.NODEFAULT
}


def state_of(item: MemoryItem, now: float | None = None) -> dict[str, Any]:
    """TTL and archive state, as the page says them."""
    now = time.time() if now is None else now
    if item.archived_at:
        return {"tier": "archived", "archived_at": item.archived_at}
    state: dict[str, Any] = {"tier": "live"}
    if item.expires_at:
        state.update(
            expires_at=item.expires_at,
            expires_in_s=max(0.0, item.expires_at - now),
            ttl_s=item.ttl_s,
            sliding=item.refresh_on_read,
        )
    return state


def owner_prefix(prefix: str) -> str:
    """The owner part of a key prefix: ``user:u1:pref`` -> ``user:u1``; shorter prefixes
    (``user:u``) are owner prefixes already."""
    parts = prefix.split(":")
    return ":".join(parts[:2]) if len(parts) > 2 else prefix


async def owners_page(client: MemoryClient, prefix: str, cursor: str, limit: int) -> dict[str, Any]:
    reply = await client.owners(owner_prefix(prefix), cursor=cursor, limit=limit)
    return {
        "owners": [msgspec.to_builtins(o) for o in reply.owners],
        "next_cursor": reply.next_cursor,
    }


async def memories_page(
    client: MemoryClient, masker: Masker, prefix: str, cursor: str, limit: int
) -> dict[str, Any]:
    reply = await client.list(prefix, cursor=cursor, limit=limit, slide=False)
    return {"items": [masker.item(i) for i in reply.items], "next_cursor": reply.next_cursor}


async def archived_page(
    client: MemoryClient, masker: Masker, owner: str, cursor: str, limit: int
) -> dict[str, Any]:
    reply = await client.archived(owner, cursor=cursor, limit=limit)
    return {"items": [masker.item(i) for i in reply.items], "next_cursor": reply.next_cursor}


async def memory(client: MemoryClient, masker: Masker, key: str) -> dict[str, Any] | None:
    """One memory, live or archived (None: neither), with each reference's state."""
    MemoryKey.parse(key)  # a bad key is refused here, with the grammar's message
    item = await client.get(key, slide=False)  # looking is not using: no sliding expiry
    if item is None:
        found = await client.archived(owner_of(key), key=key)
        item = found.items[0] if found.items else None
    if item is None:
        return None
    out = masker.item(item)
    out["references"] = [{"key": ref, "valid": _is_key(ref)} for ref in item.references]
    return out


def _is_key(text: str) -> bool:
    try:
        MemoryKey.parse(text)
    except ValueError:
        return False
    return True


@dataclass
class History:
    """A memory's versions as the audit trail recorded them, oldest first."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False  # reaches back to the memory's creation and up to its version
    scanned_from: float | None = None
    note: str = ""
    error: str = ""


async def history(
    client: MemoryClient, key: str, current: dict[str, Any] | None, scan_limit: int
) -> History:
    """The audit records of ``key``: its owner's shard only, from the memory's creation
    on, at most ``scan_limit`` records (a busy shard's whole trail is never read)."""
    shard = naming.shard_for(client.tenant, owner_of(key), client.shards)
    since = current["created_at"] - 1.0 if current else None
    try:
        entries = await read_audit(
            client.nc, client.tenant, key=key, since=since, shard=shard, max_messages=scan_limit
        )
    except PermissionError as exc:
        return History(error=str(exc))
    found = [_history_entry(e, key) for e in entries if e.kind == "write"]
    result = History(found, scanned_from=since)
    # Complete when it starts with the put that created the memory (read from the
    # memory's creation on) and reaches the version the memory has now.
    applied = [e for e in found if e["status"] == "applied"]
    starts = bool(applied) and applied[0]["op"] == "put"
    newest = max((e["version_after"] for e in applied), default=0)
    result.complete = starts and (current is None or newest >= current["version"])
    if not result.complete:
        result.note = (
            f"read at most {scan_limit} audit records of shard {shard} from the "
            "memory's creation: other versions may lie outside them"
        )
    return result


def _history_entry(entry: AuditEntry, key: str) -> dict[str, Any]:
    # ``detail`` was redacted by the worker before it was recorded (lifecycle.redact).
    # A forget or an archive is recorded under its owner, with the keys it touched.
    return {
        "at": entry.at,
        "agent": entry.agent,
        "op": entry.op,
        "status": entry.status,
        "version_before": entry.version_before,
        "version_after": entry.version_after,
        "reason": entry.reason,
        "detail": entry.detail,
        "seq": entry.seq,
        "via_owner": entry.key if entry.key != key else "",
    }
