"""The recall card: the part of a memory recall reads, stored beside the memory itself.

A memory's hash holds the whole ``MemoryItem`` (``d``): the structured value an agent
reads back, its source, agent, time-to-live settings. Ranking and packing need a fraction
of it, while a recall reads dozens of memories. So the worker writes, in the same atomic
commit as the memory, a compact card (``keys.CARD_FIELD``) with what recall needs, and the id of the
command that wrote it (``keys.CARD_COMMAND_FIELD``).

The card is trusted only while ``rl`` equals the hash's last command id (``lc``), which
every write of ``d`` sets: a version written without a card (before cards existed, or by
a write path that does not refresh it) is detected, and recall reads ``d`` instead.
Feedback counts are not on the card: they have their own hash fields.
"""

from __future__ import annotations

import msgspec

from zeromem.schemas import MemoryItem


class Card(msgspec.Struct, array_like=True, frozen=True):
    content: str
    type: str  # the MemoryType value
    created_at: float
    updated_at: float
    version: int
    tags: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    expires_at: float | None = None
    # Never on a stored card: set on the view of an archived memory (include_archived).
    archived: bool = False


_ENCODE = msgspec.msgpack.Encoder().encode
decode_card = msgspec.msgpack.Decoder(Card).decode


def card_of(item: MemoryItem) -> Card:
    return Card(
        item.content,
        item.type.value,
        item.created_at,
        item.updated_at,
        item.version,
        item.tags,
        item.references,
        item.expires_at,
        item.archived_at is not None,
    )


def encode_card(item: MemoryItem) -> bytes:
    return _ENCODE(card_of(item))


__all__ = ["Card", "card_of", "decode_card", "encode_card"]
