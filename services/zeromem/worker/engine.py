"""What a command does to a memory: the pure decision logic of the write path.

The engine sees a key's current state and one command and returns an ``Outcome``: the
result (applied / conflict / rejected), the new item, and the exact Redis index changes.
The store then commits each outcome atomically, guarded by the state it was computed on,
so a decision is never applied to a memory that changed underneath it.

Nothing here does I/O, which keeps the rules testable without servers.

Over 500 lines on purpose: one ``Engine`` holds the rules of every op (put, patch, delete,
expire, feedback, touch, forget, archive, restore, and the reaper's expiry) and the index
changes they all build from (``_write_ops``, ``_delete_ops``, ``_stats``). Split by op,
each part would import the others' helpers; whole, it is the pure decision core that
``tests/unit/test_engine.py`` tests without servers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from zeromem.lifecycle.vault import EncryptionPolicy
from zeromem.schemas import (
    Applied,
    Archive,
    Command,
    Conflict,
    Delete,
    Expire,
    Feedback,
    FeedbackCounts,
    Forget,
    MemoryItem,
    MemoryKey,
    MemoryType,
    Patch,
    Put,
    Rejected,
    Restore,
    Result,
    Touch,
    op_of,
)
from zeromem.store.card import encode_card
from zeromem.store.items import KeyState
from zeromem.store.keys import (
    ARCHIVED_FIELD,
    CARD_COMMAND_FIELD,
    CARD_FIELD,
    DATA_KEY_FIELD,
    DOC_LENGTH_FIELD,
    FEEDBACK_FIELDS,
    STAT_LENGTH,
    STAT_MEMORIES,
    STAT_TOKENS,
    expiring_tenants_key,
    redis_keys,
    stat_memories_of_type,
    stat_tokens_of_type,
    tenants_key,
    token_field,
)
from zeromem.store.postings import posting_score
from zeromem.store.text import same_source_text
from zeromem.worker.merge_patch import merge_patch

# Redis index operations, flattened into the commit script's arguments.
ZADD, ZREM, SADD, SREM, HINCRBY, HSET, HDEL = "za", "zr", "sa", "sr", "hi", "hs", "hd"
IndexOp = tuple[str, str, Any, Any]

# What the commit script does to the item hash (commit.lua reads these letters).
Action = Literal["w", "t", "f", "-", "a"]
WRITE: Final = "w"
TOMBSTONE: Final = "t"
COUNT_FEEDBACK: Final = "f"
NOTHING: Final = "-"
ARCHIVE: Final = "a"

REAPER_AGENT = "zeromem-reaper"  # the agent id recorded on expiries


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the indexes need to know about a memory's content."""

    terms: dict[str, int]  # term -> frequency, for the recall inverted index
    length: int  # number of indexed terms (BM25's document length)
    tokens: int  # exact tokens of the content in the default encoding


Analyser = Callable[[MemoryItem], Analysis]
ContentDeriver = Callable[[Any], str]


@dataclass(slots=True)
class Outcome:
    command: Command
    key: str
    # Set on every path before the outcome leaves the engine. Built with None first (each
    # `type: ignore[arg-type]` where an Outcome is made) rather than a placeholder result
    # allocated per command that every path would then replace.
    result: Result
    action: Action = NOTHING
    # The state this outcome was decided on; the commit applies only if Redis still holds it.
    base_version: int = 0
    base_command: str = ""
    guarded: bool = True
    new_version: int = 0
    item: MemoryItem | None = None
    content_changed: bool = False
    # A write must clear the expiry a tombstone's hash carries; no other item hash has one,
    # so a write on top of a stored memory (or of nothing at all) skips that call.
    clears_expiry: bool = True
    ops: list[IndexOp] = field(default_factory=list)
    feedback_field: str = ""
    # False for the per-memory parts of a forget / archive: the command's result is
    # recorded once, by its summary outcome, not once per memory it touched.
    record: bool = True
    # Feedback coalesced into this one (same key and kind, same batch): counted together
    # in one increment, each still recorded under its own command id.
    followers: list[Outcome] = field(default_factory=list)
    # The command's stream sequence, set by the applier: its result's place among the
    # tenant's results on the shard, which keep only the newest (Limits.idempotency_*).
    sequence: int = 0


