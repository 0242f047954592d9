"""What a command does to a memory: the pure decision logic of the write path.

The engine sees a key's current state and one command and returns an ``Outcome``: the
result (applied / conflict / rejected), the new item, and the exact Redis index changes.
The store then commits each outcome atomically, guarded by the state it was computed on,
so a decision is never applied to a memory that changed underneath it.

Nothing here does I/O, which keeps the rules testable without servers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from zeromem import naming
from zeromem.schemas import (
    Applied,
    Command,
    Conflict,
    Delete,
    Expire,
    Feedback,
    FeedbackCounts,
    MemoryItem,
    MemoryKey,
    Patch,
    Put,
    Rejected,
    Result,
)
from zeromem.worker.merge_patch import merge_patch

# Redis index operations, flattened into the commit script's arguments.
ZADD, ZREM, SADD, SREM, HINCRBY, HSET = "za", "zr", "sa", "sr", "hi", "hs"
IndexOp = tuple[str, str, Any, Any]

# What the commit script does to the item hash.
WRITE, TOMBSTONE, COUNT_FEEDBACK, NOTHING = "w", "t", "f", "-"

FEEDBACK_FIELDS = {"liked": "fl", "disliked": "fd", "important": "fi"}


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the indexes need to know about a memory's content."""

    terms: dict[str, int]  # term -> frequency, for the recall inverted index
    length: int  # number of indexed terms (BM25's document length)
    tokens: int  # exact tokens of the content in the default encoding


Analyser = Callable[[MemoryItem], Analysis]
ContentDeriver = Callable[[Any], str]


@dataclass(slots=True)
class KeyState:
    """A key as Redis holds it. ``item`` is the stored memory even if it has expired but
    has not been reaped yet (its index entries still exist and must be cleaned)."""

    version: int = 0
    item: MemoryItem | None = None
    last_command: str = ""
    feedback: FeedbackCounts = field(default_factory=FeedbackCounts)

    def live(self, now: float) -> MemoryItem | None:
        item = self.item
        if item is None or (item.expires_at is not None and item.expires_at <= now):
            return None
        return item


@dataclass(slots=True)
class Outcome:
    command: Command
    key: str
    result: Result
    action: str = NOTHING
    # The state this outcome was decided on; the commit applies only if Redis still holds it.
    base_version: int = 0
    base_command: str = ""
    guarded: bool = True
    new_version: int = 0
    item: MemoryItem | None = None
    content_changed: bool = False
    ops: list[IndexOp] = field(default_factory=list)
    feedback_field: str = ""


