"""A memory's hash as the write path and the exact reads see it (``KeyState``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from zeromem.schemas import FeedbackCounts, MemoryItem
from zeromem.store.keys import ITEM_FIELDS

_ITEM_DECODER = msgspec.msgpack.Decoder(MemoryItem)
decode_item = _ITEM_DECODER.decode  # a stored ``d`` field or archive record -> MemoryItem
NO_FEEDBACK = FeedbackCounts()


@dataclass(slots=True)
class KeyState:
    """A key as Redis holds it. ``item`` is the stored memory even if it has expired but
    has not been reaped yet (its index entries still exist and must be cleaned)."""

    version: int = 0
    item: MemoryItem | None = None
    last_command: str = ""
    feedback: FeedbackCounts = field(default_factory=FeedbackCounts)
    archived: bool = False  # the key's memory sits in the archive tier
    archived_item: MemoryItem | None = None  # read only for a restore
    size: int = 0  # bytes of the stored memory (its encoded form), 0 without one

    def live(self, now: float) -> MemoryItem | None:
        item = self.item
        if item is None or (item.expires_at is not None and item.expires_at <= now):
            return None
        return item


def decode_item_hash(fields: Sequence[bytes | None]) -> KeyState:
    """``HMGET item <ITEM_FIELDS>`` -> KeyState."""
    version, data, last, liked, disliked, important, archived = fields
    feedback = (
        FeedbackCounts(int(liked or 0), int(disliked or 0), int(important or 0))
        if liked or disliked or important
        else NO_FEEDBACK
    )
    item = _ITEM_DECODER.decode(data) if data else None
    return KeyState(
        int(version or 0),
        item,
        (last or b"").decode(),
        feedback,
        archived == b"1",
        size=len(data) if data else 0,
    )


__all__ = ["ITEM_FIELDS", "NO_FEEDBACK", "KeyState", "decode_item", "decode_item_hash"]