DEFAULT_MAX_CLOCK_SKEW_S = 300.0


class Engine:
    def __init__(
        self,
        analyse: Analyser,
        derive_content: ContentDeriver,
        encoding: str,
        max_clock_skew_s: float = DEFAULT_MAX_CLOCK_SKEW_S,
        encryption: EncryptionPolicy | None = None,
    ) -> None:
        self._analyse = analyse
        # Memories encrypted at rest get no term postings: a posting key names its term in
        # clear (``RedisKeys.by_term``), which would put the content back in Redis.
        self.encryption = encryption
        self.derive_content = derive_content
        self.token_field = token_field(encoding)
        # How far a put's own times (``Put.created_at`` / ``updated_at``) may stray from
        # the time the command was stored, unless it came on the import subject (older
        # times allowed there, never future ones).
        self.max_clock_skew_s = max_clock_skew_s

    def warm_up(self) -> None:
        """Run the analyser once, so what it loads lazily (the tokenizer's vocabulary takes
        a few hundred milliseconds) is loaded at start rather than on the first command."""
        self._analyse(
            MemoryItem(
                key="zeromem:warm:up",
                value=None,
                content="warm up",
                type=MemoryType.FACT,
                created_at=0.0,
                updated_at=0.0,
                version=0,
            )
        )

    def resolve_key(self, command: Command) -> str:
        """A key with no name appends a new memory named after the command id (time-ordered
        and the same on every redelivery, so an append is idempotent too)."""
        key = command.key
        # Neither the namespace nor the owner id nor the name may hold a ':', so a key the
        # decoder validated has a name exactly when it has two: no need to parse it again.
        if key.count(":") == 2:
            return key
        if type(command) in _OWNER_COMMANDS:
            return key  # names the owner the command works over
        parsed = MemoryKey.parse(key)
        return key if parsed.name else f"{key}:{command.id}"

    def decide(
        self, command: Command, key: str, state: KeyState, now: float, importing: bool = False
    ) -> Outcome:
        """Decide ``command`` against ``state`` and advance ``state`` to what follows.
        ``importing``: it came on the import subject, where a put may be backdated."""
        stored = state.item
        expired = stored is not None and stored.expires_at is not None and stored.expires_at <= now
        live = None if expired else stored  # as KeyState.live, without the call
        # Every path below sets the result; none is built that would be thrown away.
        base = Outcome(
            command,
            key,
            None,  # type: ignore[arg-type]  # result set below (Outcome.result)
            base_version=state.version,
            base_command=state.last_command,
        )
        if isinstance(command, Feedback):
            return self._feedback(command, key, state, live, now, base)
        if isinstance(command, Touch):
            return self._touch(command, key, state, live, now, base)

        expected = command.expected_version
        if expected is not None:
            current = state.version if live is not None else 0
            if current != expected:
                base.result = Conflict(
                    command_id=command.id,
                    tenant=command.tenant,
                    key=key,
                    op=op_of(command),
                    agent=command.agent,
                    applied_at=now,
                    expected_version=expected,
                    current_version=current,
                )
                return base

        # A memory whose time has passed counts as reaped whether or not the reaper got to
        # it yet: the reaper's tombstone takes a version, so a write after expiry takes
        # the next one either way. That keeps versions a function of the command log alone
        # (a rebuild replays the log without the reaper's timing).
        next_version = state.version + (2 if expired else 1)
        if isinstance(command, Put):
            if command.created_at is not None or command.updated_at is not None:
                refusal = self._time_refusal(command, now, importing)
                if refusal:
                    base.result = self._rejected(command, key, now, refusal)
                    return base
            new = self._put_item(command, key, live, next_version, now)
        elif isinstance(command, Restore):
            return self._restore(command, key, state, live, now, base)
        elif isinstance(command, (Patch, Expire)):
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
                    ttl_s=command.ttl_s,
                    refresh_on_read=(
                        live.refresh_on_read
                        if command.refresh_on_read is None
                        else command.refresh_on_read
                    )
                    and command.ttl_s is not None,
                )
            )
        elif isinstance(command, Delete):
            if live is None:
                base.result = self._rejected(command, key, now, "not_found: no memory at this key")
                return base
            return self._tombstone(command, key, state, now, base, "delete")
        else:  # pragma: no cover - the decoder admits only the types above
            raise TypeError(f"unknown command {type(command).__name__}")

        if expired:
            state.feedback = FeedbackCounts()  # the expired memory's feedback went with it
        feedback = state.feedback
        item = new if new.feedback == feedback else msgspec.structs.replace(new, feedback=feedback)
        base.action = WRITE
        base.new_version = new.version
        base.item = item
        base.content_changed = stored is None or stored.content != new.content
        base.clears_expiry = stored is None and state.version > 0
        base.ops = self._write_ops(command.tenant, key, stored, new, command.id)
        if expired:
            item_key = redis_keys(command.tenant).item(key)
            base.ops += [(HDEL, item_key, f, "") for f in FEEDBACK_FIELDS.values()]
        if state.archived:
            # a write replaces the archived memory, as it would replace a live one
            base.ops += self._unarchive_ops(command.tenant, key)
            state.archived = False
        base.result = Applied(
            command_id=command.id,
            tenant=command.tenant,
            key=key,
            op=op_of(command),
            agent=command.agent,
            applied_at=now,
            version=new.version,
            previous_version=state.version if live is not None else 0,
            item=item,
        )
        state.version, state.item, state.last_command = new.version, new, command.id
        return base

    # --- the individual commands ---------------------------------------------------------

    def _time_refusal(self, command: Put, now: float, importing: bool) -> str:
        """Why a put's own times are refused ("" when they are fine)."""
        created, updated = command.created_at, command.updated_at
        if created is not None and updated is not None and updated < created:
            return "invalid: updated_at is before created_at"
        skew = self.max_clock_skew_s
        for name, at in (("created_at", created), ("updated_at", updated)):
            if at is None:
                continue
            if at > now + skew:
                return (
                    f"clock_skew: {name} is {at - now:.0f} s after the time the command "
                    f"was stored; at most max_clock_skew_s={skew:g}"
                )
            if at < now - skew and not importing:
                return (
                    f"clock_skew: {name} is {now - at:.0f} s before the time the command "
                    f"was stored; at most max_clock_skew_s={skew:g} on an agent's command "
                    "subject (older times come through the import subject: zeromem import)"
                )
        return ""

    def _put_item(
        self, command: Put, key: str, live: MemoryItem | None, version: int, now: float
    ) -> MemoryItem:
        content = (
            command.content if command.content is not None else self.derive_content(command.value)
        )
        # The put's own times when it carries them (checked by _time_refusal), else now.
        updated = command.updated_at if command.updated_at is not None else command.created_at
        created = command.created_at
        if created is None:
            created = (
                live.created_at
                if live is not None
                else (now if updated is None else min(now, updated))
            )
        return MemoryItem(
            key=key,
            value=command.value,
            content=content,
            type=command.type,
            created_at=created,
            updated_at=now if updated is None else updated,
            version=version,
            tags=command.tags if len(command.tags) < 2 else tuple(dict.fromkeys(command.tags)),
            references=command.references,
            source=command.source,
            confidence=command.confidence,
            expires_at=None if command.ttl_s is None else now + command.ttl_s,
            agent=command.agent,
            ttl_s=command.ttl_s,
            refresh_on_read=command.refresh_on_read and command.ttl_s is not None,
            sensitive=command.sensitive,
            index_key=command.index_key,
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

    def reap(self, tenant: str, key: str, state: KeyState, now: float) -> Outcome | None:
        """Remove a memory whose time to live has passed, with every index entry for it.
        ``None`` if it is not (or no longer) expired."""
        item = state.item
        if item is None or item.expires_at is None or item.expires_at > now:
            return None
        # Named and timed after what expired, not after when the reaper came by: the same
        # tombstone whenever it runs (a rebuild from the log reproduces it byte for byte).
        at = item.expires_at
        digest = hashlib.blake2b(f"{tenant}\x00{key}".encode(), digest_size=12).hexdigest()
        command = Delete(
            id=f"exp-{state.version + 1}-{digest}",
            tenant=tenant,
            agent=REAPER_AGENT,
            ts=at,
            key=key,
        )
        base = Outcome(
            command=command,
            key=key,
            result=self._rejected(command, key, at, ""),
            base_version=state.version,
            base_command=state.last_command,
        )
        return self._tombstone(command, key, state, at, base, "expired")

    def _tombstone(
        self,
        command: Delete | Expire | Forget,
        key: str,
        state: KeyState,
        now: float,
        base: Outcome,
        op: str,
    ) -> Outcome:
        assert state.item is not None
        base.action = TOMBSTONE
        base.new_version = state.version + 1
        base.ops = self._delete_ops(command.tenant, key, state.item)
        base.result = Applied(
            command_id=command.id,
            tenant=command.tenant,
            key=key,
            op=op,
            agent=command.agent,
            applied_at=now,
            version=base.new_version,
            previous_version=state.version,
        )
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
            command_id=command.id,
            tenant=command.tenant,
            key=key,
            op="feedback",
            agent=command.agent,
            applied_at=now,
            version=state.version,
            previous_version=state.version,
        )
        return base

    def _touch(
        self,
        command: Touch,
        key: str,
        state: KeyState,
        live: MemoryItem | None,
        now: float,
        base: Outcome,
    ) -> Outcome:
        if live is None:
            base.result = self._rejected(command, key, now, "not_found: no memory at this key")
            return base
        base.result = Applied(
            command_id=command.id,
            tenant=command.tenant,
            key=key,
            op="touch",
            agent=command.agent,
            applied_at=now,
            version=state.version,
            previous_version=state.version,
        )
        ttl = live.ttl_s
        if not live.refresh_on_read or ttl is None:
            return base  # nothing slides: recorded, nothing changed
        expires_at = now + ttl
        if live.expires_at is not None and expires_at <= live.expires_at:
            return base
        item = msgspec.structs.replace(live, expires_at=expires_at)
        keys = redis_keys(command.tenant)
        piece = keys.shard_of(_owner(key))
        base.action = WRITE
        base.new_version = state.version  # a read must never break a compare-and-set
        base.item = item
        base.content_changed = False
        base.clears_expiry = False
        base.ops = [
            (ZADD, keys.expiring(piece), expires_at, key),
            (SADD, expiring_tenants_key(piece), command.tenant, ""),
            *_card_ops(keys.item(key), item, command.id),
        ]
        state.item, state.last_command = item, command.id
        return base

    def _restore(
        self,
        command: Restore,
        key: str,
        state: KeyState,
        live: MemoryItem | None,
        now: float,
        base: Outcome,
    ) -> Outcome:
        archived = state.archived_item if state.archived else None
        if live is not None:
            base.result = self._rejected(command, key, now, "exists: a live memory is at this key")
            return base
        if archived is None:
            base.result = self._rejected(
                command, key, now, "not_found: no archived memory at this key"
            )
            return base
        version = max(state.version, archived.version) + 1
        feedback = archived.feedback
        new = msgspec.structs.replace(
            archived,
            version=version,
            updated_at=now,
            archived_at=None,
            agent=command.agent,
            feedback=FeedbackCounts(),
        )
        item_key = redis_keys(command.tenant).item(key)
        base.action = WRITE
        base.new_version = version
        base.item = msgspec.structs.replace(new, feedback=feedback)
        base.content_changed = True
        base.clears_expiry = True
        base.ops = self._write_ops(command.tenant, key, None, new, command.id)
        base.ops += self._unarchive_ops(command.tenant, key)
        for kind, field_ in FEEDBACK_FIELDS.items():
            count = getattr(feedback, kind)
            if count:
                base.ops.append((HSET, item_key, field_, count))
        base.result = Applied(
            command_id=command.id,
            tenant=command.tenant,
            key=key,
            op="restore",
            agent=command.agent,
            applied_at=now,
            version=version,
            previous_version=0,
            item=base.item,
        )
        state.version, state.item, state.last_command = version, new, command.id
        state.feedback, state.archived, state.archived_item = feedback, False, None
        return base

    def _unarchive_ops(self, tenant: str, key: str) -> list[IndexOp]:
        keys = redis_keys(tenant)
        return [
            (HDEL, keys.archive(_owner(key)), key, ""),
            (HDEL, keys.item(key), ARCHIVED_FIELD, ""),
        ]

    # --- commands over a whole owner -------------------------------------------------------

    def decide_owner(
        self,
        command: Forget | Archive,
        states: dict[str, KeyState],
        archived: dict[str, MemoryItem],
        now: float,
    ) -> list[Outcome]:
        """Decide a forget or an archive over the memories the worker found for the owner
        (``states``: candidate keys, ``archived``: the owner's archive tier). Returns one
        outcome per memory touched, then the command's own (summary) outcome; the worker
        commits them all in one atomic call."""
        owner = command.key
        op = op_of(command)
        summary = Outcome(command, owner, None, guarded=False)  # type: ignore[arg-type]  # result set below (Outcome.result)
        if owner.count(":") != 1:
            summary.result = self._rejected(
                command,
                owner,
                now,
                f"invalid: the key of a {op} names an owner (namespace:owner_id)",
            )
            return [summary]
        prefix = command.prefix
        if prefix and not (prefix + ":").startswith(owner + ":"):
            summary.result = self._rejected(
                command, owner, now, f"invalid: prefix {prefix!r} is outside {owner!r}"
            )
            return [summary]
        tenant = command.tenant
        keys = redis_keys(tenant)
        outcomes: list[Outcome] = []
        if isinstance(command, Forget):
            for key in sorted(states):
                state = states[key]
                item = state.item
                if item is None or not _matches(command, key, item.updated_at):
                    continue
                part = Outcome(
                    command,
                    key,
                    None,  # type: ignore[arg-type]  # result set below (Outcome.result)
                    base_version=state.version,
                    base_command=state.last_command,
                    record=False,
                )
                outcomes.append(self._tombstone(command, key, state, now, part, "forget"))
            for key in sorted(archived):
                if key in states and states[key].item is not None:
                    continue  # a live memory shadows an archived one; handled above
                item = archived[key]
                if not _matches(command, key, item.updated_at):
                    continue
                state = states.get(key) or KeyState(version=item.version + 1)
                part = Outcome(
                    command,
                    key,
                    None,  # type: ignore[arg-type]  # result set below (Outcome.result)
                    base_version=state.version,
                    base_command=state.last_command,
                    record=False,
                    action=TOMBSTONE,
                    new_version=state.version + 1,
                    ops=[(HDEL, keys.archive(owner), key, "")],
                )
                outcomes.append(part)
        else:
            for key in sorted(states):
                state = states[key]
                live = state.live(now)
                if (
                    live is None
                    or not key.startswith(prefix)
                    or live.updated_at >= command.older_than
                ):
                    continue
                part = Outcome(
                    command,
                    key,
                    None,  # type: ignore[arg-type]  # result set below (Outcome.result)
                    base_version=state.version,
                    base_command=state.last_command,
                    record=False,
                    action=ARCHIVE,
                    new_version=state.version + 1,
                )
                record = msgspec.structs.replace(live, archived_at=now, feedback=state.feedback)
                part.ops = self._delete_ops(tenant, key, live)
                part.ops.append((HSET, keys.archive(owner), key, _ENCODE(record)))
                outcomes.append(part)
        summary.result = Applied(
            command_id=command.id,
            tenant=tenant,
            key=owner,
            op=op,
            agent=command.agent,
            applied_at=now,
            keys=tuple(part.key for part in outcomes),
        )
        for part in outcomes:
            part.result = summary.result  # never recorded on its own (record=False)
        if isinstance(command, Forget) and not prefix and command.since is command.until is None:
            # The whole owner is forgotten: its data key goes in the same commit, so every
            # copy sealed with it (Redis and its persistence) is unreadable (crypto-shredding).
            summary.ops = [(HDEL, keys.data_key(owner), DATA_KEY_FIELD, "")]
        return [*outcomes, summary]

    @staticmethod
    def _rejected(command: Command, key: str, now: float, reason: str) -> Rejected:
        return Rejected(
            command_id=command.id,
            tenant=command.tenant,
            key=key,
            op=op_of(command),
            agent=command.agent,
            applied_at=now,
            reason=reason,
        )

    # --- index maintenance ---------------------------------------------------------------
    #
    # A memory's index entries are a function of the memory alone (``_entries``); a write
    # removes the entries the old version had and the new one lacks, and adds the rest.
    # Owner statistics (counts and token sums, overall and per type) move by deltas.

    def _entries(
        self, tenant: str, key: str, item: MemoryItem, doc: Analysis
    ) -> dict[tuple[str, str], Any]:
        """(redis key, kind) -> score for a sorted set, or None for a set."""
        keys = redis_keys(tenant)
        owner = _owner(key)
        piece = keys.shard_of(owner)
        entries: dict[tuple[str, str], Any] = {
            (keys.by_time(owner), "z"): item.updated_at,
            (keys.keys(piece), "z"): 0,
            (keys.by_type(owner, item.type.value), "s"): None,
        }
        for tag in item.tags:
            entries[(keys.by_tag(owner, tag), "s")] = None
        # created_at, not updated_at: a posting stays put while its memory is rewritten.
        # Each term's key is the owner's prefix and the term (``RedisKeys.by_term``), built
        # here without a call per term: an append has 16 on average.
        prefix = keys.term_prefix(owner)
        created = item.created_at
        for term, tf in doc.terms.items():
            entries[(prefix + term, "z")] = posting_score(tf, created)
        if item.expires_at is not None:
            entries[(keys.expiring(piece), "z")] = item.expires_at
        return entries

    def _stats(self, item: MemoryItem, doc: Analysis, sign: int) -> dict[str, int]:
        type_ = item.type.value
        return {
            STAT_MEMORIES: sign,
            stat_memories_of_type(type_): sign,
            STAT_LENGTH: sign * doc.length,
            STAT_TOKENS: sign * doc.tokens,
            stat_tokens_of_type(type_): sign * doc.tokens,
        }

    def analyse(self, tenant: str, item: MemoryItem) -> Analysis:
        """The memory's analysis; without terms when it is encrypted at rest (its token
        count stays: a number, which the stats and recall's budget need)."""
        doc = self._analyse(item)
        encryption = self.encryption
        if encryption is not None and encryption.seals(tenant, item):
            return Analysis(terms={}, length=0, tokens=doc.tokens)
        return doc

    def _write_ops(
        self,
        tenant: str,
        key: str,
        old: MemoryItem | None,
        new: MemoryItem,
        command_id: str = "",
    ) -> list[IndexOp]:
        if old is not None and _same_index_shape(old, new):
            # The common rewrite (a status, a counter): only the memory's time moves. The
            # recall card is left as it was: it names an older command, so recall knows
            # not to trust it and reads the memory whole.
            return [(ZADD, redis_keys(tenant).by_time(_owner(key)), new.updated_at, key)]
        new_doc = self.analyse(tenant, new)
        owner = _owner(key)
        deltas = self._stats(new, new_doc, +1)
        ops: list[IndexOp]
        if old is None:
            # a new memory (what agents mostly write): every entry is added
            ops = self._new_entry_ops(tenant, key, owner, new, new_doc)
        else:
            new_entries = self._entries(tenant, key, new, new_doc)
            ops = []
            old_doc = self.analyse(tenant, old)
            old_entries = self._entries(tenant, key, old, old_doc)
            ops += _removals(old_entries, new_entries, key)
            for field_, delta in self._stats(old, old_doc, -1).items():
                deltas[field_] = deltas.get(field_, 0) + delta
            for (rkey, kind), score in new_entries.items():
                if kind == "s":
                    if (rkey, kind) not in old_entries:
                        ops.append((SADD, rkey, key, ""))
                elif old_entries.get((rkey, kind)) != score:
                    ops.append((ZADD, rkey, score, key))
        keys = redis_keys(tenant)
        stats = keys.owner_stats(owner)
        ops += [(HINCRBY, stats, f, d) for f, d in deltas.items() if d]
        item_key = keys.item(key)
        ops.append((HSET, item_key, DOC_LENGTH_FIELD, new_doc.length))
        ops.append((HSET, item_key, self.token_field, new_doc.tokens))
        if command_id:
            ops += _card_ops(item_key, new, command_id)
        if new.expires_at is not None:
            ops.append((SADD, expiring_tenants_key(keys.shard_of(owner)), tenant, ""))
        return ops

    def _new_entry_ops(
        self, tenant: str, key: str, owner: str, item: MemoryItem, doc: Analysis
    ) -> list[IndexOp]:
        """The tenant's listing on the owner's shard, then an add of each of ``_entries``
        (in its order), built without the mapping ``_entries`` makes for a write that
        has an old version to compare with: every key of a new memory's entries differs
        from the others but a repeated tag's, which is added once here too
        (tests/unit/test_engine.py compares both). 10.5 -> 7.7 µs per append for the
        entries and their operations (the append workload, best of 4, the same ops)."""
        keys = redis_keys(tenant)
        piece = keys.shard_of(owner)
        ops: list[IndexOp] = [
            (SADD, tenants_key(piece), tenant, ""),
            (ZADD, keys.by_time(owner), item.updated_at, key),
            (ZADD, keys.keys(piece), 0, key),
            (SADD, keys.by_type(owner, item.type.value), key, ""),
        ]
        tags = item.tags
        for tag in tags if len(tags) < 2 else dict.fromkeys(tags):
            ops.append((SADD, keys.by_tag(owner, tag), key, ""))
        # created_at, not updated_at: a posting stays put while its memory is rewritten.
        prefix = keys.term_prefix(owner)
        created = item.created_at
        ops += [
            (ZADD, prefix + term, posting_score(tf, created), key) for term, tf in doc.terms.items()
        ]
        if item.expires_at is not None:
            ops.append((ZADD, keys.expiring(piece), item.expires_at, key))
        return ops

    def _delete_ops(self, tenant: str, key: str, old: MemoryItem) -> list[IndexOp]:
        doc = self.analyse(tenant, old)
        ops = _removals(self._entries(tenant, key, old, doc), {}, key)
        stats = redis_keys(tenant).owner_stats(_owner(key))
        ops += [(HINCRBY, stats, f, d) for f, d in self._stats(old, doc, -1).items() if d]
        return ops


