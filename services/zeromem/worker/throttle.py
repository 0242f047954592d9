"""Telling an agent it is over its tenant's write quota, so that it waits instead of
having its writes refused.

Fire-and-forget writes over ``Limits.tenant_commands_per_s`` are refused and dead-lettered
one message at a time, and the agent hears nothing: it goes on sending at full speed, loses
what it sends, and every refused message still costs the broker (stored, delivered,
dead-lettered) and the worker. Measured with the noisy-neighbour scenario on this project's
2-core machine: tenant A's SDK sent ~2,000 messages a second against a quota of 8, and
refusing them took about a core, enough to move tenant B's write p99 from 5 ms to 40-65 ms.

So a worker refusing an agent's message over the quota also sends it a ``Throttle`` on
its inbox (core NATS, at most one per ``NOTICE_EVERY_S`` per agent and shard): how long
until the tenant's bucket on that shard has room again. The SDK holds that shard's
commands back for that long (``sdk.pacing``); a client that ignores it is refused as
before, at the same cost, and nothing else changes for it.
"""

from __future__ import annotations

import logging
import time

from nats.aio.client import Client as NatsClient

from zeromem import naming
from zeromem.logs import BoundedLog
from zeromem.quota import RateQuota
from zeromem.schemas import Throttle, encode
from zeromem.worker.faults import Fault, classify, describe
from zeromem.worker.messages import subject_identity

log = logging.getLogger(__name__)

# Notices per agent and shard: one per this long at most (a refused message's notice
# reaches the client within a millisecond or so; a few more while it is still paused
# cost nothing to speak of, and one that is lost is sent again at the next refusal).
NOTICE_EVERY_S = 0.2
_MAX_AGENTS = 65536  # (tenant, agent, shard) remembered at once


class ThrottleNotices:
    def __init__(self, nc: NatsClient, quota: RateQuota, log_interval_s: float) -> None:
        self.nc = nc
        self.quota = quota
        self.sent = 0
        self._last: dict[tuple[str, str, int], float] = {}
        self._log = BoundedLog(log, log_interval_s)

    async def refused(self, shard: int, subject: str, count: int) -> None:
        """A message of ``count`` commands on ``subject`` was refused over the quota."""
        try:
            tenant, _, agent = subject_identity(subject)
        except ValueError:  # not an agent's command subject: nobody to tell
            return
        now = time.monotonic()
        key = (tenant, agent, shard)
        if now - self._last.get(key, -NOTICE_EVERY_S) < NOTICE_EVERY_S:
            return
        if len(self._last) >= _MAX_AGENTS:
            self._last.clear()
        self._last[key] = now
        notice = Throttle(
            tenant=tenant,
            shard=shard,
            limit="tenant_commands_per_s",
            rate=self.quota.rate,
            retry_after_s=round(self.quota.wait_for((shard, tenant), count, now), 4),
            refused=count,
        )
        try:
            await self.nc.publish(naming.throttle_subject(tenant, agent), encode(notice))
        except Exception as exc:  # a notice is advice: refusing goes on without it
            if classify(exc) is Fault.OUTAGE:
                raise
            self._log.warning(("throttle", type(exc)), "throttle notice: %s", describe(exc))
            return
        self.sent += 1
