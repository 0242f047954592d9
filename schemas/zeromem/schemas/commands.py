"""Memory commands: what agents publish. Version 1 of the wire contract.

Every command is a frozen struct that rejects unknown fields, tagged by ``op`` so one
decoder reads them all. ``expected_version`` is the optimistic lock:
absent = last writer wins, 0 = the memory must not exist yet, N = it must be at version N.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from zeromem.schemas.keys import KEY_PATTERN, TENANT_PATTERN
from zeromem.schemas.memory import Confidence, Content, FeedbackKind, MemoryType, Tag, Timestamp

WIRE_VERSION = 1

CommandId = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$")]
Tenant = Annotated[str, msgspec.Meta(pattern=f"^{TENANT_PATTERN}$")]
AgentId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Key = Annotated[str, msgspec.Meta(pattern=KEY_PATTERN)]
Version = Annotated[int, msgspec.Meta(ge=0)]
TtlSeconds = Annotated[float, msgspec.Meta(gt=0)]


class _Command(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="op"
):
    id: CommandId
    tenant: Tenant
    agent: AgentId
    ts: Timestamp
    key: Key
    expected_version: Version | None = None
    v: Literal[1] = WIRE_VERSION


class Put(_Command, tag="put"):
    """Create or replace a memory."""

    value: Any = None
    content: Content | None = None  # derived from the value when absent
    type: MemoryType = MemoryType.FACT
    tags: tuple[Tag, ...] = ()
    references: tuple[Key, ...] = ()
    source: str | None = None
    confidence: Confidence = 1.0
    ttl_s: TtlSeconds | None = None


class Patch(_Command, tag="patch"):
    """Change a memory's value with a JSON merge patch (RFC 7396); other fields optional."""

    patch: Any = None
    content: Content | None = None
    tags: tuple[Tag, ...] | None = None
    references: tuple[Key, ...] | None = None


class Delete(_Command, tag="delete"):
    """Remove a memory. Its version survives as a tombstone, so a compare-and-set on an
    old version can never succeed against a newer memory of the same key."""


class Expire(_Command, tag="expire"):
    """Set a memory's time to live (seconds from now), or clear it with ``ttl_s=None``."""

    ttl_s: TtlSeconds | None = None


class Feedback(_Command, tag="feedback"):
    """Count one piece of feedback on a memory; it weighs the memory in recall."""

    kind: FeedbackKind = FeedbackKind.LIKED


Command = Put | Patch | Delete | Expire | Feedback
COMMAND_TYPES: tuple[type[_Command], ...] = (Put, Patch, Delete, Expire, Feedback)