_ENCODE = msgspec.msgpack.Encoder().encode
_OWNER_COMMANDS = (Forget, Archive)


def _matches(command: Forget, key: str, updated_at: float) -> bool:
    if command.prefix and not key.startswith(command.prefix):
        return False
    if command.since is not None and updated_at < command.since:
        return False
    return not (command.until is not None and updated_at > command.until)


def _same_index_shape(old: MemoryItem, new: MemoryItem) -> bool:
    """True when every index entry but the time index is the same for both versions."""
    return (
        old.content == new.content
        and (old.value == new.value or same_source_text(old.value, new.value))
        and old.index_key == new.index_key
        and old.tags == new.tags
        and old.type == new.type
        and old.created_at == new.created_at
        and old.expires_at == new.expires_at
    )


def _card_ops(item_key: str, item: MemoryItem, command_id: str) -> list[IndexOp]:
    # Feedback is not on the card (it has its own fields), so a copy without it is the same.
    return [
        (HSET, item_key, CARD_FIELD, encode_card(item)),
        (HSET, item_key, CARD_COMMAND_FIELD, command_id),
    ]


def _removals(
    old: dict[tuple[str, str], Any], new: dict[tuple[str, str], Any], key: str
) -> list[IndexOp]:
    return [
        (ZREM if kind == "z" else SREM, rkey, key, "")
        for (rkey, kind) in old
        if (rkey, kind) not in new
    ]


_EMPTY = Analysis(terms={}, length=0, tokens=0)


def _owner(key: str) -> str:
    ns, owner_id, _ = key.split(":", 2)
    return f"{ns}:{owner_id}"
