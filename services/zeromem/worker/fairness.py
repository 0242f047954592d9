"""Fair turns between tenants within one shard: per-tenant queues, deficit round-robin.

A shard's commands arrive in one stream, every tenant's interleaved. Applied strictly in
stream order, one tenant's backlog holds every other tenant's commands behind it: 60,000
writes from one tenant once delayed another tenant's single write on the same shards by
4.6 s. Order only matters within an owner, and an owner belongs to one tenant, so the
shard may serve tenants in turns, as long as each tenant's own commands keep their order.

``ShardWindow`` holds the messages a shard has fetched and not yet acknowledged, up to
``Limits.shard_window`` commands read ahead, and a queue per tenant of its messages still
to apply. The shard applies one *call* at a time (``next_call``): commands of one tenant,
taken in stream order, committed in one bounded script call. Tenants take turns by
deficit round-robin on the commands' estimated Redis cost (``commit_cost``): each turn
adds ``quantum`` to the tenant's allowance and its call takes commands while they fit. A
tenant whose message finds none of its own waiting is served first, once (a sparse flow,
as in fq_codel): a light tenant's lone write does not wait for the turn of a heavy one
that happened to be next; it then takes its turns with the others.
While other tenants are present a call is at most ``quantum`` (``Limits.tenant_turn_cost``)
and ``share`` commands (``Limits.tenant_round_share``), so a tenant with a command
waiting is served after at most one such call of each other tenant with work, however
deep their backlogs; a tenant alone takes whole rounds (``most`` commands, committed in
calls of bounded cost by the applier), as fast as the shard goes.

A call may stop in the middle of a batch message (its commands are admitted once, when
the tenant's turn first reaches it, and queued): the message is applied once its last
command is.

What a call publishes (audit, dead letters) is not waited for before the next call; each
message keeps the publications it is acknowledged after (``Held.pending``), and
acknowledgements and the shard's recorded position stay cumulative: the position is a
low-water mark (``next_call`` sets it on a message's last command: the end of the prefix
of messages applied once that message is), and acknowledgements cover only the prefix
whose publications are confirmed (``head``/``pop``), never a message applied ahead of an
older one still waiting. A restart therefore never skips a message that was passed over;
one applied ahead of the prefix comes again and is recognised by its command id, like any
redelivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg
from redis.asyncio import Redis

from zeromem.logs import BoundedLog
from zeromem.store.keys import tenant_presence_key
from zeromem.worker.commit_cost import BASE, commit_cost
from zeromem.worker.messages import Admitted, Dead

# How long a tenant counts as present after its last message: while two tenants share a
# worker, calls stay small even at the instant one of them has nothing waiting, so that
# its next command does not arrive in the middle of a full round of the other's.
PRESENCE_S = 1.0
# How often a worker tells the others (through Redis) which tenants it serves, and reads
# how many the deployment has: a tenant that starts writing makes every worker's calls
# small within this (plus one read of the others').
PRESENCE_SYNC_S = PRESENCE_S / 4

log = logging.getLogger(__name__)


class Presence:
    """The tenants that had messages lately (within ``PRESENCE_S``), over every shard of a
    worker: its shards share one event loop, where a large call of one shard holds up the
    others as much as a call of its own; and over the deployment's other workers, as
    ``share_presence`` last read it from Redis: they share Redis (and here the machine's
    cores), where a worker serving one tenant alone committed calls of ``commit_cost``
    (~20 ms of Redis each) while another tenant's commits and recalls, on other workers
    and in the read services, waited behind them. Measured with the noisy-neighbour
    scenario (tenant B's owners all on worker 0's shards, so worker 1 saw only A): see
    the README's "Limits, quotas and fault containment"."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}  # tenant -> when its last message arrived
        # Tenants present over the deployment, as last read (0: never), and when.
        self._deployment = 0
        self._deployment_at = 0.0

    def seen(self, tenant: str, now: float) -> None:
        self._seen[tenant] = now

    def recent(self, now: float) -> dict[str, float]:
        """The tenants present here, each with when its last message arrived."""
        recent = {t: at for t, at in self._seen.items() if now - at < PRESENCE_S}
        if len(recent) != len(self._seen):
            self._seen = recent
        return recent

    def heard(self, tenants: int, now: float) -> None:
        """The deployment had ``tenants`` present when read at ``now`` (monotonic)."""
        self._deployment, self._deployment_at = tenants, now

    def shared(self) -> bool:
        """More than one tenant present, here or over the deployment (as read less than
        ``PRESENCE_S`` ago: a worker that cannot reach Redis judges by its own)."""
        now = time.monotonic()
        if self._deployment > 1 and now - self._deployment_at < PRESENCE_S:
            return True
        if len(self._seen) < 2:
            return False
        return len(self.recent(now)) > 1


