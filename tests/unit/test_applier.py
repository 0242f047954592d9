"""The worker's applier against an in-memory store: a batch's ordering, idempotency, stale
rounds, fencing, quotas and per-command containment, without servers."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import msgspec
import pytest

from zeromem.limits import Limits
from zeromem.schemas import Applied, Put, Rejected, Result
from zeromem.store.items import KeyState
from zeromem.telemetry import Telemetry
from zeromem.worker.applier import Applier
from zeromem.worker.engine import COUNT_FEEDBACK, TOMBSTONE, WRITE, Analysis, Engine, Outcome
from zeromem.worker.lease import LeaseLostError
from zeromem.worker.messages import Admitted
from zeromem.worker.store import DUPLICATE, FENCED, OK, STALE, CommitReply

TOKEN = "lease-token"


class FakeStore:
    """The ``worker.store.Store`` the applier sees, in memory: a decision is the outcome
    itself, and a commit checks what commit.lua checks (lease, guard, stored result)."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, str], KeyState] = {}
        self.results: dict[tuple[str, str], Result] = {}
        self.positions: dict[int, int] = {}
        self.token = TOKEN
        self.commits = 0
        self.reads: list[list[tuple[str, str]]] = []  # the keys of each read, in order
        self.before_commit: Any = None  # called once before the next commit (a race)
        self.vault = None  # nothing encrypted at rest (tests/unit/test_crypto.py)

    async def load_keys(self, outcomes: list[Outcome]) -> None:
        pass

    @staticmethod
    def decision(outcome: Outcome, sequence: int, shard: int) -> tuple[object, ...]:
        return (outcome, sequence)

    @staticmethod
    def decision_key(decision: tuple[object, ...]) -> str:
        return decision[0].key  # type: ignore[attr-defined,no-any-return]

    @staticmethod
    def stored_bytes(decision: tuple[object, ...]) -> int:
        return len(msgspec.msgpack.encode(decision[0].item))  # type: ignore[attr-defined]

    def _state(self, ident: tuple[str, str]) -> KeyState:
        state = self.states.get(ident, KeyState())
        return replace(state)  # the applier's engine changes what it is given

    async def read_with_totals(self, keys, command_ids, tenants, **_):  # type: ignore[no-untyped-def]
        self.reads.append(list(keys))
        totals = {
            t: [sum(1 for (tt, _), s in self.states.items() if tt == t and s.item), 0]
            for t in tenants
        }
        return [self._state(k) for k in keys], [self.results.get(c) for c in command_ids], totals

    async def read(self, keys, command_ids, **_):  # type: ignore[no-untyped-def]
        states, done, _ = await self.read_with_totals(keys, command_ids, ())
        return states, done

    async def shard_position(self, shard: int) -> int:
        return self.positions.get(shard, 0)

    async def commit_decisions(  # type: ignore[no-untyped-def]
        self, decisions, *, shard, lease_token, atomic=False, applied_through=0
    ) -> list[CommitReply]:
        self.commits += 1
        if self.before_commit is not None:
            race, self.before_commit = self.before_commit, None
            race(self)
        if lease_token != self.token:
            return [CommitReply(FENCED)] * len(decisions)
        replies = []
        blocked = False  # the position advances over applied commands up to a stale one
        for outcome, sequence in decisions:
            ident = (outcome.command.tenant, outcome.key)
            current = self.states.get(ident, KeyState())
            if outcome.guarded and (current.version, current.last_command) != (
                outcome.base_version,
                outcome.base_command,
            ):
                replies.append(CommitReply(STALE))
                blocked = True
                continue
            done = self.results.get((outcome.command.tenant, outcome.command.id))
            if outcome.record and done is not None:
                replies.append(CommitReply(DUPLICATE, done))
                continue
            if outcome.action is WRITE:
                self.states[ident] = KeyState(outcome.new_version, outcome.item, outcome.command.id)
            elif outcome.action is TOMBSTONE:
                self.states[ident] = KeyState(outcome.new_version, None, outcome.command.id)
            elif outcome.action is COUNT_FEEDBACK:
                pass  # counts are not what these tests look at
            if outcome.record:
                self.results[(outcome.command.tenant, outcome.command.id)] = outcome.result
            if sequence and not blocked:
                self.positions[shard] = max(self.positions.get(shard, 0), sequence)
            replies.append(CommitReply(OK))
        return replies


