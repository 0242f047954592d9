"""The audit trail: what the workers and the read services record on the retained
``ZM_AUDIT`` stream.

Writes are recorded per batch (one ``AuditBatch`` message per shard batch and tenant, so
the write path pays one publish per batch, not per command); reads are recorded per
request with the reader and the keys read, never the values. ``detail`` is a short
summary of what a write changed (content, type, patched fields) and is redacted for
sensitive memories and fields before it is built (see ``zeromem.lifecycle.redact``).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

REDACTED = "[redacted]"

AuditKind = Literal["write", "read", "dead_letter"]
# A write's status is its result's (``results.ResultStatus``); "" only when left out.
AuditStatus = Literal["", "applied", "conflict", "rejected", "read", "dead_letter"]


class AuditEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    kind: AuditKind
    at: float  # when it was applied (the command's stream time) or read
    tenant: str
    agent: str = ""  # who: the agent that sent the command, or the reader
    op: str = ""  # put, patch, ..., or get / list / recall for reads
    key: str = ""
    status: AuditStatus = ""
    command_id: str = ""
    seq: int = 0  # position in the command stream
    version_before: int = 0
    version_after: int = 0
    reason: str = ""
    keys: tuple[str, ...] = ()  # keys read, or the memories a forget / archive touched
    detail: dict[str, Any] = {}


class AuditBatch(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    entries: tuple[AuditEntry, ...] = ()
