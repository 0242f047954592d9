"""``zeromem worker``: own a set of shards and apply their commands in order.

Per shard: take the shard's lease in Redis (so two workers never apply the same shard at
once), open this tenure's pull consumer where the shard stands (``bus.open_shard_consumer``),
then loop: fetch into the shard's window, pick a round of messages that is fair between
tenants (``fairness``), admit or dead-letter each command (a batch message carries
several), decide the round's commands in order, commit the decisions in one script call,
publish the results, acknowledge the window's done prefix. Each tenant's commands keep
their stream order, so an owner's commands are applied strictly in publish order.

Faults are contained (``faults``): a command that fails at any stage is rejected and
dead-lettered alone; a round that fails because Redis or NATS is down is retried in place
for as long as the outage lasts; one that fails for any other reason is split into its
messages, and a message that keeps failing is dead-lettered whole after
``Limits.message_attempts``. Nothing is retried for ever, and a stop is always prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import propagate
from opentelemetry.trace import SpanKind
from redis.asyncio import Redis
from redis.exceptions import RedisError

from zeromem import naming
from zeromem.bus import connect_nats, connect_redis, open_shard_consumer, provision
from zeromem.heap import settle_after_start
from zeromem.lifecycle.audit import dead_letter_entry, write_entry
from zeromem.lifecycle.redact import Redactor, install_log_redaction
from zeromem.lifecycle.settings import LifecycleSettings
from zeromem.limits import refusal
from zeromem.logs import BoundedLog
from zeromem.quota import RateQuota
from zeromem.schemas import (
    Applied,
    Archive,
    AuditBatch,
    AuditEntry,
    Command,
    DeadLetter,
    Forget,
    MemoryItem,
    Rejected,
    Restore,
    Result,
    batch_length,
    encode,
    encode_batch,
    owner_of,
    split_batch,
)
from zeromem.schemas.commands import TENANT_FULL_PATTERN
from zeromem.settings import Settings
from zeromem.store import scripts
from zeromem.store.items import KeyState
from zeromem.store.keys import (
    EXPIRING_TENANTS_KEY,
    RedisKeys,
    redis_keys,
    shard_lease_key,
    shard_sequence_key,
)
from zeromem.telemetry import Telemetry, TelemetryConfig, configure_telemetry
from zeromem.worker.engine import (
    COUNT_FEEDBACK,
    NOTHING,
    TOMBSTONE,
    WRITE,
    Engine,
    Outcome,
)
from zeromem.worker.fairness import ShardWindow
from zeromem.worker.faults import CommandFailed, Fault, StaleRoundsError, classify, describe
from zeromem.worker.intake import ENVELOPE_ALLOWANCE, Invalid, admit
from zeromem.worker.pull import PullFeed
from zeromem.worker.store import BEHIND, DUPLICATE, FENCED, OK, STALE, CommitReply, Store

# Commands applied on their own, between the batch's other commands: a forget or an
# archive reads the owner's memories as every earlier command left them; a restore reads
# the archive tier. Rare, so the common batch path never pays for them.
_SPECIAL = (Forget, Archive, Restore)
# Actions that change what a tenant stores (its quotas: memories, bytes).
_STORING = (WRITE, TOMBSTONE)
_ITEM_DECODER = msgspec.msgpack.Decoder(MemoryItem)

log = logging.getLogger(__name__)


class LeaseLostError(RuntimeError):
    pass


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
    skipped: int = 0  # at or below the shard's recorded sequence, with no stored result
    batches: int = 0
    by_op: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Admitted:
    msg: Msg
    command: Command
    key: str
    sequence: int
    timestamp: float
    raw: bytes  # the command as it came (one part of a batch message)
    index: int | None = None  # its place in a batch message
    # The stream position the shard may record once this command is applied: set on a
    # message's last command only (a batch message carries several), 0 on the others.
    position: int = 0
    # Prepared with its decision: the result, its encoding and its audit entry (what is
    # published after the commit if the commit keeps this result).
    result: Result | None = None
    payload: bytes = b""
    entry: AuditEntry | None = None
    importing: bool = False  # it came on the import subject: a put may be backdated


@dataclass(frozen=True, slots=True)
class _Dead:
    msg: Msg
    raw: bytes  # the refused command (the whole message, or one command of a batch)
    reason: str
    sequence: int
    index: int | None = None  # its place in a batch message
    # Tell a caller waiting on the command (Zm-Reply) why it was refused. Not when the
    # command's own rejected result goes out with the others (it failed after admission).
    reply: bool = True


class WorkerService:
    def __init__(
        self,
        settings: Settings,
        shards: Sequence[int],
        *,
        nc: NatsClient,
        redis: Redis,
        engine: Engine | None = None,
        telemetry: Telemetry | None = None,
        lifecycle: LifecycleSettings | None = None,
        replay: bool = False,
    ) -> None:
        self.settings = settings
        self.lifecycle = lifecycle or LifecycleSettings.from_env()
        self.redactor = Redactor(self.lifecycle.sensitive_pattern)
        # replay (``zeromem rebuild``): apply only; no results, change feed or audit
        self.replay = replay
        # per shard: the last command-stream sequence Redis had applied when this worker
        # took the shard; a command at or below it is never applied again
        self._floors: dict[int, int] = {}
        self.telemetry = telemetry or Telemetry()
        self.telemetry.bound(settings.limits.metric_tenants, settings.limits.metric_agents)
        # Outcomes of the batch each shard is processing, flushed to the metrics once per
        # batch. Per shard: shards run concurrently, each one batch at a time.
        self._tallies: dict[int, Counter[tuple[str, str, str]]] = {}
        self.shards = list(shards)
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.redis = redis
        if engine is None:
            from zeromem.worker.analysis import default_engine

            engine = default_engine(max_clock_skew_s=settings.max_clock_skew_s)
        self.engine = engine
        self.store = Store(
            redis, result_ttl_s=settings.result_ttl_s, tombstone_ttl_s=settings.tombstone_ttl_s
        )
        self.stats = WorkerStats()
        self.token = uuid.uuid4().hex
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.owned: set[int] = set()  # shards whose lease this worker holds right now
        # Per shard, the last stream sequence this worker applied (to notice a Redis that
        # came back without it).
        self._applied_through: dict[int, int] = {}
        # Per shard, until when (monotonic) the lease is known to be ours without asking.
        self._lease_sure_until: dict[int, float] = {}
        self._tenures = 0  # leases taken so far: names each tenure's consumer
        # What one message this worker publishes may carry: the broker's limit (1 MiB by
        # default), less room for headers and the envelope.
        self._payload_limit = max(
            64 * 1024, (getattr(nc, "max_payload", 0) or 1024 * 1024) - 64 * 1024
        )
        self._consumers: dict[int, str] = {}  # per owned shard, the consumer it reads
        self.limits = settings.limits
        # Everything a worker publishes fits in one message by construction: a result or
        # an audit entry carries at most one value (or patch) and its envelope.
        if self.limits.value_bytes + ENVELOPE_ALLOWANCE > self._payload_limit:
            raise ValueError(
                f"limit value_bytes ({self.limits.value_bytes}) leaves no room in the broker's "
                f"payload limit ({self._payload_limit} bytes for a worker's messages)"
            )
        self._log = BoundedLog(log, self.limits.log_interval_s)
        # Commands per second of each tenant on each shard (0: no quota).
        self._command_quota = RateQuota(self.limits.tenant_commands_per_s)
        # Per-command failures of the round each shard is processing: dead-lettered with it.
        self._failed: dict[int, list[_Dead]] = {}

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> WorkerService:
        install_log_redaction(self.redactor)
        await provision(self.js, self.settings, self.lifecycle)
        try:
            self.engine.warm_up()
        except Exception:  # only an optimisation: the first command would load it anyway
            log.exception("engine warm-up failed")
        self._tasks = [
            asyncio.create_task(self._run_shard(shard), name=f"shard-{shard}")
            for shard in self.shards
        ]
        self._tasks.append(asyncio.create_task(self._run_reaper(), name="reaper"))
        if self.lifecycle.archive_after_days > 0:
            self._tasks.append(asyncio.create_task(self._run_archiver(), name="archiver"))
        self._tasks.append(asyncio.create_task(self._report_lag(), name="lag"))
        return self

    async def stop(self) -> None:
        """Cancel every shard and wait for them, at most ``Limits.stop_grace_s``: a shard
        stuck on a server that does not answer is left behind (its batch is redelivered
        to the next owner)."""
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        tasks, self._tasks = self._tasks, []
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=self.limits.stop_grace_s)
            if stuck:
                log.warning(
                    "stopping: %d task(s) did not finish within %.1fs; leaving them",
                    len(stuck),
                    self.limits.stop_grace_s,
                )

    async def wait_owned(self, timeout: float = 10.0) -> None:
        """Until every shard's lease is held (tests and ``up`` wait on this)."""
        deadline = time.monotonic() + timeout
        while self.owned != set(self.shards):
            if time.monotonic() > deadline:
                raise TimeoutError(f"shards not acquired: {set(self.shards) - self.owned}")
            await asyncio.sleep(0.02)

    # --- one shard -----------------------------------------------------------------------

    async def _run_shard(self, shard: int) -> None:
        while not self._stopping.is_set():
            try:
                await self._acquire_lease(shard)
                await self._consume(shard)
            except asyncio.CancelledError:
                raise
            except LeaseLostError:
                log.warning("lost the lease of shard %d; standing by", shard)
            except RedisBehindError:
                log.warning("shard %d: Redis lost applies it had confirmed; catching up", shard)
                self._applied_through.pop(shard, None)
            except Exception:
                log.exception("shard %d loop failed; restarting it", shard)
                await asyncio.sleep(0.5)
            finally:
                self.owned.discard(shard)

    async def _acquire_lease(self, shard: int) -> None:
        key = shard_lease_key(shard)
        ttl_ms = int(self.settings.lease_ttl_s * 1000)
        while True:
            try:
                if await self.redis.set(key, self.token, nx=True, px=ttl_ms):
                    break
                if await self.redis.get(key) == self.token.encode():
                    break
            except RedisError as exc:
                log.warning("redis unavailable while taking the lease of shard %d: %s", shard, exc)
            await asyncio.sleep(min(1.0, self.settings.lease_ttl_s / 4))
        self.owned.add(shard)

    async def _keep_lease(self, shard: int) -> None:
        key = shard_lease_key(shard)
        ttl_ms = int(self.settings.lease_ttl_s * 1000)
        failures_since = None
        while True:
            await asyncio.sleep(self.settings.lease_ttl_s / 3)
            try:
                renewed_at = time.monotonic()
                if not await scripts.LEASE_RENEW(self.redis, [key], [self.token, ttl_ms]):
                    raise LeaseLostError(shard)
                self._lease_sure_until[shard] = renewed_at + self.settings.lease_ttl_s / 2
                failures_since = None
            except RedisError:
                failures_since = failures_since or time.monotonic()
                if time.monotonic() - failures_since > self.settings.lease_ttl_s:
                    raise LeaseLostError(shard) from None

    async def _confirm_lease(self, shard: int) -> None:
        checked_at = time.monotonic()
        ttl_ms = int(self.settings.lease_ttl_s * 1000)
        if not await scripts.LEASE_RENEW(
            self.redis, [shard_lease_key(shard)], [self.token, ttl_ms]
        ):
            raise LeaseLostError(shard)
        self._lease_sure_until[shard] = checked_at + self.settings.lease_ttl_s / 2

    async def _consume(self, shard: int) -> None:
        # Where Redis says the shard stands, read under the lease: no former owner can
        # commit any more (fenced), so nothing moves it but this worker from here on.
        after = await self.load_floor(shard)
        self._tenures += 1
        tenure = f"{self.token[:12]}{self._tenures}"
        consumer = await open_shard_consumer(self.js, self.settings, shard, tenure, after)
        self._consumers[shard] = consumer
        feed = await PullFeed(self.nc, naming.COMMAND_STREAM, consumer).start()
        keeper = asyncio.create_task(self._keep_lease(shard))
        window = ShardWindow()
        limits = self.limits
        batch_size = self.settings.batch_size
        # Commands and bytes per message seen so far here (batch messages carry many): how
        # many messages to ask for. Start small: a full fetch of batch messages could bring
        # a hundred times ``batch_size`` commands.
        seen_msgs, seen_commands, seen_bytes = 1, 16, 4096
        # Held messages are reported in progress before the server's ack wait runs out, so
        # it does not deliver them again while they wait for their tenant's turn.
        ack_wait = self.settings.ack_wait_s
        renewed_at = time.monotonic()
        refusals: list[asyncio.Future[object]] = []  # dead letters of messages over quota
        try:
            self._lease_sure_until[shard] = time.monotonic() + self.settings.lease_ttl_s / 2
            while not self._stopping.is_set():
                if keeper.done():
                    keeper.result()  # raises LeaseLostError
                if time.monotonic() > self._lease_sure_until[shard]:
                    # A worker that stalled (SIGSTOP, a frozen host) asks before taking more
                    # commands; if it was replaced, its consumer is gone anyway.
                    await self._confirm_lease(shard)
                room = limits.shard_window - window.commands
                room_bytes = limits.shard_window_bytes - window.bytes
                if room > 0 and room_bytes > 0:
                    wanted = max(
                        1,
                        min(
                            batch_size,
                            room * seen_msgs // seen_commands,
                            room_bytes * seen_msgs // seen_bytes,
                        ),
                    )
                    try:
                        # With messages in hand, only what is there now: no waiting.
                        msgs = await feed.fetch(wanted, timeout=0.001 if len(window) else 0.5)
                    except TimeoutError:
                        msgs = []
                    over_quota: list[_Dead] = []
                    for msg in msgs:
                        seq, _ = stream_position(msg.reply)
                        count = _declared_commands(msg)
                        tenant = naming.tenant_of_command_subject(msg.subject)
                        # Over its rate, a tenant's message is refused before it takes a
                        # place in the window or a turn: its backlog holds nobody up.
                        refused = not self._command_quota.take((shard, tenant), count)
                        if not window.add(msg, seq, tenant, count, done=refused):
                            if seq <= window.acknowledged:  # done; its ack was lost: again
                                await msg.ack()
                            continue
                        if refused:
                            over_quota.append(
                                _Dead(
                                    msg,
                                    msg.data,
                                    refusal(
                                        "tenant_commands_per_s",
                                        f"tenant {tenant!r} is over "
                                        f"{limits.tenant_commands_per_s:g} commands/s on "
                                        f"shard {shard}; "
                                        f"{count} command(s) refused",
                                    ),
                                    seq,
                                )
                            )
                        seen_msgs += 1
                        seen_commands += count
                        seen_bytes += len(msg.data)
                    if over_quota:
                        # Stored before the window's prefix is acknowledged; no round waits.
                        refusals += await self._send_dead_letters(shard, over_quota)
                if time.monotonic() - renewed_at > ack_wait / 4:
                    renewed_at = time.monotonic()
                    for held in window.waiting_since(renewed_at - ack_wait / 2):
                        await held.msg.in_progress()
                chosen = window.select(batch_size, limits.tenant_round_share)
                if chosen:
                    await self._process_contained(
                        shard, [h.msg for h in chosen], window.positions(chosen)
                    )
                last = window.finish(chosen)  # also what was refused on arrival
                if last is not None:
                    if refusals:
                        await asyncio.wait_for(asyncio.gather(*refusals), ack_wait)
                        refusals = []
                    await last.msg.ack()  # AckPolicy.ALL: the whole done prefix
        finally:
            self._consumers.pop(shard, None)
            keeper.cancel()
            with contextlib.suppress(BaseException):
                await keeper
            # Bounded: a stop must not wait on a server that does not answer.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(feed.stop(), 1.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    scripts.LEASE_RELEASE(self.redis, [shard_lease_key(shard)], [self.token]), 1.0
                )

    async def _check_redis_not_behind(self, shard: int) -> None:
        """After a Redis error: if Redis came back without applies this worker confirmed,
        stop before a retry moves the shard's position past the hole (the shard then
        restarts, and its new consumer delivers the gap again)."""
        with contextlib.suppress(RedisError):
            raw = await self.redis.hget(shard_sequence_key(), str(shard))
            if int(raw or 0) < self._applied_through.get(shard, 0):
                raise RedisBehindError(shard)

    async def load_floor(self, shard: int) -> int:
        """Read the shard's last applied stream sequence (after taking its lease: a
        rebuild may have moved it while another process held the shard)."""
        raw = await self.redis.hget(shard_sequence_key(), str(shard))
        self._floors[shard] = int(raw or 0)
        return self._floors[shard]

    async def _process_contained(
        self, shard: int, msgs: list[Msg], positions: dict[int, int] | None = None
    ) -> int:
        """``process`` the round until it is done, containing what goes wrong (see the
        module's docstring); returns how many commands the messages carried."""
        outage_delay = 0.05
        attempts = 0
        while True:
            if self._stopping.is_set():
                raise asyncio.CancelledError
            try:
                return await self.process(shard, msgs, ack=False, positions=positions)
            except (LeaseLostError, RedisBehindError, asyncio.CancelledError):
                raise
            except Exception as exc:
                fault = classify(exc)
                if fault is Fault.OUTAGE:
                    if isinstance(exc, RedisError):
                        await self._check_redis_not_behind(shard)
                    # Retry this same round, for as long as the outage lasts: moving on
                    # would apply a later command of an owner before an earlier one. Every
                    # commit is idempotent, so a retry is safe.
                    self._log.warning(
                        ("outage", shard, type(exc)),
                        "shard %d: %s; retrying the batch in place",
                        shard,
                        describe(exc),
                    )
                    await asyncio.sleep(outage_delay)
                    outage_delay = min(outage_delay * 2, 2.0)
                    continue
                if len(msgs) > 1:
                    # Whichever message caused it, each alone: the others go on.
                    self._log.warning(
                        ("split", shard, type(exc)),
                        "shard %d: a batch of %d messages failed (%s); processing them one by one",
                        shard,
                        len(msgs),
                        describe(exc),
                        exc_info=exc,
                    )
                    total = 0
                    for msg in msgs:
                        total += await self._process_contained(shard, [msg], positions)
                    return total
                attempts += 1
                if attempts >= self.limits.message_attempts:
                    return await self._give_up(shard, msgs[0], exc, attempts)
                self._log.warning(
                    ("retry", shard, type(exc)),
                    "shard %d: a message failed (%s); attempt %d of %d",
                    shard,
                    describe(exc),
                    attempts,
                    self.limits.message_attempts,
                )
                await asyncio.sleep(self.limits.attempt_backoff_s * 2 ** (attempts - 1))

    async def _give_up(self, shard: int, msg: Msg, exc: BaseException, attempts: int) -> int:
        """Dead-letter a message that kept failing, whole (raw bytes kept), with the error."""
        seq, _ = stream_position(msg.reply)
        reason = f"internal: failed {attempts} times, dead-lettered whole: {describe(exc)}"
        self._log.error(
            ("give-up", shard, type(exc)),
            "shard %d: message at seq %d %s",
            shard,
            seq,
            reason,
            exc_info=exc,
        )
        await self._dead_letter(shard, [_Dead(msg, msg.data, reason, seq)])
        return 1

    # --- one batch -----------------------------------------------------------------------

    async def process(
        self,
        shard: int,
        msgs: Sequence[Msg],
        ack: bool = True,
        positions: dict[int, int] | None = None,
    ) -> int:
        """Admit, apply, report and (``ack``) acknowledge ``msgs``; returns how many
        commands they carried. ``positions``: per message (by stream sequence), the
        position the shard may record once it is applied (default: its own sequence)."""
        admitted, dead = self._admit(shard, msgs, positions)
        dead_acks: list[asyncio.Future[object]] = []
        if dead and not self.replay:  # a replay's dead letters are on the stream already
            # Their acknowledgements are awaited with the audit's: the commands around them
            # do not wait for a round trip first.
            dead_acks = await self._send_dead_letters(shard, dead)
        started_ns = time.time_ns()
        self._tallies[shard] = Counter()
        self._failed[shard] = []
        results = await self._apply(shard, admitted)
        self.stats.batches += 1
        failed = self._failed.pop(shard)
        if self.replay:
            self._tallies.pop(shard, None)
            return len(admitted) + len(dead)
        # The audit record goes out first and is awaited after the results are published:
        # its round trip overlaps theirs, and the batch is acked only once it is stored.
        audit_acks = dead_acks + await self._publish_audit(shard, admitted, results)
        await self._publish_results(shard, admitted, results)
        if audit_acks:
            # Bounded: an acknowledgement lost in a broker restart must not hang the shard
            # (its lease would be renewed for ever). A timeout retries the batch in place.
            await asyncio.wait_for(asyncio.gather(*audit_acks), self.settings.ack_wait_s)
        if failed:
            await self._dead_letter(shard, failed)
        if msgs and ack:
            await msgs[-1].ack()  # AckPolicy.ALL: acknowledges the whole batch
        commands = len(admitted) + len(dead)
        self._record_batch(commands, admitted, results, started_ns, self._tallies.pop(shard))
        return commands

    def _admit(
        self, shard: int, msgs: Sequence[Msg], positions: dict[int, int] | None
    ) -> tuple[list[_Admitted], list[_Dead]]:
        """Every command of ``msgs`` admitted, or refused with its reason."""
        admitted: list[_Admitted] = []
        dead: list[_Dead] = []
        shards = self.settings.shards
        limits = self.limits
        resolve_key = self.engine.resolve_key
        batch_header = naming.BATCH_HEADER
        for msg in msgs:
            seq, ts = stream_position(msg.reply)
            try:
                subject_tenant, _, subject_agent = _subject_identity(msg.subject)
            except ValueError as exc:
                dead.append(_Dead(msg, msg.data, f"invalid: {exc}", seq))
                continue
            importing = naming.is_import_subject(msg.subject)
            headers = msg.headers
            batched = bool(headers) and batch_header in headers
            if batched:
                count = batch_length(msg.data)
                if count is None:
                    dead.append(
                        _Dead(
                            msg,
                            msg.data,
                            "invalid: not a command batch: bytes are not a msgpack array",
                            seq,
                        )
                    )
                    continue
                if count > limits.batch_commands:
                    # Refused whole, once: one dead letter, not one per command.
                    dead.append(
                        _Dead(
                            msg,
                            msg.data,
                            refusal(
                                "batch_commands",
                                f"{count} commands in one batch message, limit "
                                f"{limits.batch_commands}",
                            ),
                            seq,
                        )
                    )
                    continue
            else:
                count = 1
            if batched:
                try:
                    parts = split_batch(msg.data)
                except Exception as exc:
                    dead.append(_Dead(msg, msg.data, f"invalid: not a command batch: {exc}", seq))
                    continue
                last = len(parts) - 1
            else:
                parts, last = (msg.data,), 0
            position = seq if positions is None else positions.get(seq, seq)
            for index, data in enumerate(parts):
                try:
                    verdict = admit(
                        subject_tenant,
                        data,
                        shard=shard,
                        shards=shards,
                        limits=limits,
                        subject_agent=subject_agent,
                    )
                except Exception as exc:  # never let one message stop the shard
                    verdict = Invalid(f"invalid: {describe(exc)}")
                if type(verdict) is Invalid:
                    dead.append(_Dead(msg, data, verdict.reason, seq, index if batched else None))
                    continue
                admitted.append(
                    _Admitted(
                        msg,
                        verdict,
                        resolve_key(verdict),
                        seq,
                        ts,
                        data,  # type: ignore[arg-type]
                        index if batched else None,
                        position if index == last else 0,
                        importing=importing,
                    )
                )
        return admitted, dead

    async def _publish_audit(
        self, shard: int, batch: list[_Admitted], results: list[Result | None]
    ) -> list[asyncio.Future[object]]:
        """One audit message per tenant in the batch (nearly always one): every applied,
        conflicting and rejected command, redacted."""
        by_tenant: dict[str, list[object]] = {}
        for item, result in zip(batch, results, strict=True):
            if result is None:
                continue
            entries = by_tenant.get(item.command.tenant)
            if entries is None:
                entries = by_tenant[item.command.tenant] = []
            entry = item.entry if result is item.result else None
            entries.append(entry or self._entry_of(item, result))
        acks = []
        last_sequence = batch[-1].sequence if batch else 0
        for tenant, entries in by_tenant.items():
            # Several messages when one would pass the broker's payload limit (a batch of
            # batch messages can hold thousands of commands).
            parts = _fit(
                entries,
                lambda part: _encode(AuditBatch(entries=tuple(part))),  # type: ignore[arg-type]
                self._payload_limit,
            )
            for n, data in enumerate(parts):
                # a batch retried after a lost ack is recorded once
                once = naming.audit_dedupe_id(tenant, shard, last_sequence, n)
                acks.append(
                    await self.js.publish_async(
                        naming.audit_write_subject(tenant, shard),
                        data,
                        headers={naming.MSG_ID_HEADER: once},
                    )
                )
        return acks

    async def _apply(self, shard: int, batch: list[_Admitted]) -> list[Result | None]:
        """Each command's result, in order (``None``: already applied before this worker
        took the shard, its result no longer stored; nothing to report)."""
        size = self.settings.batch_size
        if len(batch) <= size:
            return await self._apply_chunk(shard, batch)
        # Batch messages can bring many commands per fetch: each script call stays bounded
        # (Redis serves nothing else while one runs).
        results: list[Result | None] = []
        for start in range(0, len(batch), size):
            results += await self._apply_chunk(shard, batch[start : start + size])
        return results

    async def _apply_chunk(self, shard: int, batch: list[_Admitted]) -> list[Result | None]:
        special = _SPECIAL
        if not any(type(a.command) in special for a in batch):
            return await self._apply_plain(shard, batch)
        results: list[Result | None] = []
        segment: list[_Admitted] = []
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

    async def _apply_plain(self, shard: int, batch: list[_Admitted]) -> list[Result | None]:
        results: list[Result | None] = [None] * len(batch)
        todo = list(range(len(batch)))
        for attempt in range(20):
            if not todo:
                break
            todo = await self._apply_round(shard, batch, todo, results, first=attempt == 0)
        if todo:
            raise StaleRoundsError(f"{len(todo)} commands stayed stale after 20 rounds")
        return results

    async def _apply_round(
        self,
        shard: int,
        batch: list[_Admitted],
        todo: list[int],
        results: list[Result | None],
        *,
        first: bool = True,
    ) -> list[int]:
        """Read, decide and commit the commands at ``todo``; return those to redo."""
        tally = self._tallies.setdefault(shard, Counter())
        floor = self._floors.get(shard, 0)
        # Each distinct (tenant, key) once, in first-seen order; ``idents`` remembers each
        # command's, so the tuple is built once per command.
        live_states: dict[tuple[str, str], KeyState] = {}
        idents: list[tuple[str, str]] = []
        # Whose stored result to look up before deciding. A first round looks up only the
        # commands at or below the shard's floor (redeliveries to a new lease holder, where
        # the floor rule needs to know): any other duplicate is caught by the commit script,
        # which answers it with the stored result and leaves the memory alone. A look-up
        # per command cost Redis a call and the worker a key to build for every command.
        looked_up: list[int] = []
        command_ids: list[tuple[str, str]] = []
        for n, i in enumerate(todo):
            item = batch[i]
            tenant = item.command.tenant
            ident = (tenant, item.key)
            live_states[ident] = _NO_STATE
            idents.append(ident)
            if not first or item.sequence <= floor:
                looked_up.append(n)
                command_ids.append((tenant, item.command.id))
        limits = self.limits
        quotas = limits.tenant_memories > 0 or limits.tenant_bytes > 0
        tenants = list({ident[0]: None for ident in live_states}) if quotas else []
        states, found, totals = await self.store.read_with_totals(
            list(live_states), command_ids, tenants
        )
        live_states = dict(zip(live_states, states, strict=True))
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
            outcomes.append(outcome)
            committed_at.append(i)
            if outcome.action is COUNT_FEEDBACK:
                feedback_seen = True

        followed: dict[int, list[int]] = {}
        if feedback_seen:
            outcomes, committed_at, followed = _coalesce_feedback(outcomes, committed_at)

        decisions = []
        for n, i in enumerate(committed_at):
            item = batch[i]
            try:
                decision = self._prepare(item, outcomes[n])
            except CommandFailed as failure:
                outcome = outcomes[n]
                outcomes[n] = self._refused(shard, item, failure, outcome)
                for j in followed.pop(i, ()):  # coalesced with it: each decided again alone
                    redo_now.append(j)
                decision = self._prepare(item, outcomes[n])
            if quotas and outcomes[n].action in _STORING:
                over = self._over_quota(item, outcomes[n], decision, sizes, totals)
                if over is not None:
                    outcomes[n] = self._quota_refused(item, outcomes[n], over)
                    decision = self._prepare(item, outcomes[n])
            decisions.append(decision)
        # A command that leaves part of its message unapplied carries no position (0): the
        # shard's recorded position only ever covers whole messages.
        positions = [batch[i].position for i in committed_at]
        applied_through = self._applied_through.get(shard, 0)
        try:
            replies = await self.store.commit_decisions(
                decisions, shard=shard, lease_token=self.token, applied_through=applied_through
            )
        except Exception as exc:
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
                # Decided on a state someone else changed; everything after it for the same
                # key was decided on top of it, so it is redone too (and its commit, if it
                # got through, will be found as a duplicate).
                stale_keys.add(ident)
                redo.append(i)
            elif reply.status == DUPLICATE:
                results[i] = reply.stored_result
                self.stats.duplicates += 1
                tally[(outcome.command.tenant, reply.stored_result.op, "duplicate")] += 1
            elif reply.status == OK:
                results[i] = outcome.result
                self._count(outcome.result, tally)
                for j, follower in zip(followed.get(i, ()), outcome.followers, strict=True):
                    results[j] = follower.result  # counted and recorded with it
                    self._count(follower.result, tally)
        return sorted(set(redo))

    def _over_quota(
        self,
        item: _Admitted,
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
        after = len(decision[9]) if outcome.action is WRITE else 0  # type: ignore[arg-type]
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

    def _quota_refused(self, item: _Admitted, outcome: Outcome, reason: str) -> Outcome:
        """A write refused by a quota: rejected (recorded, audited, reported), nothing else."""
        command = item.command
        return Outcome(
            command=command,
            key=item.key,
            action=NOTHING,
            guarded=False,
            base_version=outcome.base_version,
            base_command=outcome.base_command,
            result=Rejected(
                command_id=command.id,
                tenant=command.tenant,
                key=item.key,
                op=type(command).__name__.lower(),
                agent=command.agent,
                applied_at=item.timestamp,
                reason=reason,
            ),
        )

    async def _commit_one_by_one(
        self,
        shard: int,
        batch: list[_Admitted],
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
            item_key = str(decision[0])
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
                    [self._prepare(batch[i], outcomes[n])],
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

    async def _apply_special_contained(self, shard: int, item: _Admitted) -> Result | None:
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
                [self._prepare(item, outcome)],
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
        if result is not None and not self.replay:
            try:
                item.entry = write_entry(item.command, item.sequence, result, self.redactor)
                item.payload = self._fitting(result)
                item.result = result
            except Exception as exc:  # published with a bare entry (see _entry_of)
                self._log.warning(
                    ("special", type(exc)), "command %s: %s", item.command.id, describe(exc)
                )
        return result

    async def _apply_special(self, shard: int, item: _Admitted) -> Result | None:
        """A forget or archive (over an owner, committed all or nothing in one call), or a
        restore (which reads the archive tier). Retried on a race with the reaper."""
        command = item.command
        tenant = command.tenant
        keys = redis_keys(tenant)
        tally = self._tallies.setdefault(shard, Counter())
        for _attempt in range(20):
            _, done = await self.store.read([], [(tenant, command.id)])
            if done[0] is not None:
                self.stats.duplicates += 1
                return done[0]
            if item.sequence <= self._floors.get(shard, 0):
                self.stats.skipped += 1
                return None
            if type(command) is Restore:
                states, _ = await self.store.read([(tenant, item.key)], [])
                state = states[0]
                if state.archived:
                    blob = await self.redis.hget(keys.archive(owner_of(item.key)), item.key)
                    state.archived_item = _ITEM_DECODER.decode(blob) if blob else None
                outcomes = [
                    self.engine.decide(command, item.key, state, item.timestamp, item.importing)
                ]
            else:
                outcomes = await self._decide_owner(command, item.timestamp)  # type: ignore[arg-type]
            position = item.position
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
                return result
            # stale: the reaper changed one of the memories; decide again on what is there
        raise StaleRoundsError(f"command {command.id} stayed stale after 20 rounds")

    async def _decide_owner(self, command: Forget | Archive, now: float) -> list[Outcome]:
        tenant, owner = command.tenant, command.key
        keys = redis_keys(tenant)
        if owner.count(":") != 1:
            return self.engine.decide_owner(command, {}, {}, now)
        if type(command) is Forget:
            low = "-inf" if command.since is None else repr(command.since)
            high = "+inf" if command.until is None else repr(command.until)
        else:
            low, high = "-inf", f"({command.older_than!r}"
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(keys.by_time(owner), low, high)
            if type(command) is Forget:
                pipe.hgetall(keys.archive(owner))
            replies = await pipe.execute()
        prefix = command.prefix
        candidates = [k.decode() for k in replies[0]]
        archived: dict[str, MemoryItem] = {}
        if type(command) is Forget:
            archived = {
                k.decode(): _ITEM_DECODER.decode(v)
                for k, v in replies[1].items()
                if k.decode().startswith(prefix)
            }
        wanted = sorted({k for k in (*candidates, *archived) if k.startswith(prefix)})
        states, _ = await self.store.read([(tenant, k) for k in wanted], [])
        return self.engine.decide_owner(
            command, dict(zip(wanted, states, strict=True)), archived, now
        )

    # --- expiry --------------------------------------------------------------------------

    async def _run_reaper(self) -> None:
        while not self._stopping.is_set():
            await asyncio.sleep(self.settings.reaper_interval_s)
            try:
                await self.reap_expired()
            except RedisError as exc:
                log.warning("reaper: redis error, will retry: %s", exc)
            except Exception:
                log.exception("reaper failed; will retry")

    async def reap_expired(self, limit: int = 512) -> int:
        """Tombstone this worker's memories whose time to live has passed. The commit is
        guarded like any other, so a command racing with the reaper wins cleanly."""
        now = time.time()
        reaped = 0
        for raw_tenant in await self.redis.smembers(EXPIRING_TENANTS_KEY):
            tenant = raw_tenant.decode()
            due = await self.redis.zrangebyscore(
                RedisKeys(tenant).expiring(), "-inf", now, start=0, num=limit
            )
            by_shard: dict[int, list[str]] = {}
            for raw_key in due:
                key = raw_key.decode()
                shard = naming.shard_for(tenant, owner_of(key), self.settings.shards)
                if shard in self.owned:
                    by_shard.setdefault(shard, []).append(key)
            for shard, keys in by_shard.items():
                states, _ = await self.store.read([(tenant, k) for k in keys], [])
                orphans = [
                    k
                    for k, st in zip(keys, states, strict=True)
                    if st.item is None or st.item.expires_at is None
                ]
                if orphans:  # an index entry that outlived its memory: drop it
                    await self.redis.zrem(RedisKeys(tenant).expiring(), *orphans)
                outcomes = [
                    o
                    for k, st in zip(keys, states, strict=True)
                    if (o := self.engine.reap(tenant, k, st, now)) is not None
                ]
                replies = await self.store.commit(
                    outcomes, shard=shard, sequences=[0] * len(outcomes), lease_token=self.token
                )
                for outcome, reply in zip(outcomes, replies, strict=True):
                    if reply.status == OK:
                        label = self.telemetry.tenant(tenant)
                        reaped += 1
                        self.stats.expired += 1
                        self.telemetry.memories_expired.add(1, {"zeromem.tenant": label})
                        self.telemetry.memories_stored.add(-1, {"zeromem.tenant": label})
                        if self.replay:
                            continue  # reproduced by a rebuild: announced the first time
                        namespace, owner_id, _ = outcome.key.split(":", 2)
                        await self.nc.publish(
                            naming.change_subject(tenant, shard, namespace, owner_id),
                            encode(outcome.result),
                        )
        return reaped

    # --- the archive schedule ----------------------------------------------------------------

    async def _run_archiver(self) -> None:
        from zeromem.lifecycle.archive import schedule_archive

        while not self._stopping.is_set():
            try:
                cutoff = time.time() - self.lifecycle.archive_after_days * 86400
                sent = await schedule_archive(
                    self.nc, self.redis, self.settings, cutoff, shards=set(self.owned)
                )
                if sent:
                    log.info("archiver: %d archive commands published", sent)
            except Exception:
                log.exception("archiver failed; will retry")
            await asyncio.sleep(self.lifecycle.archive_interval_s)

    def _count(self, result: Result, tally: Counter[tuple[str, str, str]]) -> None:
        status = type(result).__name__
        if status == "Applied":
            self.stats.applied += 1
            self.stats.by_op[result.op] = self.stats.by_op.get(result.op, 0) + 1
            tally[(result.tenant, result.op, "applied")] += 1
            if result.op == "put" and result.previous_version == 0:  # type: ignore[union-attr]
                tally[(result.tenant, "", "created")] += 1
            elif result.op == "delete":
                tally[(result.tenant, "", "removed")] += 1
        elif status == "Conflict":
            self.stats.conflicts += 1
            tally[(result.tenant, result.op, "conflict")] += 1
        else:
            self.stats.rejected += 1
            tally[(result.tenant, result.op, "rejected")] += 1

    # --- telemetry -----------------------------------------------------------------------

    def _record_batch(
        self,
        size: int,
        batch: list[_Admitted],
        results: list[Result | None],
        started_ns: int,
        tally: Counter[tuple[str, str, str]],
    ) -> None:
        """Metrics once per batch (a counter per outcome, not per command), and a span per
        command that carried a trace context, so an agent's turn shows its writes."""
        t = self.telemetry
        t.batch_size.record(size)
        now = time.time()
        tenants = set()
        for (tenant_id, op, outcome), count in tally.items():
            tenant = t.tenant(tenant_id)
            tenants.add(tenant)
            if outcome == "created":
                t.memories_stored.add(count, {"zeromem.tenant": tenant})
            elif outcome == "removed":
                t.memories_stored.add(-count, {"zeromem.tenant": tenant})
            else:
                t.commands.add(
                    count, {"zeromem.tenant": tenant, "zeromem.op": op, "zeromem.outcome": outcome}
                )
        for tenant in tenants:
            t.write_llm_tokens.add(0, {"zeromem.tenant": tenant})  # the write path's whole LLM cost
        tracer = t.tracer
        last_msg = None
        for item, result in zip(batch, results, strict=True):
            if item.msg is not last_msg:
                # Once per message: a batch message's commands were published together, and
                # a histogram record per command was 7% of the worker's time.
                last_msg = item.msg
                t.apply_duration.record(
                    max(0.0, now - item.command.ts),
                    {"zeromem.tenant": t.tenant(item.command.tenant)},
                )
            headers = item.msg.headers
            if headers and "traceparent" in headers and result is not None:
                span = tracer.start_span(
                    "process zm.cmd",
                    context=propagate.extract(headers),
                    kind=SpanKind.CONSUMER,
                    start_time=started_ns,
                    attributes={
                        "zeromem.tenant": item.command.tenant,
                        "zeromem.op": result.op,
                        "zeromem.outcome": type(result).__name__.lower(),
                        "messaging.system": "nats",
                        "messaging.operation.type": "process",
                    },
                )
                span.end()

    async def _report_lag(self) -> None:
        while not self._stopping.is_set():
            for shard in sorted(self.owned):
                try:
                    info = await self.js.consumer_info(
                        naming.COMMAND_STREAM, self._consumers[shard]
                    )
                    self.telemetry.set_lag(shard, info.num_pending + info.num_ack_pending)
                except Exception:  # lag is informative; never a reason to fail
                    pass
            await asyncio.sleep(5.0)

    async def _publish_results(
        self, shard: int, batch: list[_Admitted], results: list[Result | None]
    ) -> None:
        publish = self.nc.publish
        reply_header = naming.REPLY_HEADER
        # The change feed gets one message per owner per batch: a single result as it is,
        # several as a batch message (an array, in apply order). Under bulk writes that is
        # a fraction of the messages the broker stores; an agent writing now and then
        # still gets one result per message.
        by_owner: dict[tuple[str, str, str], list[bytes]] = {}
        for item, result in zip(batch, results, strict=True):
            if result is None:
                continue
            data = item.payload if result is item.result else self._payload_of(item, result)
            if not data:
                continue
            namespace, owner_id = item.key.split(":", 2)[:2]
            by_owner.setdefault((item.command.tenant, namespace, owner_id), []).append(data)
            headers = item.msg.headers
            if (
                headers
                and (reply_to := headers.get(reply_header))
                and reply_allowed(item.msg.subject, reply_to)
            ):
                try:
                    await publish(reply_to, data)
                except Exception as exc:
                    if classify(exc) is Fault.OUTAGE:
                        raise
                    # A reply subject the broker refuses is the caller's: its result still
                    # goes to the change feed.
                    self._log.warning(
                        ("reply", shard, type(exc)),
                        "shard %d: could not reply to %.60r: %s",
                        shard,
                        reply_to,
                        describe(exc),
                    )
        for (tenant, namespace, owner_id), encoded in by_owner.items():
            subject = naming.change_subject(tenant, shard, namespace, owner_id)
            for chunk in _chunks(encoded, self._payload_limit, naming.MAX_BATCH_RESULTS):
                if len(chunk) == 1:
                    await publish(subject, chunk[0])
                else:
                    await publish(
                        subject, encode_batch(chunk), headers={naming.BATCH_HEADER: str(len(chunk))}
                    )

    def _prepare(self, item: _Admitted, outcome: Outcome) -> tuple[object, ...]:
        """Everything of one command that can be done before the commit: its decision
        encoded for the script, and (not in a replay) its result encoded and its audit
        entry. Raises ``CommandFailed`` naming the stage that failed."""
        try:
            decision = self.store.decision(outcome, item.position)
        except Exception as exc:
            raise CommandFailed("encode", exc) from exc
        if self.replay:
            return decision
        result = outcome.result
        try:
            item.entry = write_entry(item.command, item.sequence, result, self.redactor)
        except Exception as exc:
            raise CommandFailed("audit entry", exc) from exc
        try:
            item.payload = self._fitting(result)
        except Exception as exc:
            raise CommandFailed("result encoding", exc) from exc
        item.result = result
        return decision

    def _fitting(self, result: Result) -> bytes:
        """``result`` encoded; without its memory if that would not fit in one message
        (admission keeps values far smaller, so this is only a guarantee)."""
        data = _encode(result)
        if len(data) > self._payload_limit and type(result) is Applied:
            data = _encode(msgspec.structs.replace(result, item=None))
        return data

    def _entry_of(self, item: _Admitted, result: Result) -> AuditEntry:
        """The audit entry of a result not prepared with its decision (a stored result
        answering a redelivery): a bare one if the full one cannot be built."""
        try:
            return write_entry(item.command, item.sequence, result, self.redactor)
        except Exception as exc:
            self._log.warning(
                ("entry", type(exc)), "audit entry of %s: %s", item.command.id, describe(exc)
            )
            return AuditEntry(
                kind="write",
                at=result.applied_at,
                tenant=result.tenant,
                op=result.op,
                key=result.key,
                status=type(result).__name__.lower(),
                command_id=item.command.id,
                seq=item.sequence,
                reason=f"audit entry incomplete: {type(exc).__name__}",
            )

    def _payload_of(self, item: _Admitted, result: Result) -> bytes:
        try:
            return self._fitting(result)
        except Exception as exc:
            self._log.warning(
                ("payload", type(exc)),
                "result of %s not published: %s",
                item.command.id,
                describe(exc),
            )
            return b""

    def _refused(
        self,
        shard: int,
        item: _Admitted,
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
            _Dead(item.msg, item.raw, failure.reason, item.sequence, item.index, reply=False)
        )
        if isinstance(base, Outcome):
            version, last_command = base.base_version, base.base_command
        elif isinstance(base, KeyState):
            version, last_command = base.version, base.last_command
        else:
            version, last_command = 0, ""
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
                op=type(command).__name__.lower(),
                agent=command.agent,
                applied_at=item.timestamp,
                reason=failure.reason,
            ),
        )

    async def _dead_letter(self, shard: int, dead: list[_Dead]) -> None:
        """Dead-letter ``dead`` and wait until the stream has stored them."""
        acks = await self._send_dead_letters(shard, dead)
        # stored before the originals are acked: nothing is lost (bounded, like the audit)
        await asyncio.wait_for(asyncio.gather(*acks), self.settings.ack_wait_s)

    async def _send_dead_letters(
        self, shard: int, dead: list[_Dead]
    ) -> list[asyncio.Future[object]]:
        """Publish ``dead`` (each with its audit record); returns the acknowledgements to
        wait for before the originals are acknowledged."""
        now = time.time()
        acks = []
        for letter in dead:
            msg, seq = letter.msg, letter.sequence
            where = f"seq {seq}"
            if letter.index is not None:
                where += f" (batch index {letter.index})"
            self._log.warning(
                ("dead", shard, letter.reason.split(":", 1)[0]),
                "dead-lettered command at %s on %s: %s",
                where,
                msg.subject,
                letter.reason[:300],
            )
            tenant = _tenant_label(msg.subject)
            once = naming.dead_letter_dedupe_id(tenant, seq, letter.index)
            raw, reason = letter.raw, letter.reason
            if len(raw) > self._payload_limit:  # kept whole it could not be stored at all
                reason += f" (raw bytes cut to the first {self._payload_limit} of {len(raw)})"
                raw = raw[: self._payload_limit]
            acks.append(
                await self.js.publish_async(
                    naming.dead_letter_subject(tenant, shard),
                    encode(
                        DeadLetter(
                            reason=reason[:2000],
                            subject=msg.subject,
                            raw=raw,
                            received_at=now,
                            stream_seq=seq,
                            batch_index=letter.index,
                        )
                    ),
                    headers={
                        naming.DEAD_REASON_HEADER: _header_text(letter.reason),
                        naming.MSG_ID_HEADER: once,
                    },  # once, even when retried
                )
            )
            headers = msg.headers
            if (
                letter.reply
                and headers
                and (reply_to := headers.get(naming.REPLY_HEADER))
                and reply_allowed(msg.subject, reply_to)
            ):
                try:
                    await self.nc.publish(
                        reply_to, encode(_rejection(msg, reply_to, letter.reason))
                    )
                except Exception as exc:
                    if classify(exc) is Fault.OUTAGE:
                        raise
        by_tenant: dict[str, list[AuditEntry]] = {}
        for letter in dead:
            tenant = _tenant_label(letter.msg.subject)
            by_tenant.setdefault(tenant, []).append(
                dead_letter_entry(
                    tenant, letter.msg.subject, letter.reason, letter.sequence, self.redactor
                )
            )
        last = dead[-1]
        for tenant, entries in by_tenant.items():
            parts = _fit(
                entries, lambda part: _encode(AuditBatch(entries=tuple(part))), self._payload_limit
            )
            for n, data in enumerate(parts):
                # Parts after the first: past the index range a batch message can have.
                part = (last.index or 0) + 1 + n * (self.limits.batch_commands + 1)
                acks.append(
                    await self.js.publish_async(
                        naming.audit_write_subject(tenant, shard),
                        data,
                        headers={
                            naming.MSG_ID_HEADER: naming.audit_dedupe_id(
                                tenant, shard, last.sequence, part, kind="dead"
                            )
                        },
                    )
                )
        self.stats.dead_lettered += len(dead)
        counts = Counter(_tenant_label(letter.msg.subject) for letter in dead)
        for tenant, count in counts.items():
            label = self.telemetry.tenant(tenant)
            self.telemetry.commands.add(
                count, {"zeromem.tenant": label, "zeromem.op": "", "zeromem.outcome": "dead_letter"}
            )
        return acks


