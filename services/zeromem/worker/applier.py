"""Applying admitted commands: decide each with the engine on the state the store reads,
commit the decisions, and redo what went stale. Store and engine only: no NATS here, so
the worker's consume loop and a rebuild's replay share it, and the rules of a batch
(ordering, idempotency, quotas, feedback coalescing, containment of a failing command)
are tested against a fake store (``tests/unit/test_applier.py``).

Over 500 lines on purpose: the batch path and the owner-wide commands (forget, archive,
restore) share the commit, refusal and counting helpers, and read best side by side.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from zeromem.limits import Limits, refusal
from zeromem.logs import BoundedLog
from zeromem.schemas import Applied, Archive, Conflict, Forget, Rejected, Restore, Result, op_of
from zeromem.store.items import KeyState
from zeromem.telemetry import Telemetry
from zeromem.worker.commit_cost import commit_cost
from zeromem.worker.engine import COUNT_FEEDBACK, NOTHING, TOMBSTONE, WRITE, Engine, Outcome
from zeromem.worker.faults import CommandFailed, Fault, StaleRoundsError, classify, describe
from zeromem.worker.lease import LeaseLostError
from zeromem.worker.messages import Admitted, Dead
from zeromem.worker.presumed import Presumptions, new_if_absent
from zeromem.worker.store import BEHIND, DUPLICATE, FENCED, OK, STALE, CommitReply, Store

# Commands applied on their own, between the batch's other commands: a forget or an
# archive reads the owner's memories as every earlier command left them; a restore reads
# the archive tier. Rare, so the common batch path never pays for them.
_SPECIAL = (Forget, Archive, Restore)
# Actions that change what a tenant stores (its quotas: memories, bytes).
_STORING = (WRITE, TOMBSTONE)

log = logging.getLogger(__name__)


class RedisBehindError(RuntimeError):
    """Redis no longer holds applies this worker made (it restarted without the tail of
    its append-only file): the shard restarts and replays the gap from the log."""


@dataclass(slots=True)
class WorkerStats:
    """Counts since start, per outcome; the telemetry module reads these."""

    applied: int = 0
    conflicts: int = 0
    rejected: int = 0
    dead_lettered: int = 0
    duplicates: int = 0
    expired: int = 0
    archived: int = 0
    forgotten: int = 0
    delivery_gaps: int = 0  # consumers opened again after a delivery never arrived
    resent: int = 0  # publications sent again, their acknowledgement late or failed
    skipped: int = 0  # at or below the shard's recorded sequence, with no stored result
    unread: int = 0  # keys decided as holding nothing without a read (``presumed``)
    unread_stale: int = 0  # of them, keys that did hold something: decided again
    batches: int = 0
    by_op: dict[str, int] = field(default_factory=dict)


# What is done with a command's result once decided (the outbox encodes it and builds its
# audit entry, ``Outbox.prepare``); raises ``CommandFailed`` naming the stage.
Report = Callable[[Admitted, Result], None]


class Applier:
    def __init__(
        self,
        store: Store,
        engine: Engine,
        *,
        token: str,
        limits: Limits,
        batch_size: int,
        telemetry: Telemetry,
        report: Report | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.token = token  # the lease token every commit is fenced with
        self.limits = limits
        self.batch_size = batch_size
        self.telemetry = telemetry
        # None in a rebuild's replay: apply only; no results, change feed or audit.
        self.report = report
        self.stats = WorkerStats()
        self._log = BoundedLog(log, limits.log_interval_s)
        # per shard: the last command-stream sequence Redis had applied when this worker
        # took the shard; a command at or below it is never applied again
        self._floors: dict[int, int] = {}
        # Per shard, the last stream sequence this worker applied (to notice a Redis that
        # came back without it).
        self._applied_through: dict[int, int] = {}
        # Outcomes of the batch each shard is processing, flushed to the metrics once per
        # batch. Per shard: shards run concurrently, each one batch at a time.
        self._tallies: dict[int, Counter[tuple[str, str, str]]] = {}
        # Per-command failures of the round each shard is processing: dead-lettered with it.
        self._failed: dict[int, list[Dead]] = {}
        # What a round may decide without reading first (new keys, recent totals).
        self.presumed = Presumptions(limits)

    async def load_floor(self, shard: int) -> int:
        """Read the shard's last applied stream sequence (after taking its lease: a
        rebuild may have moved it while another process held the shard)."""
        self._floors[shard] = await self.store.shard_position(shard)
        self.presumed.forget(shard)
        if self.store.vault is not None:
            # A rebuild that ran meanwhile may have destroyed and made data keys again
            # (replaying forgets): what this worker cached is read afresh.
            self.store.vault.clear()
        return self._floors[shard]

    async def check_not_behind(self, shard: int) -> None:
        """After a Redis error: if Redis came back without applies this worker confirmed,
        stop before a retry moves the shard's position past the hole (the shard then
        restarts, and its new consumer delivers the gap again)."""
        with contextlib.suppress(RedisError):
            if await self.store.shard_position(shard) < self._applied_through.get(shard, 0):
                raise RedisBehindError(shard)

    def shard_applied(self, shard: int) -> int:
        """The shard's position as this worker's commits recorded it (Redis holds at least
        this): every command of the shard at or below it is applied, whoever's it is."""
        return self._applied_through.get(shard, 0)

    def forget_applied(self, shard: int) -> None:
        """Redis lost applies: what this worker applied on ``shard`` is known no more."""
        self._applied_through.pop(shard, None)

    async def apply(
        self, shard: int, batch: list[Admitted]
    ) -> tuple[list[Result | None], list[Dead], Counter[tuple[str, str, str]]]:
        """Each command's result, in order (``None``: already applied before this worker
        took the shard, its result no longer stored; nothing to report), the commands that
        failed on their own (rejected, to be dead-lettered) and the batch's outcome counts."""
        self._tallies[shard] = Counter()
        self._failed[shard] = []
        results = await self._apply(shard, batch)
        self.stats.batches += 1
        return results, self._failed.pop(shard), self._tallies.pop(shard)

    async def _apply(self, shard: int, batch: list[Admitted]) -> list[Result | None]:
        """Each command's result, in order (``None``: already applied before this worker
        took the shard, its result no longer stored; nothing to report)."""
        # Each script call stays bounded, in commands and in estimated Redis time (Redis
        # serves nothing else while one runs): see worker/commit_cost.py.
        size, budget = self.batch_size, self.limits.commit_cost
        results: list[Result | None] = []
        start, cost = 0, 0
        for n, admitted in enumerate(batch):
            cost += commit_cost(admitted.command)
            if n > start and (n - start >= size or cost > budget):
                results += await self._apply_chunk(shard, batch[start:n])
                start, cost = n, commit_cost(admitted.command)
        results += await self._apply_chunk(shard, batch[start:])
        return results

    async def _apply_chunk(self, shard: int, batch: list[Admitted]) -> list[Result | None]:
        special = _SPECIAL
        if not any(type(a.command) in special for a in batch):
            return await self._apply_plain(shard, batch)
        results: list[Result | None] = []
        segment: list[Admitted] = []
        for admitted in batch:
            if type(admitted.command) in special:
                if segment:
                    results += await self._apply_plain(shard, segment)
                    segment = []
                results.append(await self._apply_special_contained(shard, admitted))
            else:
                segment.append(admitted)
        if segment:
            results += await self._apply_plain(shard, segment)
        return results

    async def _apply_plain(self, shard: int, batch: list[Admitted]) -> list[Result | None]:
        results: list[Result | None] = [None] * len(batch)
        todo = list(range(len(batch)))
        last = max((a.position for a in batch), default=0)
        for attempt in range(20):
            if not todo:
                break
            todo = await self._apply_round(
                shard, batch, todo, results, first=attempt == 0, catch_up=attempt and last
            )
        if todo:
            raise StaleRoundsError(f"{len(todo)} commands stayed stale after 20 rounds")
        return results

    async def _apply_round(
        self,
        shard: int,
        batch: list[Admitted],
        todo: list[int],
        results: list[Result | None],
        *,
        first: bool = True,
        catch_up: int = 0,
    ) -> list[int]:
        """Read, decide and commit the commands at ``todo``; return those to redo.

        ``catch_up``: a round redoing what went stale passes the batch's last position.
        The call that met the stale decision recorded the shard's position only up to it,
        though it applied the batch's commands of other keys after it; the redo's last
        decision carries the batch's last position instead of its own, so once the redo
        applies with nothing stale before it, the shard stands past the whole batch (all
        else in it is done) rather than lagging until its next commit. Read your writes
        waits on that position."""
        tally = self._tallies.setdefault(shard, Counter())
        floor = self._floors.get(shard, 0)
        # Each distinct (tenant, key) once, in first-seen order; ``idents`` remembers each
        # command's, so the tuple is built once per command. A key whose first command here
        # is a put and that this worker has not seen is decided as holding nothing, without
        # reading it (``presumed``: its commit is guarded, so a wrong guess only costs a
        # second round); it holds a state of its own, which its commands then advance.
        live_states: dict[tuple[str, str], KeyState] = {}
        unread: set[tuple[str, str]] = set()
        idents: list[tuple[str, str]] = []
        # Whose stored result to look up before deciding. A first round looks up only the
        # commands at or below the shard's floor (redeliveries to a new lease holder, where
        # the floor rule needs to know): any other duplicate is caught by the commit script,
        # which answers it with the stored result and leaves the memory alone. A look-up
        # per command cost Redis a call and the worker a key to build for every command.
        looked_up: list[int] = []
        command_ids: list[tuple[str, str]] = []
        presumed = self.presumed
        for n, i in enumerate(todo):
            item = batch[i]
            command = item.command
            tenant = command.tenant
            ident = (tenant, item.key)
            if ident not in live_states:
                if first and new_if_absent(command) and presumed.unknown(ident):
                    live_states[ident] = KeyState()
                    unread.add(ident)
                    self.stats.unread += 1
                else:
                    live_states[ident] = _NO_STATE
            idents.append(ident)
            if not first or item.sequence <= floor:
                looked_up.append(n)
                command_ids.append((tenant, command.id))
        limits = self.limits
        quotas = limits.tenant_memories > 0 or limits.tenant_bytes > 0
        tenants = list({ident[0]: None for ident in live_states}) if quotas else []
        to_read = [ident for ident in live_states if ident not in unread]
        totals = None
        if not to_read and not command_ids:
            totals = presumed.totals(shard, tenants, len(todo)) if tenants else {}
        if totals is None:
            states, found, totals = await self.store.read_with_totals(
                to_read,
                command_ids,
                tenants,
                shard=shard,
                quotas=(limits.tenant_memories, limits.tenant_bytes),
                max_age_s=limits.quota_totals_max_age_s,
            )
            if tenants:
                presumed.read_totals(shard, totals)
            for ident, state in zip(to_read, states, strict=True):
                live_states[ident] = state
        else:
            found = []
        presumed.seen(live_states)
        # Each key's stored size as the round's decisions leave it, in order (for quotas).
        sizes = {ident: state.size for ident, state in live_states.items()}
        done: list[Result | None] = [None] * len(todo)
        for n, stored in zip(looked_up, found, strict=True):
            done[n] = stored

        outcomes: list[Outcome] = []
        committed_at: list[int] = []
        redo_now: list[int] = []
        decide = self.engine.decide
        feedback_seen = False
        for i, ident, stored in zip(todo, idents, done, strict=True):
            item = batch[i]
            if stored is not None:  # a redelivery: answer with the original result
                results[i] = stored
                self.stats.duplicates += 1
                tally[(stored.tenant, stored.op, "duplicate")] += 1
                continue
            if item.sequence <= floor:
                # Applied before (Redis recorded the shard's position past it) and its
                # result has expired since: apply nothing twice, report nothing.
                self.stats.skipped += 1
                continue
            state = live_states[ident]
            try:
                outcome = decide(item.command, item.key, state, item.timestamp, item.importing)
            except Exception as exc:  # a command the rules cannot handle is refused, not retried
                outcome = self._refused(shard, item, CommandFailed("decide", exc), state)
            outcome.sequence = item.sequence  # a follower's too (coalesced feedback)
            outcomes.append(outcome)
            committed_at.append(i)
            if outcome.action is COUNT_FEEDBACK:
                feedback_seen = True

        followed: dict[int, list[int]] = {}
        if feedback_seen:
            outcomes, committed_at, followed = coalesce_feedback(outcomes, committed_at)

        await self.store.load_keys(outcomes)
        decisions = []
        positions = [batch[i].position for i in committed_at]
        if catch_up and positions and catch_up > positions[-1]:
            positions[-1] = catch_up
        for n, i in enumerate(committed_at):
            item = batch[i]
            try:
                decision = self._prepare(shard, item, outcomes[n], positions[n])
            except CommandFailed as failure:
                outcome = outcomes[n]
                outcomes[n] = self._refused(shard, item, failure, outcome)
                for j in followed.pop(i, ()):  # coalesced with it: each decided again alone
                    redo_now.append(j)
                decision = self._prepare(shard, item, outcomes[n], positions[n])
            if quotas and outcomes[n].action in _STORING:
                over = self._over_quota(item, outcomes[n], decision, sizes, totals)
                if over is not None:
                    outcomes[n] = self._quota_refused(item, outcomes[n], over)
                    decision = self._prepare(shard, item, outcomes[n], positions[n])
            decisions.append(decision)
        # A command that leaves part of its message unapplied carries no position (0): the
        # shard's recorded position only ever covers whole messages.
        applied_through = self._applied_through.get(shard, 0)
        try:
            replies = await self.store.commit_decisions(
                decisions, shard=shard, lease_token=self.token, applied_through=applied_through
            )
        except Exception as exc:
            presumed.forget(shard)  # what the totals were advanced by may not be written
            if classify(exc) is Fault.OUTAGE or len(decisions) < 2:
                raise
            # One of them, most likely, that the script cannot apply: each alone.
            replies = await self._commit_one_by_one(
                shard, batch, committed_at, outcomes, decisions, exc
            )
        redo: list[int] = redo_now
        # What the commit script recorded as the shard's position (a duplicate commits
        # nothing; nothing after a stale decision counts). A later commit checks Redis
        # still has it.
        recorded = self._applied_through.get(shard, 0)
        for position, reply in zip(positions, replies, strict=True):
            if reply.status == STALE:
                break
            if reply.status == OK and position > recorded:
                recorded = position
        if recorded:
            self._applied_through[shard] = recorded
        stale_keys: set[tuple[str, str]] = set()
        for i, outcome, reply in zip(committed_at, outcomes, replies, strict=True):
            if reply.status == OK and not stale_keys:  # the common case, first
                results[i] = outcome.result
                self._count(outcome.result, tally)
                if outcome.followers:
                    for j, follower in zip(followed[i], outcome.followers, strict=True):
                        results[j] = follower.result
                        self._count(follower.result, tally)
                continue
            ident = (outcome.command.tenant, outcome.key)
            if outcome.followers and i in followed and (reply.status != OK or ident in stale_keys):
                # A coalesced increment whose leader is redone: each follower is decided
                # again on its own (one that did get recorded is found as a duplicate).
                redo += followed[i]
            if reply.status == FENCED:
                raise LeaseLostError(shard)
            if reply.status == BEHIND:
                raise RedisBehindError(shard)
            if reply.status == STALE or ident in stale_keys:
                presumed.forget(shard)  # the totals were advanced by what did not happen
                if ident in unread and ident not in stale_keys:
                    self.stats.unread_stale += 1
                # Decided on a state someone else changed; everything after it for the same
                # key was decided on top of it, so it is redone too (and its commit, if it
                # got through, will be found as a duplicate).
                stale_keys.add(ident)
                redo.append(i)
            elif reply.status == DUPLICATE:
                stored = reply.stored_result
                assert stored is not None  # commit.lua answers "dup" with the stored result
                results[i] = stored
                self.stats.duplicates += 1
                tally[(outcome.command.tenant, stored.op, "duplicate")] += 1
            elif reply.status == OK:
                results[i] = outcome.result
                self._count(outcome.result, tally)
                for j, follower in zip(followed.get(i, ()), outcome.followers, strict=True):
                    results[j] = follower.result  # counted and recorded with it
                    self._count(follower.result, tally)
        return sorted(set(redo))

    def _over_quota(
        self,
        item: Admitted,
        outcome: Outcome,
        decision: tuple[object, ...],
        sizes: dict[tuple[str, str], int],
        totals: dict[str, list[int]],
    ) -> str | None:
        """The quota a write would take its tenant over (a refusal naming it), or None; if
        none, the round's running totals take the write in."""
        tenant = item.command.tenant
        ident = (tenant, outcome.key)
        before = sizes.get(ident, 0)
        after = self.store.stored_bytes(decision) if outcome.action is WRITE else 0
        count = (after > 0) - (before > 0)
        grow = after - before
        stored = totals.setdefault(tenant, [0, 0])
        limits = self.limits
        if count > 0 and limits.tenant_memories and stored[0] + count > limits.tenant_memories:
            return refusal(
                "tenant_memories",
                f"tenant {tenant!r} stores {stored[0]} memories, limit {limits.tenant_memories}",
            )
        if grow > 0 and limits.tenant_bytes and stored[1] + grow > limits.tenant_bytes:
            return refusal(
                "tenant_bytes",
                f"tenant {tenant!r} stores {stored[1]} bytes, limit {limits.tenant_bytes}",
            )
        sizes[ident] = after
        stored[0] += count
        stored[1] += grow
        return None

    def _quota_refused(self, item: Admitted, outcome: Outcome, reason: str) -> Outcome:
        """A write refused by a quota: rejected (recorded, audited, reported), nothing else."""
        return _rejection(item, outcome.base_version, outcome.base_command, reason)

    async def _commit_one_by_one(
        self,
        shard: int,
        batch: list[Admitted],
        committed_at: list[int],
        outcomes: list[Outcome],
        decisions: list[tuple[object, ...]],
        cause: BaseException,
    ) -> list[CommitReply]:
        """After a commit the script failed for a reason other than an outage: each
        decision alone, in order; one that fails again is rejected and dead-lettered. As in
        the script, once a key's decision is not applied, the key's later ones are
        answered stale (they were decided on top of it) and decided again."""
        self._log.warning(
            ("commit-split", shard, type(cause)),
            "shard %d: a commit of %d commands failed (%s); committing them one by one",
            shard,
            len(decisions),
            describe(cause),
        )
        replies: list[CommitReply] = []
        unsettled: set[str] = set()
        applied_through = self._applied_through.get(shard, 0)
        for n, (i, decision) in enumerate(zip(committed_at, decisions, strict=True)):
            item_key = self.store.decision_key(decision)
            if item_key in unsettled:
                replies.append(CommitReply(STALE))
                continue
            try:
                (reply,) = await self.store.commit_decisions(
                    [decision], shard=shard, lease_token=self.token, applied_through=applied_through
                )
            except Exception as exc:
                if classify(exc) is Fault.OUTAGE:
                    raise
                outcomes[n] = self._refused(
                    shard, batch[i], CommandFailed("commit", exc), outcomes[n]
                )
                (reply,) = await self.store.commit_decisions(
                    [self._prepare(shard, batch[i], outcomes[n], batch[i].position)],
                    shard=shard,
                    lease_token=self.token,
                    applied_through=applied_through,
                )
                unsettled.add(item_key)
            if reply.status != OK:
                unsettled.add(item_key)
            elif batch[i].position > applied_through:
                applied_through = batch[i].position
            replies.append(reply)
        return replies

    # --- forget, archive, restore ----------------------------------------------------------

    async def _apply_special_contained(self, shard: int, item: Admitted) -> Result | None:
        """``_apply_special``; a failure other than an outage rejects the command alone."""
        try:
            result = await self._apply_special(shard, item)
        except (LeaseLostError, RedisBehindError):
            raise
        except Exception as exc:
            if classify(exc) is Fault.OUTAGE:
                raise
            outcome = self._refused(shard, item, CommandFailed("apply", exc))
            (reply,) = await self.store.commit_decisions(
                [self._prepare(shard, item, outcome, item.position)],
                shard=shard,
                lease_token=self.token,
                applied_through=self._applied_through.get(shard, 0),
            )
            if reply.status == FENCED:
                raise LeaseLostError(shard) from None
            if reply.status == DUPLICATE:
                return reply.stored_result
            self._count(outcome.result, self._tallies.setdefault(shard, Counter()))
            return outcome.result
        if result is not None and self.report is not None:
            try:
                self.report(item, result)
            except Exception as exc:  # published with a bare entry (see Outbox.entry_of)
                self._log.warning(
                    ("special", type(exc)), "command %s: %s", item.command.id, describe(exc)
                )
        return result

    async def _apply_special(self, shard: int, item: Admitted) -> Result | None:
        """A forget or archive (over an owner, committed all or nothing in one call), or a
        restore (which reads the archive tier). Retried on a race with the reaper."""
        command = item.command
        assert isinstance(command, Forget | Archive | Restore)  # _SPECIAL routes only these
        tenant = command.tenant
        tally = self._tallies.setdefault(shard, Counter())
        for _attempt in range(20):
            _, done = await self.store.read([], [(tenant, command.id)], shard=shard)
            if done[0] is not None:
                self.stats.duplicates += 1
                return done[0]
            if item.sequence <= self._floors.get(shard, 0):
                self.stats.skipped += 1
                return None
            if isinstance(command, Restore):
                states, _ = await self.store.read([(tenant, item.key)], [], shard=shard)
                state = states[0]
                if state.archived:
                    state.archived_item = await self.store.archived_item(tenant, item.key)
                outcomes = [
                    self.engine.decide(command, item.key, state, item.timestamp, item.importing)
                ]
            else:
                outcomes = await self._decide_owner(command, item.timestamp, shard)
            await self.store.load_keys(outcomes)
            position = item.position
            outcomes[-1].sequence = item.sequence  # the summary: the one that is recorded
            sequences = [0] * (len(outcomes) - 1) + [position]
            replies = await self.store.commit(
                outcomes,
                shard=shard,
                sequences=sequences,
                lease_token=self.token,
                atomic=True,
                applied_through=self._applied_through.get(shard, 0),
            )
            last = replies[-1]
            if last.status == BEHIND:
                raise RedisBehindError(shard)
            if last.status == OK:
                self._applied_through[shard] = max(self._applied_through.get(shard, 0), position)
            if last.status == FENCED:
                raise LeaseLostError(shard)
            if last.status == DUPLICATE:
                self.stats.duplicates += 1
                return last.stored_result
            if last.status == OK:
                result = outcomes[-1].result
                self._count(result, tally)
                touched = len(outcomes) - 1
                if type(command) is Archive and touched:
                    label = self.telemetry.tenant(tenant)
                    self.stats.archived += touched
                    self.telemetry.memories_archived.add(touched, {"zeromem.tenant": label})
                    self.telemetry.memories_stored.add(-touched, {"zeromem.tenant": label})
                elif type(command) is Forget and touched:
                    self.stats.forgotten += touched
                if type(command) is Forget and self.store.vault is not None:
                    self.store.vault.forget(tenant, command.key)  # shredded if whole
                return result
            # stale: the reaper changed one of the memories; decide again on what is there
        raise StaleRoundsError(f"command {command.id} stayed stale after 20 rounds")

    async def _decide_owner(
        self, command: Forget | Archive, now: float, shard: int
    ) -> list[Outcome]:
        tenant, owner = command.tenant, command.key
        if owner.count(":") != 1:
            return self.engine.decide_owner(command, {}, {}, now)
        if isinstance(command, Forget):
            low = "-inf" if command.since is None else repr(command.since)
            high = "+inf" if command.until is None else repr(command.until)
        else:
            low, high = "-inf", f"({command.older_than!r}"
        prefix = command.prefix
        candidates, archived = await self.store.owner_memories(
            tenant, owner, low, high, archived=type(command) is Forget
        )
        archived = {k: item for k, item in archived.items() if k.startswith(prefix)}
        wanted = sorted({k for k in (*candidates, *archived) if k.startswith(prefix)})
        states, _ = await self.store.read([(tenant, k) for k in wanted], [], shard=shard)
        return self.engine.decide_owner(
            command, dict(zip(wanted, states, strict=True)), archived, now
        )

    def _count(self, result: Result, tally: Counter[tuple[str, str, str]]) -> None:
        if type(result) is Applied:
            self.stats.applied += 1
            self.stats.by_op[result.op] = self.stats.by_op.get(result.op, 0) + 1
            tally[(result.tenant, result.op, "applied")] += 1
            if result.op == "put" and result.previous_version == 0:
                tally[(result.tenant, "", "created")] += 1
            elif result.op == "delete":
                tally[(result.tenant, "", "removed")] += 1
        elif type(result) is Conflict:
            self.stats.conflicts += 1
            tally[(result.tenant, result.op, "conflict")] += 1
        else:
            self.stats.rejected += 1
            tally[(result.tenant, result.op, "rejected")] += 1

    def _prepare(
        self, shard: int, item: Admitted, outcome: Outcome, position: int
    ) -> tuple[object, ...]:
        """Everything of one command that can be done before the commit: its decision
        encoded for the script, and (with a ``report`` hook) its result encoded and its
        audit entry. Raises ``CommandFailed`` naming the stage that failed."""
        outcome.sequence = item.sequence
        try:
            decision = self.store.decision(outcome, position, shard)
        except Exception as exc:
            raise CommandFailed("encode", exc) from exc
        if self.report is not None:
            self.report(item, outcome.result)
        return decision

    def _refused(
        self,
        shard: int,
        item: Admitted,
        failure: CommandFailed,
        base: Outcome | KeyState | None = None,
    ) -> Outcome:
        """What a command that failed at some stage becomes: rejected (its result is
        recorded, nothing else changes), and dead-lettered with the reason."""
        command = item.command
        self._log.error(
            ("command", failure.stage, type(failure.cause)),
            "command %s at seq %d: %s",
            command.id,
            item.sequence,
            failure.reason,
            exc_info=failure.cause,
        )
        self._failed.setdefault(shard, []).append(
            Dead(item.msg, item.raw, failure.reason, item.sequence, item.index, reply=False)
        )
        if isinstance(base, Outcome):
            version, last_command = base.base_version, base.base_command
        elif isinstance(base, KeyState):
            version, last_command = base.version, base.last_command
        else:
            version, last_command = 0, ""
        return _rejection(item, version, last_command, failure.reason)