class Engine:
    def __init__(self, analyse: Analyser, derive_content: ContentDeriver, encoding: str) -> None:
        self.analyse = analyse
        self.derive_content = derive_content
        self.token_field = f"tk:{encoding}"

    def resolve_key(self, command: Command) -> str:
        """A key with no name appends a new memory named after the command id (time-ordered
        and the same on every redelivery, so an append is idempotent too)."""
        parsed = MemoryKey.parse(command.key)
        return command.key if parsed.name else f"{command.key}:{command.id}"

    def decide(self, command: Command, key: str, state: KeyState, now: float) -> Outcome:
        """Decide ``command`` against ``state`` and advance ``state`` to what follows."""
        live = state.live(now)
        base = Outcome(
            command=command,
            key=key,
            result=self._rejected(command, key, now, ""),
            base_version=state.version,
            base_command=state.last_command,
        )
        if isinstance(command, Feedback):
            return self._feedback(command, key, state, live, now, base)

        expected = command.expected_version
        if expected is not None:
            current = state.version if live is not None else 0
            if current != expected:
                base.result = Conflict(
                    command_id=command.id, tenant=command.tenant, key=key, op=_op(command),
                    agent=command.agent, applied_at=now,
                    expected_version=expected, current_version=current,
                )  # fmt: skip
                return base

        if isinstance(command, Put):
            new = self._put_item(command, key, live, state.version + 1, now)
        elif isinstance(command, Patch | Expire):
            if live is None:
                base.result = self._rejected(command, key, now, "not_found: no memory at this key")
                return base
            new = (
                self._patched_item(command, live, state.version + 1, now)
                if isinstance(command, Patch)
                else msgspec.structs.replace(
                    live,
                    version=state.version + 1,
                    updated_at=now,
                    agent=command.agent,
                    expires_at=None if command.ttl_s is None else now + command.ttl_s,
                )
            )
        elif isinstance(command, Delete):
            if live is None:
                base.result = self._rejected(command, key, now, "not_found: no memory at this key")
                return base
            return self._tombstone(command, key, state, now, base)
        else:  # pragma: no cover - the decoder admits only the types above
            raise TypeError(f"unknown command {type(command).__name__}")

        base.action = WRITE
        base.new_version = new.version
        base.item = msgspec.structs.replace(new, feedback=state.feedback)
        base.content_changed = state.item is None or state.item.content != new.content
        base.ops = self._write_ops(command.tenant, key, state.item, new)
        base.result = Applied(
            command_id=command.id, tenant=command.tenant, key=key, op=_op(command),
            agent=command.agent, applied_at=now, version=new.version,
            previous_version=state.version if live is not None else 0, item=base.item,
        )  # fmt: skip
        state.version, state.item, state.last_command = new.version, new, command.id
        return base

    # --- the individual commands ---------------------------------------------------------

    def _put_item(
        self, command: Put, key: str, live: MemoryItem | None, version: int, now: float
    ) -> MemoryItem:
        content = command.content if command.content is not None else self.derive_content(
            command.value
        )
        return MemoryItem(
            key=key,
            value=command.value,
            content=content,
            type=command.type,
            created_at=live.created_at if live is not None else now,
            updated_at=now,
            version=version,
            tags=tuple(dict.fromkeys(command.tags)),
            references=command.references,
            source=command.source,
            confidence=command.confidence,
            expires_at=None if command.ttl_s is None else now + command.ttl_s,
            agent=command.agent,
        )

    def _patched_item(
        self, command: Patch, live: MemoryItem, version: int, now: float
    ) -> MemoryItem:
        value = merge_patch(live.value, command.patch)
        content = command.content
        if content is None:
            # Content derived from the value follows the value; content an agent wrote stays.
            derived_before = self.derive_content(live.value) == live.content
            content = self.derive_content(value) if derived_before else live.content
        return msgspec.structs.replace(
            live,
            value=value,
            content=content,
            tags=live.tags if command.tags is None else tuple(dict.fromkeys(command.tags)),
            references=live.references if command.references is None else command.references,
            version=version,
            updated_at=now,
            agent=command.agent,
        )

    def _tombstone(
        self, command: Delete, key: str, state: KeyState, now: float, base: Outcome
    ) -> Outcome:
        assert state.item is not None
        base.action = TOMBSTONE
        base.new_version = state.version + 1
        base.ops = self._delete_ops(command.tenant, key, state.item)
        base.result = Applied(
            command_id=command.id, tenant=command.tenant, key=key, op="delete",
            agent=command.agent, applied_at=now, version=base.new_version,
            previous_version=state.version,
        )  # fmt: skip
        state.version, state.item, state.last_command = base.new_version, None, command.id
        state.feedback = FeedbackCounts()
        return base

    def _feedback(
        self,
        command: Feedback,
        key: str,
        state: KeyState,
        live: MemoryItem | None,
        now: float,
        base: Outcome,
    ) -> Outcome:
        if live is None:
            base.result = self._rejected(command, key, now, "not_found: no memory at this key")
            return base
        # Feedback is a counter, not a change of the memory: it commutes with every other
        # command, so it bumps no version and needs no guard (many agents may send it at once).
        kind = command.kind.value
        counts = msgspec.structs.replace(
            state.feedback, **{kind: getattr(state.feedback, kind) + 1}
        )
        state.feedback = counts
        base.action = COUNT_FEEDBACK
        base.guarded = False
        base.feedback_field = FEEDBACK_FIELDS[kind]
        base.result = Applied(
            command_id=command.id, tenant=command.tenant, key=key, op="feedback",
            agent=command.agent, applied_at=now, version=state.version,
            previous_version=state.version,
        )  # fmt: skip
        return base

    @staticmethod
    def _rejected(command: Command, key: str, now: float, reason: str) -> Rejected:
        return Rejected(
            command_id=command.id, tenant=command.tenant, key=key, op=_op(command),
            agent=command.agent, applied_at=now, reason=reason,
        )  # fmt: skip

    # --- index maintenance ---------------------------------------------------------------

    def _write_ops(
        self, tenant: str, key: str, old: MemoryItem | None, new: MemoryItem
    ) -> list[IndexOp]:
        keys = naming.RedisKeys(tenant)
        owner = _owner(key)
        stats = keys.owner_stats(owner)
        ops: list[IndexOp] = [(ZADD, keys.by_time(owner), new.updated_at, key)]
        if old is None:
            ops += [
                (ZADD, keys.keys(), 0, key),
                (HINCRBY, stats, "n", 1),
                (SADD, naming.TENANTS_KEY, tenant, ""),
            ]
        if old is None or old.type != new.type:
            if old is not None:
                ops.append((SREM, keys.by_type(owner, old.type.value), key, ""))
            ops.append((SADD, keys.by_type(owner, new.type.value), key, ""))
        old_tags = set(old.tags) if old is not None else set()
        ops += [(SREM, keys.by_tag(owner, t), key, "") for t in old_tags.difference(new.tags)]
        ops += [(SADD, keys.by_tag(owner, t), key, "") for t in new.tags if t not in old_tags]

        new_doc = self.analyse(new)
        old_doc = self.analyse(old) if old is not None else _EMPTY
        if old is None or old_doc != new_doc:
            old_terms = old_doc.terms
            ops += [(ZREM, keys.by_term(owner, t), key, "") for t in old_terms if t not in new_doc.terms]
            ops += [
                (ZADD, keys.by_term(owner, t), tf, key)
                for t, tf in new_doc.terms.items()
                if old_terms.get(t) != tf
            ]
            if new_doc.length != old_doc.length:
                ops.append((HINCRBY, stats, "len", new_doc.length - old_doc.length))
            if new_doc.tokens != old_doc.tokens:
                ops.append((HINCRBY, stats, "tok", new_doc.tokens - old_doc.tokens))
        ops.append((HSET, keys.item(key), "dl", new_doc.length))
        ops.append((HSET, keys.item(key), self.token_field, new_doc.tokens))

        if new.expires_at is not None:
            ops.append((ZADD, keys.expiring(), new.expires_at, key))
            ops.append((SADD, naming.EXPIRING_TENANTS_KEY, tenant, ""))
        elif old is not None and old.expires_at is not None:
            ops.append((ZREM, keys.expiring(), key, ""))
        return ops

    def _delete_ops(self, tenant: str, key: str, old: MemoryItem) -> list[IndexOp]:
        keys = naming.RedisKeys(tenant)
        owner = _owner(key)
        stats = keys.owner_stats(owner)
        doc = self.analyse(old)
        ops: list[IndexOp] = [
            (ZREM, keys.by_time(owner), key, ""),
            (ZREM, keys.keys(), key, ""),
            (HINCRBY, stats, "n", -1),
            (SREM, keys.by_type(owner, old.type.value), key, ""),
        ]
        ops += [(SREM, keys.by_tag(owner, t), key, "") for t in old.tags]
        ops += [(ZREM, keys.by_term(owner, t), key, "") for t in doc.terms]
        if doc.length:
            ops.append((HINCRBY, stats, "len", -doc.length))
        if doc.tokens:
            ops.append((HINCRBY, stats, "tok", -doc.tokens))
        if old.expires_at is not None:
            ops.append((ZREM, keys.expiring(), key, ""))
        return ops


_EMPTY = Analysis(terms={}, length=0, tokens=0)


def _owner(key: str) -> str:
    ns, owner_id, _ = key.split(":", 2)
    return f"{ns}:{owner_id}"


def _op(command: Command) -> str:
    return type(command).__name__.lower()
