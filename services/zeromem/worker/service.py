"""``zeromem worker``: hold a set of shards and apply their commands in order.

Which shards: fixed ones (``--index/--count``), or this worker's share of the live
workers' (``membership``), which changes as workers come and go; ``_hold`` starts the
shards it gains and lets go of those it loses.

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

This module is the consume loop and a batch's course; the rest is in its own module:
``lease`` (taking and keeping a shard), ``membership`` (which shards to hold),
``messages`` (admission of a message's commands), ``applier`` (deciding and committing,
store and engine only), ``outbox`` (results, change feed, audit, dead letters) and
``jobs`` (reaper, archive schedule, lag).

Over 500 lines on purpose: what is left is one class whose steps (fetch, fair rounds,
admission, containment, giving up, recording a batch) share each shard's window and
consumer state; every part that owns state of its own is already a module listed above.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from typing import cast

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import propagate
from opentelemetry.trace import SpanKind
from redis.asyncio import Redis
from redis.exceptions import RedisError

from zeromem import naming
from zeromem.bus import connect_nats, connect_redis, open_shard_consumer, provision
from zeromem.health import Health
from zeromem.heap import settle_after_start
from zeromem.lifecycle.archive import schedule_archive
from zeromem.lifecycle.redact import Redactor, install_log_redaction
from zeromem.lifecycle.vault import check_master_key, vault_of
from zeromem.limits import refusal
from zeromem.logs import BoundedLog
from zeromem.quota import RateQuota
from zeromem.schemas import Result, status_of
from zeromem.settings import Settings
from zeromem.stall import StallWatch
from zeromem.store.keys import layout, redis_keys
from zeromem.telemetry import Telemetry, configure_telemetry
from zeromem.worker.applier import Applier, RedisBehindError
from zeromem.worker.coalesce import Coalesced
from zeromem.worker.engine import Engine
from zeromem.worker.fairness import (
    PRESENCE_SYNC_S,
    Call,
    Held,
    Presence,
    ShardWindow,
    TenantCalls,
    share_presence,
)
from zeromem.worker.faults import Fault, classify, describe
from zeromem.worker.intake import ENVELOPE_ALLOWANCE
from zeromem.worker.jobs import report_lag, run_archiver, run_reaper
from zeromem.worker.lease import LeaseLostError, ShardLeases
from zeromem.worker.membership import Membership, follow_membership
from zeromem.worker.messages import (
    Admitted,
    Dead,
    DeliveryGapError,
    admit_messages,
    declared_commands,
    delivery_sequence,
    stream_position,
)
from zeromem.worker.outbox import Outbox, Publication
from zeromem.worker.pull import PullFeed
from zeromem.worker.rounds import Rounds
from zeromem.worker.store import Store
from zeromem.worker.throttle import ThrottleNotices

log = logging.getLogger(__name__)

# An idle shard's first fetch waits this long (then longer, up to ``idle_pull_s``).
FIRST_IDLE_PULL_S = 0.5
# A shard acknowledges what it applied (and whose publications are stored) at most this
# often, in one cumulative acknowledgement: one per round cost the broker a message and
# a consumer update per round. Nothing waits on it: a restart or takeover opens the next
# consumer where Redis says the shard stands (``bus.open_shard_consumer``), and what was
# applied but not acknowledged comes again and is recognised (``Applier``); a handover or
# a stop acknowledges all it can first.
ACK_EVERY_S = 0.2
# A window holding more than this share of its bytes limit in messages done but not
# acknowledged acknowledges them at once (they take the room of the next fetch).
ACK_EARLY_SHARE = 0.5
# With publications still to confirm past the acknowledgement's time, or messages held
# but not done, the shard looks at them this often (a new command wakes its fetch at once).
SETTLE_POLL_S = 0.02
# A shard whose tenants' calls are all in flight on other shards waits at most this long
# for one to end (it is woken when one does).
BLOCKED_WAIT_S = 0.05
# Dead letters of messages refused over quota sent per turn of the shard's loop.
REFUSALS_PER_TURN = 16


class WorkerService:
    """One worker process's shards: their leases (``lease``), each shard's consume loop
    (here), the applier (``applier``), what it publishes (``outbox``) and its background
    jobs (``jobs``)."""

    def __init__(
        self,
        settings: Settings,
        shards: Sequence[int] | None,
        *,
        nc: NatsClient,
        redis: Redis,
        engine: Engine | None = None,
        telemetry: Telemetry | None = None,
        membership: Membership | None = None,
    ) -> None:
        """``shards``: the shards this worker holds for good (static mode); None: dynamic
        membership (``membership``), the shards its share among the live workers."""
        self.settings = settings
        self.lifecycle = settings.lifecycle
        self.redactor = Redactor(self.lifecycle.sensitive_pattern)
        self.telemetry = telemetry or Telemetry()
        self.telemetry.bound(settings.limits.metric_tenants, settings.limits.metric_agents)
        # The shards this worker should hold now: fixed in static mode, its share of the
        # live workers' in dynamic mode (``_hold`` follows it).
        self.shards: set[int] = set(shards or ())
        self.membership = (
            None
            if shards is not None
            else membership or Membership(redis, settings.worker.lease_ttl_s)
        )
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.redis = redis
        vault = vault_of(settings, redis)
        if engine is None:
            from zeromem.worker.analysis import default_engine

            engine = default_engine(
                settings.worker.max_clock_skew_s,
                self.redactor,
                None if vault is None else vault.policy,
            )
        self.engine = engine
        self.limits = settings.limits
        self.leases = ShardLeases(redis, settings.worker.lease_ttl_s)
        # One round trip for the script calls the shards make at the same moment
        # (``coalesce``); a cluster client splits pipelines by slot anyway.
        self._coalesced = None if layout().cluster else Coalesced(redis)
        store = Store(
            redis if self._coalesced is None else cast(Redis, self._coalesced),
            result_ttl_s=settings.store.result_ttl_s,
            tombstone_ttl_s=settings.store.tombstone_ttl_s,
            result_records=self.limits.idempotency_records,
            result_bytes=self.limits.idempotency_bytes,
            vault=vault,
        )
        self.applier = Applier(
            store,
            engine,
            token=self.leases.token,
            limits=self.limits,
            batch_size=settings.worker.batch_size,
            telemetry=self.telemetry,
        )
        self.stats = self.applier.stats
        self.outbox = Outbox(
            nc,
            limits=self.limits,
            ack_wait_s=settings.bus.ack_wait_s,
            redactor=self.redactor,
            telemetry=self.telemetry,
            stats=self.stats,
            encryption=None if vault is None else vault.policy,
        )
        self.applier.report = self.outbox.prepare
        # Everything a worker publishes fits in one message by construction: a result or
        # an audit entry carries at most one value (or patch) and its envelope.
        if self.limits.value_bytes + ENVELOPE_ALLOWANCE > self.outbox.payload_limit:
            raise ValueError(
                f"limit value_bytes ({self.limits.value_bytes}) leaves no room in the broker's "
                f"payload limit ({self.outbox.payload_limit} bytes for a worker's messages)"
            )
        self._tasks: list[asyncio.Task[None]] = []
        self._follower: asyncio.Task[None] | None = None  # dynamic: follows the membership
        self._stopping = asyncio.Event()
        self._tenures = 0  # leases taken so far: names each tenure's consumer
        self._consumers: dict[int, str] = {}  # per owned shard, the consumer it reads
        self._shard_tasks: dict[int, asyncio.Task[None]] = {}  # per shard held or wanted
        # Shards being handed over: their loop finishes the round in hand and lets go.
        self._letting_go: set[int] = set()
        self._feeds: dict[int, PullFeed] = {}  # per shard consumed, to wake an idle fetch
        self._log = BoundedLog(log, self.limits.log_interval_s)
        # Commands per second of each tenant on each shard (0: no quota).
        self._command_quota = RateQuota(self.limits.tenant_commands_per_s)
        # ... and the agents refused over it told how long to wait (worker.throttle).
        self.throttle = ThrottleNotices(self.nc, self._command_quota, self.limits.log_interval_s)
        # The tenants writing to any of this worker's shards lately: its shards share one
        # event loop, so while two tenants are active every shard's calls stay small.
        self._presence = Presence()
        # ... and while they do, one commit call in flight per tenant (``TenantCalls``);
        # the shards waiting for a busy tenant's call to end are woken when one does.
        self._calls = TenantCalls(self._presence, self._wake_blocked)
        self._blocked: set[int] = set()
        # Its shards' calls start together, in rounds (``rounds``).
        self._rounds = Rounds()
        self._notes: set[asyncio.Task[object]] = set()  # applied positions being written

    @property
    def owned(self) -> set[int]:
        """The shards whose lease this worker holds right now."""
        return self.leases.owned

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> WorkerService:
        install_log_redaction(self.redactor)
        # the deployment's master key, or none where it has none (before any write)
        await check_master_key(self.redis, self.applier.store.vault)
        await provision(self.js, self.settings)
        try:
            self.engine.warm_up()
        except Exception:  # only an optimisation: the first command would load it anyway
            log.exception("engine warm-up failed")
        stopping = self._stopping
        if self.membership is None:
            self._hold(self.shards)
        else:
            worker = self.settings.worker
            # At least three renewals per registration's life: one late beat (a slow
            # event loop, a Redis hiccup) must not count a live worker out.
            interval = min(worker.membership_interval_s, worker.lease_ttl_s / 3)
            follow = follow_membership(
                self.membership, self.settings.shards, self._hold, interval, stopping
            )
            self._follower = asyncio.create_task(follow, name="membership")
        self._tasks.append(
            asyncio.create_task(
                run_reaper(
                    self.applier,
                    self.redis,
                    self.owned,
                    self.settings,
                    self.outbox.announce,
                    stopping,
                ),
                name="reaper",
            )
        )
        if self.lifecycle.archive_after_days > 0:

            async def schedule(cutoff: float, shards: set[int]) -> int:
                return await schedule_archive(
                    self.nc, self.redis, self.settings, cutoff, shards=shards
                )

            archiver = run_archiver(
                schedule,
                self.owned,
                self.lifecycle.archive_after_days,
                self.lifecycle.archive_interval_s,
                stopping,
            )
            self._tasks.append(asyncio.create_task(archiver, name="archiver"))
        lag = report_lag(self.js, self._consumers, self.telemetry.set_lag, stopping)
        self._tasks.append(asyncio.create_task(lag, name="lag"))
        # Which tenants the other workers serve: calls stay small while tenants share the
        # deployment, not only this worker (worker.fairness.Presence).
        presence = share_presence(self._presence, self.redis, stopping, PRESENCE_SYNC_S)
        self._tasks.append(asyncio.create_task(presence, name="presence"))
        return self

    async def stop(self) -> None:
        """Cancel every shard and wait for them, at most ``Limits.stop_grace_s``: a shard
        stuck on a server that does not answer is left behind (its batch is redelivered
        to the next owner)."""
        self._stopping.set()
        if self._follower is not None:
            # Its renewal must not come after the leave below and register this worker
            # again; then leave first, so the others take its shards as their leases free.
            follower, self._follower = self._follower, None
            follower.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(follower, 1.0)
        if self.membership is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.membership.leave(), 1.0)
        tasks = self._tasks + list(self._shard_tasks.values()) + list(self._notes)
        self._tasks = []
        for task in tasks:
            task.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=self.limits.stop_grace_s)
            if stuck:
                log.warning(
                    "stopping: %d task(s) did not finish within %.1fs; leaving them",
                    len(stuck),
                    self.limits.stop_grace_s,
                )
        if self._coalesced is not None:
            # the applied positions still queued (``Coalesced.later``), bounded
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._coalesced.drain(), 1.0)

    async def wait_owned(self, timeout: float = 10.0) -> None:
        """Until every shard this worker should hold is held, and (dynamic mode) it holds
        no other (tests and ``up`` wait on this)."""
        deadline = time.monotonic() + timeout
        while not self.settled:
            if time.monotonic() > deadline:
                raise TimeoutError(f"shards not acquired: {self.shards - self.owned}")
            await asyncio.sleep(0.02)

    @property
    def settled(self) -> bool:
        """Holding exactly the shards it should (ready, in the health check's terms); in
        dynamic mode only once it has seen the live workers."""
        if self.membership is not None and not self.membership.seen:
            return False
        return self.owned == self.shards

    def _hold(self, wanted: set[int]) -> None:
        """Hold exactly ``wanted`` from now on: a loop for each shard wanted and not yet
        run; each shard no longer wanted is let go. One whose lease this worker holds
        finishes the round in hand, acknowledges it and releases the lease (its next owner
        waits on the lease, then opens its own consumer where Redis says the shard
        stands); one it is still waiting for is dropped at once."""
        self.shards = set(wanted)
        for shard in sorted(wanted):
            if shard not in self._shard_tasks:
                task = asyncio.create_task(self._run_shard(shard), name=f"shard-{shard}")
                self._shard_tasks[shard] = task
                task.add_done_callback(functools.partial(self._shard_ended, shard))
        for shard, task in list(self._shard_tasks.items()):
            if shard in wanted or shard in self._letting_go:
                continue
            if shard in self.owned:
                self._letting_go.add(shard)
                feed = self._feeds.get(shard)
                if feed is not None:
                    feed.interrupt()
            else:
                task.cancel()

    def _shard_ended(self, shard: int, _task: asyncio.Task[None]) -> None:
        self._shard_tasks.pop(shard, None)
        self._letting_go.discard(shard)

    # --- one shard -----------------------------------------------------------------------

    async def _run_shard(self, shard: int) -> None:
        while not self._stopping.is_set() and shard not in self._letting_go:
            try:
                await self.leases.acquire(shard)
                await self._consume(shard)
            except asyncio.CancelledError:
                raise
            except LeaseLostError as lost:
                log.warning("lost the lease of shard %d (%s); standing by", shard, lost.how)
            except RedisBehindError:
                log.warning("shard %d: Redis lost applies it had confirmed; catching up", shard)
                self.applier.forget_applied(shard)
            except DeliveryGapError as gap:
                self.stats.delivery_gaps += 1
                log.warning("shard %d: %s; opening the consumer again where it stands", shard, gap)
            except Exception:
                log.exception("shard %d loop failed; restarting it", shard)
                await asyncio.sleep(0.5)
            finally:
                self.owned.discard(shard)

    async def _consume(self, shard: int) -> None:
        # Where Redis says the shard stands, read under the lease: no former owner can
        # commit any more (fenced), so nothing moves it but this worker from here on.
        after = await self.applier.load_floor(shard)
        self._tenures += 1
        tenure = f"{self.leases.token[:12]}{self._tenures}"
        consumer = await open_shard_consumer(self.js, self.settings, shard, tenure, after)
        self._consumers[shard] = consumer
        feed = await PullFeed(
            self.nc, naming.COMMAND_STREAM, consumer, self.settings.worker.idle_pull_s
        ).start()
        self._feeds[shard] = feed
        keeper = asyncio.create_task(self.leases.keep(shard))
        keeper.add_done_callback(lambda _: feed.interrupt())  # a lost lease: stop waiting
        window = ShardWindow(self._presence)
        limits = self.limits
        batch_size = self.settings.worker.batch_size
        # Commands and bytes per message seen so far here (batch messages carry many): how
        # many messages to ask for. Start small: a full fetch of batch messages could bring
        # a hundred times ``batch_size`` commands.
        seen_msgs, seen_commands, seen_bytes = 1, 16, 4096
        # Held messages are reported in progress before the server's ack wait runs out, so
        # it does not deliver them again while they wait for their tenant's turn.
        ack_wait = self.settings.bus.ack_wait_s
        renewed_at = time.monotonic()
        # Messages refused over their tenant's quota, their dead letters not sent yet: a
        # few per turn (``REFUSALS_PER_TURN``), between calls, so that a flood of them does
        # not hold another tenant's call.
        refusing: deque[tuple[Held, Dead]] = deque()
        next_delivery = 1  # the consumer is new: its deliveries count from 1
        # How long an empty window waits for the next command: doubled while the shard
        # stays idle, up to ``idle_pull_s``. The feed's request delivers a command the moment
        # it comes, so waiting longer costs no latency; it spares an idle shard's wake-ups.
        idle_wait = FIRST_IDLE_PULL_S
        # When the window's done prefix is next acknowledged (None: it has none).
        ack_due: float | None = None
        admit = functools.partial(self._admit_held, shard)
        try:
            while not self._stopping.is_set() and shard not in self._letting_go:
                if keeper.done():
                    keeper.result()  # raises LeaseLostError
                # A worker that stalled (SIGSTOP, a frozen host) asks before taking more
                # commands; if it was replaced, its consumer is gone anyway.
                await self.leases.confirm(shard)
                if refusing or (window.runnable and shard not in self._blocked):
                    wait = 0.0  # with work in hand, only what has come
                elif shard in self._blocked:
                    wait = BLOCKED_WAIT_S  # woken when a call ends elsewhere
                elif window.unsettled():  # done, to be acknowledged (a command wakes it)
                    due = ack_due if ack_due is not None else time.monotonic()
                    wait = max(0.0, due - time.monotonic())
                elif len(window):
                    wait = SETTLE_POLL_S
                else:
                    wait = idle_wait
                room = limits.shard_window - window.commands
                room_bytes = limits.shard_window_bytes - window.bytes
                if room <= 0 or room_bytes <= 0:
                    # A full window takes nothing more; it waits as a fetch would (nothing
                    # else on this path suspends). Without it, a window full of refused
                    # messages awaiting their dead letters' acknowledgements spun the loop
                    # without ever yielding, so the acknowledgements could not be read and
                    # the leases not renewed: issue 12's hostile backlog, drained slowly,
                    # its leases lost again and again.
                    await asyncio.sleep(wait)
                else:
                    wanted = max(
                        1,
                        min(
                            batch_size,
                            room * seen_msgs // seen_commands,
                            room_bytes * seen_msgs // seen_bytes,
                        ),
                    )
                    try:
                        msgs = await feed.fetch(wanted, timeout=wait)
                        idle_wait = FIRST_IDLE_PULL_S
                    except TimeoutError:
                        msgs = []
                        if not len(window):
                            idle_wait = min(idle_wait * 2, self.settings.worker.idle_pull_s)
                    # Every delivery must arrive, in order: checked before any is used.
                    for msg in msgs:
                        delivered = delivery_sequence(msg.reply)
                        if delivered != next_delivery:
                            raise DeliveryGapError(
                                f"consumer {consumer}: delivery {next_delivery} never "
                                f"arrived (the next one was {delivered})"
                            )
                        next_delivery += 1
                    for msg in msgs:
                        seq, _ = stream_position(msg.reply)
                        count = declared_commands(msg)
                        tenant = naming.tenant_of_command_subject(msg.subject)
                        # Over its rate, a tenant's message is refused before it takes a
                        # place in a tenant's queue or a turn: its backlog holds nobody up.
                        refused = not self._command_quota.take((shard, tenant), count)
                        if not window.add(msg, seq, tenant, count, done=refused):
                            if seq <= window.acknowledged:  # done; its ack was lost: again
                                await msg.ack()
                            continue
                        if refused:
                            held = window.held[-1]
                            held.sending = True
                            reason = refusal(
                                "tenant_commands_per_s",
                                f"tenant {tenant!r} is over "
                                f"{limits.tenant_commands_per_s:g} commands/s on "
                                f"shard {shard}; {count} command(s) refused",
                            )
                            dead = Dead(
                                msg, msg.data, reason, seq, raw_kept=limits.quota_refusal_raw_bytes
                            )
                            refusing.append((held, dead))
                            await self.throttle.refused(shard, msg.subject, count)
                        seen_msgs += 1
                        seen_commands += count
                        seen_bytes += len(msg.data)
                if refusing:
                    turn = [
                        refusing.popleft() for _ in range(min(len(refusing), REFUSALS_PER_TURN))
                    ]
                    sent = await self.outbox.send_dead_letters(shard, [dead for _, dead in turn])
                    for held, _ in turn:
                        held.pending = sent
                        held.sending = False
                if time.monotonic() - renewed_at > ack_wait / 4:
                    renewed_at = time.monotonic()
                    for held in window.waiting_since(renewed_at - ack_wait / 2):
                        await held.msg.in_progress()
                call = window.next_call(
                    admit,
                    most=batch_size,
                    share=limits.tenant_round_share,
                    quantum=limits.tenant_turn_cost,
                    busy=self._calls.busy,
                )
                if call is not None:
                    self._blocked.discard(shard)
                    self._calls.take(call.tenant)
                    try:
                        await self._call_contained(shard, window, call)
                    finally:
                        self._calls.release(call.tenant)
                elif window.runnable:
                    self._blocked.add(shard)  # its tenants' calls are in flight elsewhere
                else:
                    self._blocked.discard(shard)
                ack_due = await self._acknowledge_when_due(window, ack_due)
            if shard in self._letting_go:
                # Handing the shard over: what it applied is acknowledged once stored.
                while refusing:
                    held, dead = refusing.popleft()
                    held.pending = await self.outbox.send_dead_letters(shard, [dead])
                    held.sending = False
                await self._settle(window, ack_wait)
        finally:
            # A stop or a failure: what is done and stored is not delivered again (bounded).
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._settle(window, ack_wait), 1.0)
            self._consumers.pop(shard, None)
            self._feeds.pop(shard, None)
            self._blocked.discard(shard)
            keeper.cancel()
            with contextlib.suppress(BaseException):
                await keeper
            # Bounded: a stop must not wait on a server that does not answer.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(feed.stop(), 1.0)
            await self.leases.release(shard)

    def _wake_blocked(self) -> None:
        """A tenant's call ended: the shards waiting for it fetch no longer."""
        for shard in self._blocked:
            feed = self._feeds.get(shard)
            if feed is not None:
                feed.nudge()
        self._blocked.clear()  # their next fetch does not wait either

    async def _acknowledge_when_due(self, window: ShardWindow, due: float | None) -> float | None:
        """Acknowledge the window's done prefix if it is ``due`` (or takes much of the
        window's room); returns when it is due next (None: nothing to acknowledge)."""
        if not window.unsettled():
            return None
        now = time.monotonic()
        if due is None:
            return now + ACK_EVERY_S
        if now < due and window.bytes <= ACK_EARLY_SHARE * self.limits.shard_window_bytes:
            return due
        # Its publications not all confirmed yet (rarely, this long after): soon.
        acked = await self._acknowledge(window)
        return now + (ACK_EVERY_S if acked else SETTLE_POLL_S)

    async def _settle(self, window: ShardWindow, timeout: float) -> None:
        """Acknowledge the window's done prefix once its publications are confirmed, for
        at most ``timeout``."""
        deadline = time.monotonic() + timeout
        while window.unsettled() and time.monotonic() < deadline:
            await self._acknowledge(window)
            if window.unsettled():
                await asyncio.sleep(SETTLE_POLL_S)

    async def _acknowledge(self, window: ShardWindow) -> bool:
        """Acknowledge the window's prefix of messages done and stored (their audit records
        and dead letters confirmed): one cumulative acknowledgement (AckPolicy.ALL).
        Whether it acknowledged any. Only the shard's own loop calls it."""
        last: Held | None = None
        while (head := window.head()) is not None:
            if head.pending and not await self.outbox.confirm(head.pending):
                break
            last = window.pop()
        if last is not None:
            await last.msg.ack()
        return last is not None

    def _admit_held(self, shard: int, held: Held) -> tuple[list[Admitted], list[Dead]]:
        return self.admit(shard, [held.msg])

    async def _call_contained(self, shard: int, window: ShardWindow, call: Call) -> None:
        """Run ``call`` until it is done, containing what goes wrong (see the module's
        docstring), and mark what it applied in ``window``."""
        outage_delay = 0.05
        attempts = 0
        while True:
            if self._stopping.is_set():
                raise asyncio.CancelledError
            try:
                async with self._rounds.turn():  # with the other shards' calls
                    sent = await self.run_call(shard, call)
            except (LeaseLostError, RedisBehindError, asyncio.CancelledError):
                raise
            except Exception as exc:
                fault = classify(exc)
                if fault is Fault.OUTAGE:
                    if isinstance(exc, RedisError):
                        await self.applier.check_not_behind(shard)
                    # Retry this same call, for as long as the outage lasts: moving on
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
                if len(call.touched) > 1:
                    # Whichever message caused it, each alone: the others go on.
                    self._log.warning(
                        ("split", shard, type(exc)),
                        "shard %d: a batch of %d messages failed (%s); processing them one by one",
                        shard,
                        len(call.touched),
                        describe(exc),
                        exc_info=exc,
                    )
                    for group in call.groups():
                        await self._call_contained(shard, window, group)
                    return
                attempts += 1
                if attempts >= self.limits.message_attempts:
                    held = call.touched[0]
                    await self._give_up(shard, held, exc, attempts)
                    window.give_up(held)
                    return
                self._log.warning(
                    ("retry", shard, type(exc)),
                    "shard %d: a message failed (%s); attempt %d of %d",
                    shard,
                    describe(exc),
                    attempts,
                    self.limits.message_attempts,
                )
                await asyncio.sleep(self.limits.attempt_backoff_s * 2 ** (attempts - 1))
                continue
            for held in call.touched:
                # One list for all the call's messages, not a copy each: confirmed (and
                # emptied) at the first of them, it is confirmed for the rest. A copy each
                # made acknowledging a window of a thousand refused messages a million
                # checks; at 8 copies of the hostile test on 2 cores the loop spent 62% of
                # its time there, and the leases expired behind it.
                held.pending = held.pending + sent if held.pending else sent
            window.applied(call)
            if call.completed:
                self._note_applied(call.tenant, shard, call.completed[-1].sequence)
            return

    def _note_applied(self, tenant: str, shard: int, sequence: int) -> None:
        """Record that ``tenant``'s messages on ``shard`` are applied through ``sequence``
        (read your writes, ``RedisKeys.applied``): its calls take its messages in stream
        order, so every earlier one is done. Not waited for: with the next round's script
        calls on one Redis (within ``coalesce.LATER_S``), alone on a cluster; a lost one
        only makes a read wait for the shard's own position.

        Nothing is written when the shard's own position, recorded by the commit that
        applied the message, already covers it (no other tenant's message before it waits
        for its turn): a read takes whichever of the two is further. A lone append's
        round then makes one Redis round trip, not two: the write rode on the next
        round's call only when one came within ``coalesce.LATER_S``, and at a hundred or
        so appends a second per worker most went alone."""
        if sequence <= self.applier.shard_applied(shard):
            return
        key = redis_keys(tenant).applied(shard)
        if self._coalesced is not None:
            self._coalesced.later("SET", key, sequence)
            return
        task = asyncio.ensure_future(self.redis.set(key, sequence))
        self._notes.add(task)
        task.add_done_callback(self._noted)

    def _noted(self, task: asyncio.Task[object]) -> None:
        self._notes.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._log.warning(("applied", type(exc)), "applied position: %s", describe(exc))

    async def _give_up(self, shard: int, held: Held, exc: BaseException, attempts: int) -> None:
        """Dead-letter a message that kept failing, whole (raw bytes kept), with the error."""
        msg, seq = held.msg, held.sequence
        reason = f"internal: failed {attempts} times, dead-lettered whole: {describe(exc)}"
        self._log.error(
            ("give-up", shard, type(exc)),
            "shard %d: message at seq %d %s",
            shard,
            seq,
            reason,
            exc_info=exc,
        )
        sent = await self.outbox.send_dead_letters(shard, [Dead(msg, msg.data, reason, seq)])
        held.pending = held.pending + sent  # a new list: the one it has may be shared

    # --- one call ------------------------------------------------------------------------

    async def run_call(self, shard: int, call: Call) -> list[Publication]:
        """Apply ``call``'s commands, publish their results (to waiting callers and the
        change feed) and send their audit records and dead letters; returns what was sent
        to a stream, to be confirmed before the messages are acknowledged (the next call
        does not wait for it)."""
        sent: list[Publication] = []
        if call.dead:
            sent += await self.outbox.send_dead_letters(shard, call.dead)
        started_ns = time.time_ns()
        admitted = call.commands
        if not admitted:  # every command of its message refused on admission
            return sent
        results, failed, tally = await self.applier.apply(shard, admitted)
        sent += await self.outbox.publish_audit(shard, admitted, results)
        await self.outbox.publish_results(shard, admitted, results)
        if failed:
            sent += await self.outbox.send_dead_letters(shard, failed)
        self._record_batch(len(admitted) + len(call.dead), admitted, results, started_ns, tally)
        return sent

    def admit(
        self, shard: int, msgs: Sequence[Msg], positions: dict[int, int] | None = None
    ) -> tuple[list[Admitted], list[Dead]]:
        """Every command of ``msgs`` admitted, or refused with its reason."""
        return admit_messages(
            shard,
            msgs,
            positions,
            shards=self.settings.shards,
            limits=self.limits,
            resolve_key=self.engine.resolve_key,
        )

    # --- telemetry -----------------------------------------------------------------------

    def _record_batch(
        self,
        size: int,
        batch: list[Admitted],
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
                        "zeromem.outcome": status_of(result),
                        "messaging.system": "nats",
                        "messaging.operation.type": "process",
                    },
                )
                span.end()