async def share_presence(
    presence: Presence, redis: Redis, stopping: asyncio.Event, interval_s: float
) -> None:
    """Every ``interval_s``: add the tenants ``presence`` saw lately to the deployment's
    record (``tenant_presence_key``, scored by when each was last seen, by this host's
    clock: a skew between hosts only sizes calls, never decides what is applied), and read
    how many tenants it holds from the last ``PRESENCE_S``. One pipeline per interval.
    Failures are logged at a bounded rate and tried again next interval."""
    key = tenant_presence_key()
    bounded = BoundedLog(log, 10.0)
    while not stopping.is_set():
        try:
            mono, wall = time.monotonic(), time.time()
            seen = {t: wall - (mono - at) for t, at in presence.recent(mono).items()}
            pipe = redis.pipeline(transaction=False)
            if seen:
                pipe.zadd(key, seen, gt=True)
            pipe.zremrangebyscore(key, "-inf", wall - 10 * PRESENCE_S)
            pipe.zcount(key, wall - PRESENCE_S, "+inf")
            *_, tenants = await pipe.execute()
            presence.heard(int(tenants), time.monotonic())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            bounded.warning(("presence", type(exc)), "tenant presence: %r", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), interval_s)


class TenantCalls:
    """Commit calls in flight per tenant over a worker's shards. The shards share one
    event loop (and, on a busy machine, a slice of a core): while tenants share the
    worker (``Presence``) each has one call in flight at a time, so another tenant's call
    runs beside at most one of a backlogged tenant's, not one per shard. A shard whose
    tenants with work are all busy elsewhere waits, and is woken (``on_release``) when a
    call ends."""

    def __init__(self, presence: Presence, on_release: Callable[[], None]) -> None:
        self.presence = presence
        self.on_release = on_release
        self._in_flight: dict[str, int] = {}

    def busy(self, tenant: str) -> bool:
        return tenant in self._in_flight and self.presence.shared()

    def take(self, tenant: str) -> None:
        self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1

    def release(self, tenant: str) -> None:
        left = self._in_flight[tenant] - 1
        if left:
            self._in_flight[tenant] = left
        else:
            del self._in_flight[tenant]
            self.on_release()


@dataclass(slots=True, eq=False)
class Held:
    msg: Msg
    sequence: int
    tenant: str
    commands: int  # as the message says (Zm-Batch); admission checks it
    size: int
    since: float  # when it arrived, or was last reported in progress to the server
    done: bool = False  # applied or refused: nothing more of it to apply
    # Its admitted commands not yet taken by a call (None: not admitted yet).
    queued: deque[Admitted] | None = None
    # What must be confirmed stored before it is acknowledged (the outbox's publications:
    # audit records, dead letters), and whether some are still to be sent.
    pending: list[Any] = field(default_factory=list)
    sending: bool = False


