"""Turns between tenants in a read service: one tenant's flood never queues another's reads.

Every request passes ``TenantGate.admit`` (refused at once when its tenant is over its rate
or has too many requests waiting) and then holds a slot while it is worked on. A tenant
holds at most ``Limits.tenant_in_flight`` slots; the service at most
``Limits.reads_in_flight``. When a slot frees, the tenants with requests waiting take
turns (round robin), each in its own arrival order: a tenant sending a thousand recalls
at once waits behind itself, and another tenant's request takes the next free slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

from zeromem.limits import Limits, refusal
from zeromem.quota import RateQuota

RATE_LIMITED = "rate_limited"
OVERLOADED = "overloaded"


class TenantGate:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._rate = RateQuota(limits.tenant_requests_per_s)
        self._busy = 0  # slots held, every tenant together
        self._active: dict[str, int] = {}  # tenant -> slots it holds
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}  # in arrival order
        self._turns: deque[str] = deque()  # tenants with requests waiting, in turn order
        self._queued = 0  # requests waiting, every tenant together

    def admit(self, tenant: str) -> tuple[str, str] | None:
        """(code, reason) if ``tenant``'s request must be refused now, else None."""
        limits = self.limits
        if not self._rate.take(tenant):
            return RATE_LIMITED, refusal("tenant_requests_per_s", f"tenant {tenant!r} is over "
                                         f"{limits.tenant_requests_per_s:g} requests/s")
        waiting = self._waiting.get(tenant)
        if waiting is not None and len(waiting) >= limits.tenant_queued:
            return OVERLOADED, refusal("tenant_queued", f"tenant {tenant!r} has "
                                       f"{len(waiting)} requests waiting")  # fmt: skip
        if self._queued >= limits.reads_queued:
            return OVERLOADED, refusal("reads_queued", "the service has "
                                       f"{self._queued} requests waiting")  # fmt: skip
        return None

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of ``tenant``'s slots (waiting for its turn) while the body runs."""
        if self._can_start(tenant) and not self._waiting.get(tenant):
            self._take(tenant)
        else:
            waiter = asyncio.get_running_loop().create_future()
            waiting = self._waiting.get(tenant)
            if waiting is None:
                waiting = self._waiting[tenant] = deque()
                self._turns.append(tenant)
            waiting.append(waiter)
            self._queued += 1
            try:
                await waiter  # the slot is taken for us when it resolves
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._give(tenant)  # granted just as we were cancelled
                else:
                    self._forget(tenant, waiter)
                raise
        try:
            yield
        finally:
            self._give(tenant)

    @property
    def in_flight(self) -> int:
        return self._busy

    def _can_start(self, tenant: str) -> bool:
        return (self._busy < self.limits.reads_in_flight
                and self._active.get(tenant, 0) < self.limits.tenant_in_flight)  # fmt: skip

    def _take(self, tenant: str) -> None:
        self._busy += 1
        self._active[tenant] = self._active.get(tenant, 0) + 1

    def _give(self, tenant: str) -> None:
        self._busy -= 1
        left = self._active[tenant] - 1
        if left:
            self._active[tenant] = left
        else:
            del self._active[tenant]
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots to waiting requests, one tenant after another."""
        passes = len(self._turns)
        while self._turns and self._busy < self.limits.reads_in_flight and passes > 0:
            tenant = self._turns.popleft()
            waiting = self._waiting[tenant]
            if self._active.get(tenant, 0) >= self.limits.tenant_in_flight:
                self._turns.append(tenant)  # its slots are all held: the next tenant's turn
                passes -= 1
                continue
            waiter = waiting.popleft()
            self._queued -= 1
            self._take(tenant)
            waiter.set_result(None)
            if waiting:
                self._turns.append(tenant)
            else:
                del self._waiting[tenant]
            passes = len(self._turns)

    def _forget(self, tenant: str, waiter: asyncio.Future[None]) -> None:
        waiting = self._waiting.get(tenant)
        if waiting is None or waiter not in waiting:
            return
        waiting.remove(waiter)
        self._queued -= 1
        if not waiting:
            del self._waiting[tenant]
            self._turns.remove(tenant)