def _rejection(item: Admitted, version: int, last_command: str, reason: str) -> Outcome:
    """A command rejected on the state it was read in: its result is recorded, nothing
    else changes (guarded on nothing: a rejection never overwrites a memory)."""
    command = item.command
    return Outcome(
        command=command,
        key=item.key,
        action=NOTHING,
        guarded=False,
        base_version=version,
        base_command=last_command,
        result=Rejected(
            command_id=command.id,
            tenant=command.tenant,
            key=item.key,
            op=op_of(command),
            agent=command.agent,
            applied_at=item.timestamp,
            reason=reason,
        ),
    )


_NO_STATE = KeyState()  # a placeholder while the batch's keys are collected


def coalesce_feedback(
    outcomes: list[Outcome], committed_at: list[int]
) -> tuple[list[Outcome], list[int], dict[int, list[int]]]:
    """Fold each run of feedback of one kind on one key into its first outcome: one
    increment by the run's length instead of one per command (each command's result is
    still recorded under its id). A run ends at any other outcome for the same key, so a
    count never moves across the write or delete it was decided around."""
    kept: list[Outcome] = []
    kept_at: list[int] = []
    followed: dict[int, list[int]] = {}
    open_runs: dict[tuple[str, str, str], int] = {}  # (tenant, key, field) -> index in kept
    for outcome, i in zip(outcomes, committed_at, strict=True):
        tenant = outcome.command.tenant
        if outcome.action is COUNT_FEEDBACK:
            run = (tenant, outcome.key, outcome.feedback_field)
            leader = open_runs.get(run)
            if leader is not None:
                kept[leader].followers.append(outcome)
                followed.setdefault(kept_at[leader], []).append(i)
                continue
            open_runs[run] = len(kept)
        elif open_runs:
            for run in [r for r in open_runs if r[0] == tenant and r[1] == outcome.key]:
                del open_runs[run]
        kept.append(outcome)
        kept_at.append(i)
    return kept, kept_at, followed