@dataclass(slots=True)
class Call:
    """One tenant's turn: commands to commit in one call, in stream order."""

    tenant: str
    commands: list[Admitted] = field(default_factory=list)
    dead: list[Dead] = field(default_factory=list)  # refused on admission
    touched: list[Held] = field(default_factory=list)  # messages it takes commands from
    completed: list[Held] = field(default_factory=list)  # messages applied once it is
    cost: int = 0

    def groups(self) -> list[Call]:
        """The call cut per message (to contain a failure to the message causing it)."""
        out: list[Call] = []
        for held in self.touched:
            commands = [a for a in self.commands if a.msg is held.msg]
            dead = [d for d in self.dead if d.msg is held.msg]
            completed = [held] if held in self.completed else []
            out.append(Call(self.tenant, commands, dead, [held], completed))
        return out


# Admits a held message: its commands, and the ones refused with their reason.
Admit = Callable[[Held], tuple[list[Admitted], list[Dead]]]


class ShardWindow:
    def __init__(self, presence: Presence | None = None) -> None:
        self.held: deque[Held] = deque()  # in stream order, the settled prefix removed
        self.commands = 0  # commands held, not yet applied
        self.bytes = 0
        self.newest = 0  # highest stream sequence seen this tenure
        self.acknowledged = 0  # highest stream sequence acknowledged
        self._queues: dict[str, deque[Held]] = {}  # per tenant, its messages to apply
        # Tenants with messages to apply, in turn order: those that had nothing waiting
        # when their message came (served first, once), then those with a backlog.
        self._new: deque[str] = deque()
        self._ring: deque[str] = deque()
        self._deficit: dict[str, int] = {}
        self.presence = presence or Presence()  # a worker's shards share theirs

    def __len__(self) -> int:
        return len(self.held)

    @property
    def runnable(self) -> bool:
        """Some tenant has commands to apply."""
        return bool(self._new or self._ring)

    def add(self, msg: Msg, sequence: int, tenant: str, commands: int, done: bool = False) -> bool:
        """Hold a fetched message (``done``: already dealt with, held only until the
        prefix reaches it); False for a redelivery of one already held or done."""
        if sequence <= self.newest:
            return False
        self.newest = sequence
        now = time.monotonic()
        held = Held(msg, sequence, tenant, commands, len(msg.data), now, done)
        self.held.append(held)
        self.bytes += held.size
        if not done:
            self.commands += commands
            self.presence.seen(tenant, now)
            queue = self._queues.get(tenant)
            if queue is None:
                queue = self._queues[tenant] = deque()
                self._new.append(tenant)
            queue.append(held)
        return True

    def waiting_since(self, before: float) -> list[Held]:
        """Messages not acknowledged yet that arrived (or were last renewed) before
        ``before``: the server would deliver them again at its ack wait unless told they
        are in hand. Their clock restarts. Done ones too: a message applied or refused
        waits for its publications' acknowledgements before its own, and delivered again
        meanwhile it came back whole (dead letters of a few hundred kilobytes each, every
        ack wait, while a busy broker was slow to confirm them)."""
        now = time.monotonic()
        out = []
        for held in self.held:
            if held.since < before:
                held.since = now
                out.append(held)
        return out

    def next_call(
        self,
        admit: Admit,
        *,
        most: int,
        share: int,
        quantum: int,
        busy: Callable[[str], bool] | None = None,
    ) -> Call | None:
        """The next tenant's turn (deficit round-robin by commit cost), or None when no
        tenant has anything to apply, or only tenants ``busy`` elsewhere (their turn
        waits). While tenants share the worker a call takes at most ``share`` commands
        and ``quantum`` of cost (at least one command); a tenant alone takes up to
        ``most`` commands."""
        if not (self._new or self._ring):
            return None
        alone = len(self._new) + len(self._ring) == 1 and not self.presence.shared()
        limit = most if alone else min(share, most)
        while True:
            tenant = self._first_free(busy)
            if tenant is None:
                return None  # only tenants whose calls are in flight elsewhere
            allowance = self._deficit.get(tenant, 0) + quantum
            call = Call(tenant)
            self._take(call, admit, limit, None if alone else allowance)
            if self._queues[tenant]:
                self._ring.append(tenant)  # served: a backlog waits its next turn
                # An allowance carries over to the next turn while the tenant has a
                # backlog, never more than one quantum (nor debt beyond one command).
                self._deficit[tenant] = max(-quantum, min(quantum, allowance - call.cost))
            else:
                del self._queues[tenant]
                self._deficit.pop(tenant, None)
            if call.commands or call.touched:
                self._positions(call)
                return call

    def _first_free(self, busy: Callable[[str], bool] | None) -> str | None:
        """The next tenant to serve, taken out of its queue of turns: a new one (nothing
        waiting before its message came) before those with a backlog, each in arrival
        or turn order, passing over the ``busy`` ones."""
        for turns in (self._new, self._ring):
            for n, tenant in enumerate(turns):
                if busy is None or not busy(tenant):
                    del turns[n]
                    return tenant
        return None

    def _take(self, call: Call, admit: Admit, limit: int, allowance: int | None) -> None:
        queue = self._queues[call.tenant]
        if allowance is not None and allowance <= 0:
            return  # in debt from an oversized command: this turn passes
        while queue and len(call.commands) < limit:
            held = queue[0]
            if held.queued is None:
                admitted, dead = admit(held)
                held.queued = deque(admitted)
                call.dead += dead
                call.cost += BASE * len(dead)  # admission's work, counted like a command
                call.touched.append(held)
            elif not call.touched or call.touched[-1] is not held:
                call.touched.append(held)
            commands = held.queued
            while commands and len(call.commands) < limit:
                cost = commit_cost(commands[0].command)
                if allowance is not None and call.commands and call.cost + cost > allowance:
                    return
                call.commands.append(commands.popleft())
                call.cost += cost
            if commands:
                return
            queue.popleft()
            call.completed.append(held)
            if allowance is not None and call.cost >= allowance:
                return

    def _positions(self, call: Call) -> None:
        """Set the position each completed message's last command records: the end of the
        prefix of applied messages once it (and the call's messages before it) are."""
        if not call.completed:
            return
        ends: dict[int, int] = {}
        prefix = self.acknowledged
        ahead = iter(self.held)
        next_held = next(ahead, None)
        finished: set[int] = set()
        for held in call.completed:
            finished.add(id(held))
            while next_held is not None and (next_held.done or id(next_held) in finished):
                prefix = next_held.sequence
                next_held = next(ahead, None)
            ends[id(held)] = prefix
        for admitted in call.commands:
            admitted.position = 0
        last_of: dict[int, Admitted] = {}
        for admitted in call.commands:
            last_of[id(admitted.msg)] = admitted
        for held in call.completed:
            last = last_of.get(id(held.msg))
            if last is not None:
                last.position = ends[id(held)]

    def applied(self, call: Call) -> None:
        """``call`` was committed: the messages it completed are done."""
        for held in call.completed:
            self._finish(held)

    def give_up(self, held: Held) -> None:
        """``held`` was dead-lettered whole: whatever of it is still queued is dropped."""
        queue = self._queues.get(held.tenant)
        if queue is not None and held in queue:
            queue.remove(held)
            if not queue:
                del self._queues[held.tenant]
                (self._new if held.tenant in self._new else self._ring).remove(held.tenant)
                self._deficit.pop(held.tenant, None)
        held.queued = deque()
        self._finish(held)

    def _finish(self, held: Held) -> None:
        if not held.done:
            held.done = True
            self.commands -= held.commands

    def head(self) -> Held | None:
        """The oldest message not yet acknowledged, if it is done (applied or refused)
        and all it must wait for is sent (its publications may still be unconfirmed)."""
        if self.held and self.held[0].done and not self.held[0].sending:
            return self.held[0]
        return None

    def pop(self) -> Held:
        """Drop the head (``head``), confirmed: acknowledged with the prefix it ends."""
        held = self.held.popleft()
        self.bytes -= held.size
        self.acknowledged = held.sequence
        return held

    def unsettled(self) -> bool:
        """Done messages wait for their publications to be confirmed."""
        return bool(self.held) and self.held[0].done
