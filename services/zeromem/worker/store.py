"""The worker's Redis access: read the state of a batch's keys, commit decided outcomes.

Two round trips per batch whatever its size: one script call that reads every key and
command id the batch touches, one call of the commit script for the batch's decisions
(each decision atomic on its own, or all of them for a forget or an archive).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import msgspec
from redis.asyncio import Redis

from zeromem.lifecycle.crypto import is_sealed
from zeromem.lifecycle.vault import Vault
from zeromem.schemas import Applied, Archive, MemoryItem, Result, decode_result, owner_of
from zeromem.store import scripts
from zeromem.store.items import NO_FEEDBACK, KeyState, decode_item, decode_item_hash
from zeromem.store.keys import (
    ARCHIVE_SEAL,
    CARD_FIELD,
    DATA_FIELD,
    ITEM_FIELDS,
    STORED_BYTES,
    STORED_MEMORIES,
    layout,
    redis_keys,
    shard_lease_key,
    shard_sequence_key,
)
from zeromem.store.replies import as_bytes
from zeromem.worker.engine import HSET, Outcome

_ENCODE = msgspec.msgpack.Encoder().encode  # the same bytes as schemas.encode, one call less
# The decisions travel as one msgpack argument. Redis's cmsgpack predates msgpack's binary
# type, so the encoded result and item ride inside it as msgpack *strings* (raw bytes, which
# Lua strings hold as they are): the old spec that ``use_bin_type=False`` writes. Before, each
# blob was an argument of its own, and redis-py's per-argument packing cost more than
# Redis spent on the whole batch.
_PACK = msgpack.Packer(use_bin_type=False, autoreset=True).pack
OK, DUPLICATE, STALE, FENCED = "ok", "dup", "stale", "fenced"
BEHIND = "behind"  # Redis no longer holds applies the worker confirmed (see commit.lua)


@dataclass(slots=True)
class CommitReply:
    status: str
    stored_result: Result | None = None


# Replies without a payload are shared, not built once per command (read-only by callers).
_PLAIN_REPLIES = {status.encode(): CommitReply(status) for status in (OK, STALE)}


class Store:
    def __init__(
        self,
        redis: Redis,
        *,
        result_ttl_s: int,
        tombstone_ttl_s: int,
        result_records: int = 0,
        result_bytes: int = 0,
        vault: Vault | None = None,
    ) -> None:
        self.redis = redis
        # Seals and opens encrypted memories (None: nothing is encrypted at rest).
        self.vault = vault
        self.result_ttl_s = result_ttl_s
        self.tombstone_ttl_ms = tombstone_ttl_s * 1000
        # Stored results kept per tenant and shard (Limits.idempotency_*; 0: no bound)
        self.result_records = result_records
        self.result_bytes = result_bytes
        self._bounded = bool(result_records or result_bytes)
        # On a cluster: (tenant, shard) -> (when fetched, [memories, bytes] the tenant
        # stores on the other shards), for the quotas (``_other_pieces``).
        self._pieces: dict[tuple[str, int], tuple[float, list[int]]] = {}

    async def read(
        self,
        keys: Sequence[tuple[str, str]],
        command_ids: Sequence[tuple[str, str]],
        *,
        shard: int,
    ) -> tuple[list[KeyState], list[Result | None]]:
        """The state of each (tenant, key) and the stored result of each (tenant, command
        id), all of ``shard``."""
        states, done, _ = await self.read_with_totals(keys, command_ids, (), shard=shard)
        return states, done

    async def read_with_totals(
        self,
        keys: Sequence[tuple[str, str]],
        command_ids: Sequence[tuple[str, str]],
        tenants: Sequence[str],
        *,
        shard: int,
        quotas: tuple[int, int] = (0, 0),
        max_age_s: float = 1.0,
    ) -> tuple[list[KeyState], list[Result | None], dict[str, list[int]]]:
        """``read``, and what each of ``tenants`` stores: [memories, bytes]. On a cluster
        the call reads ``shard``'s piece of the totals (exact: in the slot of the commit
        that follows) and adds the other shards' pieces as fetched at most ``max_age_s``
        ago, or now for a tenant whose total so reaches one of ``quotas`` (memories,
        bytes; 0: none): a tenant at its quota is refused on fresh figures, not on a
        delete's absence from a stale piece (``_other_pieces``)."""
        # One call instead of a pipeline of commands: at a few hundred commands a batch,
        # packing each command's arguments in redis-py cost more than Redis spent answering.
        rkeys: list[str] = [redis_keys(tenant).item(key) for tenant, key in keys]
        rkeys += [redis_keys(tenant).stored(shard) for tenant in tenants]
        rkeys += [redis_keys(tenant).command(cid, shard) for tenant, cid in command_ids]
        replies = await scripts.READ_ITEMS(
            self.redis, rkeys, [len(keys), len(tenants), *ITEM_FIELDS]
        )
        if self.vault is not None:
            await self._open_rows(keys, replies)
        states = [decode_item_hash(r) for r in replies[: len(keys)]]
        totals_end = len(keys) + len(tenants)
        totals = {
            tenant: [int(n or 0), int(b or 0)]
            for tenant, (n, b) in zip(tenants, replies[len(keys) : totals_end], strict=True)
        }
        if tenants and layout().cluster:
            others = await self._other_pieces(tenants, shard, max_age_s)
            full = [
                t
                for t in tenants
                if any(
                    0 < q <= mine + other
                    for q, mine, other in zip(quotas, totals[t], others[t], strict=True)
                )
            ]
            if full:
                others.update(await self._other_pieces(full, shard, -1.0))
            for tenant, (n, b) in others.items():
                totals[tenant][0] += n
                totals[tenant][1] += b
        done = [decode_result(r) if r else None for r in replies[totals_end:]]
        return states, done, totals

    async def _other_pieces(
        self, tenants: Sequence[str], shard: int, max_age_s: float
    ) -> dict[str, list[int]]:
        """What each tenant stores on the shards other than ``shard`` (a cluster keeps a
        tenant's totals per shard, each in its shard's slot), fetched again once older
        than ``max_age_s`` (``Limits.quota_totals_max_age_s``). A quota can be passed by
        what the tenant stored on its other shards within that age (their workers check
        against this one's piece as it was), never by more; a tenant whose writes all
        land on one shard is held to it exactly."""
        now = time.monotonic()
        stale = [
            t for t in tenants if now - self._pieces.get((t, shard), (-1e18, []))[0] > max_age_s
        ]
        if stale:
            others = [s for s in layout().pieces if s != shard]
            async with self.redis.pipeline(transaction=False) as pipe:
                for tenant in stale:
                    for other in others:
                        pipe.hmget(redis_keys(tenant).stored(other), STORED_MEMORIES, STORED_BYTES)
                replies = await pipe.execute()
            if len(self._pieces) > 65536:
                self._pieces.clear()
            for i, tenant in enumerate(stale):
                rows = replies[i * len(others) : (i + 1) * len(others)]
                total = [sum(int(r[0] or 0) for r in rows), sum(int(r[1] or 0) for r in rows)]
                self._pieces[(tenant, shard)] = (now, total)
        return {t: self._pieces[(t, shard)][1] for t in tenants}

    async def _open_rows(self, keys: Sequence[tuple[str, str]], rows: list[Any]) -> None:
        """Replace each sealed ``d`` in ``rows`` (HMGET ITEM_FIELDS per key) by its plaintext."""
        vault = self.vault
        assert vault is not None
        at = ITEM_FIELDS.index(DATA_FIELD)
        sealed = [
            (n, tenant, key)
            for n, (tenant, key) in enumerate(keys)
            if is_sealed(rows[n][at]) and vault.needs(tenant, key, rows[n][at])
        ]
        if sealed:
            await vault.reload({(t, owner_of(k)) for _, t, k in sealed})
        for n, (tenant, key) in enumerate(keys):
            blob = rows[n][at]
            if is_sealed(blob):
                rows[n] = list(rows[n])
                rows[n][at] = vault.open(tenant, key, DATA_FIELD, blob)

    async def load_keys(self, outcomes: Sequence[Outcome]) -> None:
        """Before ``decision``: load (or create) the data keys the outcomes' sealed
        memories and archive records need. Nothing for a batch with none of them."""
        vault = self.vault
        if vault is None:
            return
        owners = []
        for outcome in outcomes:
            item = outcome.item
            tenant = outcome.command.tenant
            sealing = item is not None and vault.policy.seals(tenant, item)
            if sealing or (
                isinstance(outcome.command, Archive)
                and any(_archives(op) and _record_seals(vault, tenant, op[3]) for op in outcome.ops)
            ):
                owners.append((tenant, owner_of(outcome.key)))
        if owners:
            await vault.load(owners, create=True)

    async def shard_position(self, shard: int) -> int:
        """The shard's last applied command-stream sequence, as the commits recorded it."""
        raw = await self.redis.hget(shard_sequence_key(shard), str(shard))
        return int(raw or 0)

    async def archived_item(self, tenant: str, key: str) -> MemoryItem | None:
        """A memory in the archive tier (what a restore brings back)."""
        blob = await self.redis.hget(redis_keys(tenant).archive(owner_of(key)), key)
        if not blob:
            return None
        return decode_item(await self._opened(tenant, key, ARCHIVE_SEAL, as_bytes(blob)))

    async def _opened(self, tenant: str, key: str, field_name: str, blob: bytes) -> bytes:
        vault = self.vault
        if vault is None or not is_sealed(blob):
            return blob
        await vault.prepare_open(tenant, [(key, blob)])
        return vault.open(tenant, key, field_name, blob)

    async def owner_memories(
        self, tenant: str, owner: str, low: str, high: str, *, archived: bool
    ) -> tuple[list[str], dict[str, MemoryItem]]:
        """The keys of ``owner``'s live memories updated between ``low`` and ``high`` (score
        bounds of its time index) and, with ``archived``, its archive tier."""
        keys = redis_keys(tenant)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(keys.by_time(owner), low, high)
            if archived:
                pipe.hgetall(keys.archive(owner))
            replies = await pipe.execute()
        live = [k.decode() for k in replies[0]]
        tier = (
            {
                k.decode(): decode_item(await self._opened(tenant, k.decode(), ARCHIVE_SEAL, v))
                for k, v in replies[1].items()
            }
            if archived
            else {}
        )
        return live, tier

    async def commit(
        self,
        outcomes: Sequence[Outcome],
        *,
        shard: int,
        sequences: Sequence[int],
        lease_token: str,
        atomic: bool = False,
        applied_through: int = 0,
    ) -> list[CommitReply]:
        """Commit decided outcomes in order, in one script call (one round trip and one
        argument, whatever the batch size: packing arguments one by one was the worker's
        largest cost)."""
        decisions = [self.decision(o, s, shard) for o, s in zip(outcomes, sequences, strict=True)]
        return await self.commit_decisions(
            decisions,
            shard=shard,
            lease_token=lease_token,
            atomic=atomic,
            applied_through=applied_through,
        )

    def decision(self, outcome: Outcome, sequence: int, shard: int) -> tuple[object, ...]:
        """One outcome as the commit script reads it (everything encoded): built per
        command, so that a command whose parts cannot be encoded fails on its own.
        ``sequence`` is the position the shard may record ('0' on all but a message's last
        command); the command's own sequence is ``outcome.sequence``."""
        command = outcome.command
        keys = redis_keys(command.tenant)
        result = outcome.result
        if type(result) is Applied and result.item is not None:
            # The stored result answers redeliveries; the memory itself is stored once.
            result = msgspec.structs.replace(result, item=None)
        item = outcome.item
        ops = outcome.ops
        followers = outcome.followers
        data = b"" if item is None else _ENCODE(_stored_form(item))
        vault = self.vault
        if vault is not None:
            data, ops = self._sealed(vault, outcome, data, ops)
        return (
            keys.item(outcome.key),
            keys.command(command.id, shard) if outcome.record else "",
            str(sequence),
            _ENCODE(result),
            "1" if outcome.guarded else "0",
            str(outcome.base_version),
            outcome.base_command,
            outcome.action,
            str(outcome.new_version),
            data if item is not None else "",
            command.id,
            "1" if outcome.content_changed else "0",
            outcome.feedback_field,
            _flat_ops(ops) if ops else (),
            "1" if outcome.clears_expiry else "0",
            [
                x
                for f in followers
                for x in (keys.command(f.command.id, shard), _ENCODE(f.result), str(f.sequence))
            ]
            if followers
            else (),
            keys.stored(shard),
            keys.results(shard) if self._bounded else "",
            keys.results_bytes(shard) if self._bounded else "",
            str(outcome.sequence),
        )

    @staticmethod
    def _sealed(
        vault: Vault, outcome: Outcome, data: bytes, ops: list[Any]
    ) -> tuple[bytes, list[Any]]:
        """The stored form and index operations of an outcome, sealed where the policy
        says: the memory (``d``), its recall card and an archive record. An ordinary
        memory passes through untouched (one policy check)."""
        tenant, key = outcome.command.tenant, outcome.key
        item = outcome.item
        if item is not None and vault.policy.seals(tenant, item):
            data = vault.seal(tenant, key, DATA_FIELD, data)
            ops = [
                (op, rkey, a, vault.seal(tenant, key, CARD_FIELD, b))
                if op == HSET and a == CARD_FIELD
                else (op, rkey, a, b)
                for op, rkey, a, b in ops
            ]
        if isinstance(outcome.command, Archive) and any(map(_archives, ops)):
            ops = [
                (o[0], o[1], o[2], _seal_record(vault, tenant, o[2], o[3])) if _archives(o) else o
                for o in ops
            ]
        return data, ops

    @staticmethod
    def decision_key(decision: tuple[object, ...]) -> str:
        """The memory a decision built by ``decision`` writes."""
        return str(decision[0])

    @staticmethod
    def stored_bytes(decision: tuple[object, ...]) -> int:
        """The size of the memory a write decision stores (its encoded form)."""
        return len(decision[9])  # type: ignore[arg-type]  # the encoded item (Store.decision)

    async def commit_decisions(
        self,
        decisions: Sequence[tuple[object, ...]],
        *,
        shard: int,
        lease_token: str,
        atomic: bool = False,
        applied_through: int = 0,
    ) -> list[CommitReply]:
        """Commit decisions built by ``decision``, in order, in one script call."""
        if not decisions:
            return []
        replies = await scripts.COMMIT(
            self.redis,
            [shard_lease_key(shard), shard_sequence_key(shard)],
            [
                lease_token,
                shard,
                self.result_ttl_s,
                self.tombstone_ttl_ms,
                _PACK(list(decisions)),
                "1" if atomic else "0",
                applied_through,
                self.result_records,
                self.result_bytes,
            ],
        )
        if replies == b"fenced":
            return [CommitReply(FENCED)] * len(decisions)
        if replies == b"behind":
            return [CommitReply(BEHIND)] * len(decisions)
        out = []
        for reply in replies:
            if isinstance(reply, list):
                out.append(CommitReply(DUPLICATE, decode_result(reply[1])))
            else:
                out.append(_PLAIN_REPLIES.get(reply) or CommitReply(reply.decode()))
        return out