async def run_worker(settings: Settings, static: tuple[int, int] | None = None) -> None:
    """Entry point of ``zeromem worker``: run until cancelled (SIGTERM), then stop within
    ``Limits.stop_grace_s`` plus a moment, whatever the shards or the servers are doing.

    ``static``: (index, count), the shards ``naming.shards_of_worker`` gives that index
    for good; None (the default): dynamic membership, a fair share of the shards among
    the live workers that follows them as they come and go (``membership``)."""
    shards = None if static is None else naming.shards_of_worker(*static, settings.shards)
    name = "zeromem-worker" if static is None else f"zeromem-worker-{static[0]}"
    nc = await connect_nats(settings, name=name)
    redis = connect_redis(settings)
    health = Health(settings.telemetry.liveness_stall_s)
    telemetry = configure_telemetry("worker", settings.telemetry, health)
    worker = await WorkerService(settings, shards, nc=nc, redis=redis, telemetry=telemetry).start()
    # Watched from here: loading the analysers above holds the loop, before any shard.
    stalls = StallWatch(settings.telemetry.loop_stall_log_s).start()
    # Ready: connected, and consuming every shard it should hold (a lease held elsewhere,
    # say by the pod this one replaces or a worker handing its shard over, keeps it
    # unready until the lease moves).
    health.ready_when("nats_connected", lambda: nc.is_connected)
    health.ready_when("owns_its_shards", lambda: worker.settled)
    health.started()
    settle_after_start()
    if static is None:
        assert worker.membership is not None
        log.info(
            "worker %s: dynamic membership over %d shards", worker.membership.id, settings.shards
        )
    else:
        log.info("worker %d/%d owns shards %s", *static, shards)
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
        await telemetry.shutdown()
        stalls.stop()


def _exit_after(seconds: float) -> None:
    def hard_exit() -> None:
        log.error("stop took longer than %.1fs; exiting now", seconds)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()
