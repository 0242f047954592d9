"""Turns between tenants in a read service: one tenant's flood never queues another's reads.

Every request passes ``TenantGate.admit`` (refused at once when its tenant is over its rate
or has too many requests waiting) and then holds a slot while it is worked on. When a
slot frees, the tenants with requests waiting take turns (round robin), each in its own
arrival order: a tenant sending a thousand recalls at once waits behind itself, and
another tenant's request takes the next free slot.

Alone, a tenant may hold ``Limits.tenant_in_flight`` slots. While other tenants are
active too (a request in the last second), each holds at most
``Limits.tenant_in_flight_shared`` and may take at most ``Limits.tenant_read_share`` of the
service's time: a request's duration is charged to its tenant, and a tenant that spent its
share waits until it is earned back. Why: a slot is not the cost. One recall over sixteen
owners keeps Redis busy for tens of milliseconds (once a single script no other client's
command could interleave with; now calls of one owner each, recall.retrieve); measured
with the noisy-neighbour scenario, another tenant's write p99 went from 451 ms with four
such recalls in flight to 82 ms with one.

A refusal is cheap, but not free, and a client that loops on refused requests gets its
next refusal as fast as the service answers: past ``Limits.tenant_refusals_per_s`` a
tenant's refusals are answered after ``Limits.refusal_delay_s`` (``refusal_delay``), so
such a loop slows to the client's own pace of waiting, and the service's time goes to
the tenants it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Final

from zeromem.limits import Limits, refusal
from zeromem.logs import BoundedLog
from zeromem.quota import RateQuota
from zeromem.schemas import ErrorCode

log = logging.getLogger(__name__)

RATE_LIMITED: Final = "rate_limited"
OVERLOADED: Final = "overloaded"
PRESENCE_S = 1.0  # a tenant counts as active this long after its last request
# A wait for a turn, or a slot held, this long is logged with the gate's state: with the
# debt bounded to a second's worth, a turn never takes this long in a gate that works,
# and a read this long has outlived its caller's 5 s timeout. (Reads that went unanswered
# for 10-60 s under load left nothing in the serve log to tell a stalled gate from a
# stalled Redis or NATS; these lines tell them apart.)
SLOW_TURN_S = 2.0
LONG_HOLD_S = 5.0


class TenantGate:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._rate = RateQuota(limits.tenant_requests_per_s)
        self._busy = 0  # slots held, every tenant together
        self._active: dict[str, int] = {}  # tenant -> slots it holds
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}  # in arrival order
        self._turns: deque[str] = deque()  # tenants with requests waiting, in turn order
        self._queued = 0  # requests waiting, every tenant together
        self._seen: dict[str, float] = {}  # tenant -> its last request (monotonic)
        # tenant -> [seconds of service time it may still take, when last refilled]
        self._share: dict[str, list[float]] = {}
        # The timer of the next dispatch, and when it is due: kept here, because uvloop's
        # call_at returns a plain Handle (no ``when()``) for a moment already past.
        self._redispatch: asyncio.Handle | None = None
        self._redispatch_at = 0.0
        self._log = BoundedLog(log, limits.log_interval_s)
        self._refusals = RateQuota(limits.tenant_refusals_per_s)
        self._held: dict[str, int] = {}  # tenant -> refusal replies waiting their delay

    def refusal_delay(self, tenant: str) -> float:
        """How long the reply to a refusal of ``tenant``'s request waits: 0 within its
        refusal rate (or with the rate off), else ``Limits.refusal_delay_s``; a delayed
        one is counted until ``refusal_sent``. At most ``Limits.tenant_queued`` of a
        tenant's wait at once (past that, 0: the replies held stay bounded)."""
        limits = self.limits
        if self._refusals.take(tenant) or not limits.refusal_delay_s:
            return 0.0
        held = self._held.get(tenant, 0)
        if held >= limits.tenant_queued:
            return 0.0
        self._held[tenant] = held + 1
        return limits.refusal_delay_s

    def refusal_sent(self, tenant: str) -> None:
        """A delayed refusal of ``tenant``'s was answered (or given up)."""
        left = self._held.get(tenant, 0) - 1
        if left > 0:
            self._held[tenant] = left
        else:
            self._held.pop(tenant, None)

    def admit(self, tenant: str) -> tuple[ErrorCode, str] | None:
        """(code, reason) if ``tenant``'s request must be refused now, else None."""
        limits = self.limits
        now = time.monotonic()
        self._seen[tenant] = now
        if len(self._seen) > 4096:  # forget the tenants gone quiet
            self._seen = {t: at for t, at in self._seen.items() if now - at < PRESENCE_S}
        if not self._rate.take(tenant, now=now):
            return RATE_LIMITED, refusal(
                "tenant_requests_per_s",
                f"tenant {tenant!r} is over {limits.tenant_requests_per_s:g} requests/s",
            )
        waiting = self._waiting.get(tenant)
        if waiting is not None and len(waiting) >= limits.tenant_queued:
            return OVERLOADED, refusal(
                "tenant_queued", f"tenant {tenant!r} has {len(waiting)} requests waiting"
            )
        if self._queued >= limits.reads_queued:
            return OVERLOADED, refusal(
                "reads_queued", f"the service has {self._queued} requests waiting"
            )
        return None

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of ``tenant``'s slots (waiting for its turn) while the body runs."""
        if not self._waiting.get(tenant) and self._can_start(tenant, time.monotonic()):
            self._take(tenant)
        else:
            waiter = asyncio.get_running_loop().create_future()
            waiting = self._waiting.get(tenant)
            if waiting is None:
                waiting = self._waiting[tenant] = deque()
                self._turns.append(tenant)
            waiting.append(waiter)
            self._queued += 1
            # Nothing else may come to hand this request a slot: a tenant that waits only
            # to earn back its share, with no request of anyone's in flight, waited for
            # the next request of another tenant to finish (forever in a quiet service).
            self._dispatch()
            asked = time.monotonic()
            try:
                await waiter  # the slot is taken for us when it resolves
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._give(tenant, 0.0)  # granted just as we were cancelled
                else:
                    self._forget(tenant, waiter)
                raise
            waited = time.monotonic() - asked
            if waited >= SLOW_TURN_S:
                self._log.warning(
                    ("slow turn", tenant),
                    "a request of tenant %r waited %.1f s for its turn; gate: %s",
                    tenant,
                    waited,
                    self.state(),
                )
        started = time.monotonic()
        try:
            yield
        finally:
            held = time.monotonic() - started
            self._give(tenant, held)
            if held >= LONG_HOLD_S:
                self._log.warning(
                    ("long hold", tenant),
                    "a request of tenant %r held its slot %.1f s; gate: %s",
                    tenant,
                    held,
                    self.state(),
                )

    def state(self) -> dict[str, Any]:
        """What the gate holds now, for the log of a slow turn and the debug dump (kept
        small: the tenants with a slot or a request waiting, at most 20 of each)."""
        now = time.monotonic()
        timer = self._redispatch
        involved = list(dict.fromkeys([*self._active, *self._waiting]))[:20]
        return {
            "busy": self._busy,
            "queued": self._queued,
            "shared": self._shared(now),
            "active": dict(list(self._active.items())[:20]),
            "waiting": {t: len(w) for t, w in list(self._waiting.items())[:20]},
            "turns": list(self._turns)[:20],
            "refusals_held": dict(list(self._held.items())[:20]),
            "share_s": {t: round(self._share[t][0], 3) for t in involved if t in self._share},
            "redispatch_in_s": (
                None
                if timer is None
                else round(self._redispatch_at - asyncio.get_running_loop().time(), 3)
            ),
        }

    @property
    def in_flight(self) -> int:
        return self._busy

    def shared(self) -> bool:
        """Whether more than one tenant is active (a request in the last ``PRESENCE_S``):
        what the gate's per-tenant bounds while tenants share go by."""
        return self._shared(time.monotonic())

    def _shared(self, now: float) -> bool:
        others = 0
        for at in self._seen.values():
            if now - at < PRESENCE_S:
                others += 1
                if others > 1:
                    return True
        return False

    def _balance(self, tenant: str, now: float) -> float:
        """Seconds of service time ``tenant`` may still take while it shares (at most one
        second's worth is saved up)."""
        share = self.limits.tenant_read_share
        account = self._share.get(tenant)
        if account is None:
            account = self._share[tenant] = [share, now]
        account[0] = min(share, account[0] + (now - account[1]) * share)
        account[1] = now
        return account[0]

    def _can_start(self, tenant: str, now: float) -> bool:
        limits = self.limits
        if self._busy >= limits.reads_in_flight:
            return False
        if not self._shared(now):
            return self._active.get(tenant, 0) < limits.tenant_in_flight
        return (
            self._active.get(tenant, 0) < limits.tenant_in_flight_shared
            and self._balance(tenant, now) > 0
        )

    def _take(self, tenant: str) -> None:
        self._busy += 1
        self._active[tenant] = self._active.get(tenant, 0) + 1

    def _give(self, tenant: str, seconds: float) -> None:
        self._busy -= 1
        left = self._active[tenant] - 1
        if left:
            self._active[tenant] = left
        else:
            del self._active[tenant]
        now = time.monotonic()
        if seconds and self._shared(now):
            share = self.limits.tenant_read_share
            account = self._share.setdefault(tenant, [share, now])
            # A debt of at most one second's worth: a request's wall time is its cost only
            # while the service runs freely. One that waited out a Redis or NATS restart
            # (or a starved event loop) did not cost the others that long, yet charged in
            # full it locked its tenant out for four times as long (share 0.25): a get
            # that took 10 s, 40 s of silence.
            account[0] = max(account[0] - seconds, -share)
        if len(self._share) > 4096:
            self._share.clear()
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots to waiting requests, one tenant after another; if a tenant waits
        only to earn back its share, come back when it has."""
        now = time.monotonic()
        passes = len(self._turns)
        earned_in: float | None = None
        while self._turns and self._busy < self.limits.reads_in_flight and passes > 0:
            tenant = self._turns.popleft()
            waiting = self._waiting[tenant]
            if not self._can_start(tenant, now):
                self._turns.append(tenant)  # not its turn yet: the next tenant's
                passes -= 1
                balance = self._share.get(tenant, [1.0])[0]
                if balance <= 0 and self.limits.tenant_read_share > 0:
                    wait = -balance / self.limits.tenant_read_share + 0.001
                    earned_in = wait if earned_in is None else min(earned_in, wait)
                continue
            waiter = waiting.popleft()
            self._queued -= 1
            if not waiter.done():  # cancelled, its task not yet run to forget it
                self._take(tenant)
                waiter.set_result(None)
            if waiting:
                self._turns.append(tenant)
            else:
                del self._waiting[tenant]
            passes = len(self._turns)
        if earned_in is not None:
            self._redispatch_in(earned_in)

    def _redispatch_in(self, seconds: float) -> None:
        """Dispatch again in ``seconds``, or sooner if already due sooner: a tenant in
        little debt never waits for the timer of one in much."""
        loop = asyncio.get_running_loop()
        due = loop.time() + seconds
        timer = self._redispatch
        if timer is not None:
            if self._redispatch_at <= due:
                return
            timer.cancel()

        def again() -> None:
            self._redispatch = None
            self._dispatch()

        self._redispatch = loop.call_at(due, again)
        self._redispatch_at = due

    def _forget(self, tenant: str, waiter: asyncio.Future[None]) -> None:
        waiting = self._waiting.get(tenant)
        if waiting is None or waiter not in waiting:
            return
        waiting.remove(waiter)
        self._queued -= 1
        if not waiting:
            del self._waiting[tenant]
            self._turns.remove(tenant)