def _flat_ops(ops: Sequence[tuple[str, str, object, object]]) -> list[str | bytes]:
    # Opcode and key are always strings already; only the operands may need converting.
    # A new memory's postings share a score or two (one per term frequency and second),
    # so each distinct score is formatted once. Integers (posting scores, deltas) are the
    # common case and are tested for first, ``_arg`` called only for the rest: an append's
    # operations 20 -> 15 µs (loaded machine, three alternating timings, the same lists).
    flat: list[str | bytes] = []
    texts: dict[int, str] = {}  # 0 and 0.0 are equal keys: only integers share text
    for op, key, a, b in ops:
        operand: str | bytes
        if type(a) is int:
            text = texts.get(a)
            if text is None:
                text = texts[a] = str(a)
            operand = text
        elif type(a) is str:
            operand = a
        else:
            operand = _arg(a)
        flat += (op, key, operand, b if type(b) is str else _arg(b))
    return flat


def _arg(value: object) -> str | bytes:
    # Every argument travels as a string so scores keep their exact value (Lua numbers
    # would be reformatted on the way into Redis).
    # Bytes (an archived memory's record) travel as they are: msgpack raw, a Lua string.
    if isinstance(value, (str, bytes)):
        return value
    return repr(value) if isinstance(value, float) else str(value)


def _archives(op: tuple[Any, ...]) -> bool:
    """An archive record's write: HSET archive(owner) key <msgpack item> (engine.decide_owner)."""
    return op[0] == HSET and type(op[3]) is bytes and op[2] != CARD_FIELD


def _record_seals(vault: Vault, tenant: str, record: bytes) -> bool:
    return not is_sealed(record) and vault.policy.seals(tenant, decode_item(record))


def _seal_record(vault: Vault, tenant: str, key: str, record: bytes) -> bytes:
    if not _record_seals(vault, tenant, record):
        return record
    return vault.seal(tenant, key, ARCHIVE_SEAL, record)


def _stored_form(item: MemoryItem) -> MemoryItem:
    # Feedback counts live in their own hash fields (incremented without a version bump),
    # so the stored blob never carries a copy that could go stale.
    if item.feedback == NO_FEEDBACK:
        return item  # already so (nearly always): no copy
    return msgspec.structs.replace(item, feedback=NO_FEEDBACK)