def analyse(item):  # type: ignore[no-untyped-def]  # one term per word
    words = item.content.lower().split()
    return Analysis({w: words.count(w) for w in words}, len(words), len(words))


def put(n: int, key: str = "user:u1:lang", tenant: str = "acme", **kw: object) -> Admitted:
    command = Put(id=f"c{n}", tenant=tenant, agent="a", ts=1.0, key=key, value=n, **kw)  # type: ignore[arg-type]
    return Admitted(None, command, key, n, 100.0 + n, b"", position=n)  # type: ignore[arg-type]


def applier(store: FakeStore, limits: Limits | None = None, **kw: Any) -> Applier:
    engine = Engine(analyse, lambda v: json.dumps(v)[:200], "cl100k_base")
    return Applier(
        store,  # type: ignore[arg-type]
        engine,
        token=TOKEN,
        limits=limits or Limits(),
        batch_size=kw.pop("batch_size", 64),
        telemetry=Telemetry(),
        **kw,
    )


async def test_an_owners_commands_apply_in_order_and_record_the_position() -> None:
    store = FakeStore()
    results, failed, tally = await applier(store).apply(0, [put(1), put(2), put(3)])
    assert [r.version for r in results] == [1, 2, 3]  # type: ignore[union-attr]
    assert store.states[("acme", "user:u1:lang")].item.value == 3  # type: ignore[union-attr]
    assert store.positions[0] == 3 and not failed
    assert tally[("acme", "put", "applied")] == 3


async def test_a_batch_larger_than_a_round_is_committed_in_bounded_calls() -> None:
    store = FakeStore()
    batch = [put(n, key=f"user:u1:k{n}") for n in range(1, 11)]
    results, _, _ = await applier(store, batch_size=4).apply(0, batch)
    assert all(type(r) is Applied for r in results) and store.commits == 3


async def test_a_redelivered_command_answers_with_its_stored_result_and_applies_nothing() -> None:
    store = FakeStore()
    first = applier(store)
    (original,), _, _ = await first.apply(0, [put(1)])
    again = applier(store)
    (result,), _, tally = await again.apply(0, [put(1)])
    assert result == original and again.stats.duplicates == 1
    assert store.states[("acme", "user:u1:lang")].version == 1
    assert tally[("acme", "put", "duplicate")] == 1


async def test_a_decision_made_stale_by_a_race_is_decided_again() -> None:
    store = FakeStore()
    await applier(store).apply(0, [put(1)])

    def reaper_wins(s: FakeStore) -> None:  # the key changes between read and commit
        s.states[("acme", "user:u1:lang")] = KeyState(7, None, "reaped")

    store.before_commit = reaper_wins
    (result,), _, _ = await applier(store).apply(0, [put(2)])
    assert store.commits == 3  # the stale round, then the one decided on the new state
    assert type(result) is Applied and result.version == 8


async def test_a_fenced_commit_means_the_lease_is_lost() -> None:
    store = FakeStore()
    store.token = "someone else"
    with pytest.raises(LeaseLostError):
        await applier(store).apply(0, [put(1)])
    assert not store.states


async def test_a_command_the_engine_cannot_decide_is_rejected_alone() -> None:
    store = FakeStore()
    worker = applier(store)
    decide = worker.engine.decide

    def failing(command, key, state, now, importing=False):  # type: ignore[no-untyped-def]
        if command.id == "c2":
            raise ZeroDivisionError("boom")
        return decide(command, key, state, now, importing)

    worker.engine.decide = failing  # type: ignore[method-assign]
    batch = [put(1, key="user:u1:a"), put(2, key="user:u1:b"), put(3, key="user:u1:c")]
    results, failed, _ = await worker.apply(0, batch)
    assert [type(r) for r in results] == [Applied, Rejected, Applied]
    assert "ZeroDivisionError" in results[1].reason  # type: ignore[union-attr]
    (dead,) = failed
    assert dead.sequence == 2 and "ZeroDivisionError" in dead.reason
    assert ("acme", "user:u1:b") not in store.states


async def test_a_write_over_the_tenants_memory_quota_is_rejected() -> None:
    store = FakeStore()
    batch = [put(n, key=f"user:u1:k{n}") for n in (1, 2, 3)]
    results, _, _ = await applier(store, Limits(tenant_memories=2)).apply(0, batch)
    assert [type(r) for r in results] == [Applied, Applied, Rejected]
    assert "tenant_memories" in results[2].reason  # type: ignore[union-attr]
    assert ("acme", "user:u1:k3") not in store.states


