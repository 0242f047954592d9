"""The memory item: what the workers store and what reads and recall return."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

import msgspec

CONTENT_MAX_CHARS = 200

Content = Annotated[str, msgspec.Meta(max_length=CONTENT_MAX_CHARS)]
Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[^\s]+$")]
Timestamp = Annotated[float, msgspec.Meta(ge=0.0)]


class MemoryType(str, Enum):
    MESSAGE = "message"
    TOOL_RESULT = "tool_result"
    USER_PREFERENCE = "user_preference"
    USER_FEEDBACK = "user_feedback"
    SYSTEM_EVENT = "system_event"
    FACT = "fact"
    DECISION = "decision"
    TASK_STATE = "task_state"


class FeedbackKind(str, Enum):
    LIKED = "liked"
    DISLIKED = "disliked"
    IMPORTANT = "important"


class FeedbackCounts(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    liked: int = 0
    disliked: int = 0
    important: int = 0


class MemoryItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One memory. ``content`` is the short human-readable form used for ranking and for
    injection into prompts; ``value`` is the structured payload an agent reads back exactly."""

    key: str
    value: Any
    content: Content
    type: MemoryType
    created_at: Timestamp
    updated_at: Timestamp
    version: int
    tags: tuple[Tag, ...] = ()
    references: tuple[str, ...] = ()
    source: str | None = None
    confidence: Confidence = 1.0
    expires_at: Timestamp | None = None
    feedback: FeedbackCounts = FeedbackCounts()
    agent: str | None = None  # the agent whose command last changed it
    ttl_s: float | None = None  # the time to live last set (sliding expiry extends by it)
    refresh_on_read: bool = False  # sliding expiry: reads push expires_at out by ttl_s
    sensitive: bool = False  # never in the audit trail or a log line (content, value)
    archived_at: Timestamp | None = None  # set on the archive tier's copy only
    index_key: bool = False  # recall indexes the key's name too (Put.index_key)