_NO_STATE = KeyState()  # a placeholder while the batch's keys are collected


def _coalesce_feedback(
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


_encode = msgspec.msgpack.Encoder().encode  # schemas.encode's bytes, one call less


def _chunks(encoded: list[bytes], limit: int, most: int) -> list[list[bytes]]:
    """``encoded`` cut, in order, into runs of at most ``most`` items and ``limit`` bytes
    (an item over ``limit`` on its own makes a run of one)."""
    chunks: list[list[bytes]] = []
    size = 0
    for data in encoded:
        if not chunks or len(chunks[-1]) == most or size + len(data) > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(data)
        size += len(data)
    return chunks


def _fit(items: list[Any], encode_part: Callable[[list[Any]], bytes], limit: int) -> list[bytes]:
    """``items`` encoded as one message, or halved until each part fits in ``limit`` bytes
    (one item too large on its own goes as it is: the broker then refuses it loudly)."""
    data = encode_part(items)
    if len(data) <= limit or len(items) < 2:
        return [data]
    half = len(items) // 2
    return _fit(items[:half], encode_part, limit) + _fit(items[half:], encode_part, limit)


def stream_position(reply: str) -> tuple[int, float]:
    """(stream sequence, stream timestamp in seconds) from a JetStream message's reply
    subject; cheaper than ``Msg.metadata``, which builds a datetime per message."""
    tokens = reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(tokens[5]), int(tokens[7]) / 1e9
    return int(tokens[Msg.Ack.StreamSeq]), int(tokens[Msg.Ack.Timestamp]) / 1e9


def _declared_commands(msg: Msg) -> int:
    """Commands a message says it carries, for the window's accounting (admission checks
    the truth)."""
    headers = msg.headers
    if not headers or naming.BATCH_HEADER not in headers:
        return 1
    count = batch_length(msg.data)
    return max(1, count or 1)


_TENANT_OK = re.compile(TENANT_FULL_PATTERN).match


def _tenant_label(subject: str) -> str:
    """The tenant a command subject names, if it is one a tenant can have (anything may be
    published on a command subject when the server does not check credentials): it names
    dead-letter and audit subjects and metric attributes."""
    tenant = _tenant_of(subject)
    return tenant if _TENANT_OK(tenant) else "_invalid"


def _header_text(text: str) -> str:
    # A header value is one line of printable ASCII: a reason quotes what the agent sent.
    return "".join(c if " " <= c <= "~" else "?" for c in text[:200])


def _rejection(msg: Msg, reply_to: str, reason: str) -> Result:
    command_id = reply_to.rsplit(".", 1)[-1]  # the SDK waits on {inbox}.{command id}
    return Rejected(
        command_id=command_id,
        tenant=_tenant_label(msg.subject),
        key="",
        op="",
        reason=reason,
        applied_at=time.time(),
    )


@functools.lru_cache(maxsize=65536)
def _subject_identity(subject: str) -> tuple[str, int, str]:
    """(tenant, shard, agent) of a command subject: the identity the server vouched for.
    Cached: a shard sees the same few subjects again and again."""
    return naming.parse_command_subject(subject)


def _tenant_of(subject: str) -> str:
    try:
        return _subject_identity(subject)[0]
    except ValueError:
        return naming.tenant_of_command_subject(subject)


@functools.lru_cache(maxsize=65536)
def _reply_prefix(subject: str) -> str:
    tenant, _, agent = _subject_identity(subject)
    return naming.agent_inbox_prefix(tenant, agent) + "."


def reply_allowed(subject: str, reply_to: str) -> bool:
    """Whether a command that came on ``subject`` may have its result sent to
    ``reply_to``: only inside the inbox of the agent the subject names (which only that
    agent can subscribe to). Anything else (another tenant's inbox, an audit or command
    subject) is ignored, so a header cannot make the worker publish where it chooses."""
    try:
        return (
            reply_to.startswith(_reply_prefix(subject))
            and "*" not in reply_to
            and ">" not in reply_to
        )
    except ValueError:
        return False


async def run_worker(settings: Settings, index: int, count: int) -> None:
    """Entry point of ``zeromem worker``: run until cancelled (SIGTERM), then stop within
    ``Limits.stop_grace_s`` plus a moment, whatever the shards or the servers are doing."""
    shards = naming.shards_of_worker(index, count, settings.shards)
    nc = await connect_nats(settings, name=f"zeromem-worker-{index}")
    redis = connect_redis(settings)
    telemetry = configure_telemetry(
        TelemetryConfig("worker", settings.metrics_port, settings.metrics_host)
    )
    worker = await WorkerService(settings, shards, nc=nc, redis=redis, telemetry=telemetry).start()
    settle_after_start()
    log.info("worker %d/%d owns shards %s", index, count, shards)
    try:
        await asyncio.Event().wait()
    finally:
        grace = settings.limits.stop_grace_s
        # The last resort: a stop that still hangs (a server that never answers a close)
        # ends the process anyway; the shards' leases expire and their batches come again.
        _exit_after(grace + 3.0)
        await worker.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.drain(), 2.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 1.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(redis.aclose(), 1.0)


def _exit_after(seconds: float) -> None:
    def hard_exit() -> None:
        log.error("stop took longer than %.1fs; exiting now", seconds)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()