async def test_a_put_of_a_key_never_seen_is_decided_without_reading_it() -> None:
    store = FakeStore()
    worker = applier(store)
    await worker.apply(0, [put(1, key="user:u1:a")])
    await worker.apply(0, [put(2, key="user:u1:b"), put(3, key="user:u1:b")])
    # the first round read only its tenant's totals; the second, nothing at all
    assert store.reads == [[]] and worker.stats.unread == 2
    await worker.apply(0, [put(4, key="user:u1:a")])  # seen: read before deciding
    assert store.reads == [[], [("acme", "user:u1:a")]]
    assert store.states[("acme", "user:u1:b")].version == 2
    assert store.states[("acme", "user:u1:a")].version == 2


async def test_a_put_presumed_new_over_a_key_that_holds_a_memory_is_decided_again() -> None:
    store = FakeStore()
    await applier(store).apply(0, [put(1), put(2)])  # another worker, before this one
    worker = applier(store)
    (result, again), _, _ = await worker.apply(0, [put(3), put(4)])
    # the guarded commit refused both (decided on "nothing here"); read, they follow v2
    assert [result.version, again.version] == [3, 4]  # type: ignore[union-attr]
    assert worker.stats.unread_stale == 1
    assert store.states[("acme", "user:u1:lang")].item.value == 4  # type: ignore[union-attr]
    # what the wrong guess cost: a stale commit, then a read and a commit as before (the
    # first read is the new worker's totals, which a warm one has)
    assert store.commits == 1 + 2
    assert store.reads == [[], [], [("acme", "user:u1:lang")]]


async def test_after_a_stale_guess_the_shard_stands_past_the_whole_batch() -> None:
    store = FakeStore()
    await applier(store).apply(1, [put(1, key="user:u1:a")])  # another worker's write
    worker = applier(store)
    batch = [put(2, key="user:u1:a"), put(3, key="user:u1:b")]
    await worker.apply(0, batch)
    # the first call applied b but stood at a's stale decision; the redo carried b's place
    assert store.commits == 3 and store.positions[0] == 3


async def test_totals_read_recently_are_used_until_a_round_could_reach_the_quota() -> None:
    store = FakeStore()
    worker = applier(store, Limits(tenant_memories=4))
    for n in range(1, 6):
        await worker.apply(0, [put(n, key=f"user:u1:k{n}")])
    assert ("acme", "user:u1:k4") in store.states
    assert ("acme", "user:u1:k5") not in store.states  # refused at 4, on figures read afresh
    # read at the first round, then from the fourth on (one write from the quota)
    assert len(store.reads) == 3


async def test_with_no_totals_age_allowed_a_quota_holds_across_workers() -> None:
    store = FakeStore()
    limits = Limits(tenant_memories=3, quota_totals_max_age_s=0.0)
    one, other = applier(store, limits), applier(store, limits)
    await one.apply(0, [put(1, key="user:u1:a")])
    await other.apply(1, [put(2, key="user:u2:b"), put(3, key="user:u2:c")])
    (result,), _, _ = await one.apply(0, [put(4, key="user:u1:d")])
    assert type(result) is Rejected and "tenant_memories" in result.reason


async def test_the_report_hook_sees_each_decided_result_and_none_replays_silently() -> None:
    store = FakeStore()
    seen: list[tuple[str, Result]] = []
    worker = applier(store, report=lambda item, result: seen.append((item.command.id, result)))
    results, _, _ = await worker.apply(0, [put(1), put(2)])
    assert seen == [("c1", results[0]), ("c2", results[1])]
    assert applier(FakeStore()).report is None  # a rebuild's applier reports nothing


async def test_a_command_at_or_below_the_shards_floor_is_skipped() -> None:
    store = FakeStore()
    store.positions[0] = 5  # applied before this worker took the shard; result expired
    worker = applier(store)
    await worker.load_floor(0)
    results, _, _ = await worker.apply(0, [put(4, key="user:u1:a"), put(6, key="user:u1:b")])
    assert results[0] is None and type(results[1]) is Applied
    assert worker.stats.skipped == 1 and ("acme", "user:u1:a") not in store.states
