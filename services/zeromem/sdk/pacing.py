"""Holding an agent's commands back while its tenant is over a write quota.

A worker that refuses this agent's message over ``Limits.tenant_commands_per_s`` tells it
so on its inbox (``schemas.Throttle``, ``worker.throttle``): the quota's rate, and how long
until the refused message would have passed. From it this client models the worker's
bucket for that shard, and for ``PACED_FOR_S`` after each notice every command of its to
that shard waits until the bucket has room: a fire-and-forget ``put`` then returns once
its batch could go (back-pressure into the agent's loop, as a full JetStream gives), a
waiting one waits as long. The writes are applied late instead of refused: nothing is
lost, and the deployment no longer pays for refusing them. Commands to the other shards
go on.

A notice is advice from the servers and is bounded here (``MAX_PAUSE_S`` each); the
worker refuses what comes over the quota anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from zeromem.quota import refilled
from zeromem.schemas import Throttle, decode

log = logging.getLogger(__name__)

# One notice holds a shard's commands back this long at most (a worker's is the time its
# quota takes to refill a message's commands: under a second at any sensible rate).
MAX_PAUSE_S = 5.0
# After a notice, the shard's commands go out no faster than the quota's rate for this
# long (renewed by each notice), and after that until the modelled bucket is full again:
# one pause alone lets the next command through and the one after it is refused again.
PACED_FOR_S = 2.0


class _Pace:
    """The worker's bucket for this tenant and shard, as this client models it from the
    last notice: ``tokens`` at ``at``, refilled at ``rate`` up to a second's worth; a
    message of n commands passes with min(n, rate) of them (quota.RateQuota's rule)."""

    __slots__ = ("at", "rate", "tokens", "until")

    def __init__(self, rate: float, tokens: float, at: float) -> None:
        self.rate = rate
        self.tokens = tokens
        self.at = at
        self.until = at + PACED_FOR_S

    def now_holds(self, now: float) -> float:
        return refilled(self.tokens, self.at, now, self.rate)


class ShardPacer:
    def __init__(self, nc: NatsClient, subject: str) -> None:
        self.nc = nc
        self.subject = subject
        self.notices = 0  # Throttle notices received
        self._paces: dict[int, _Pace] = {}  # shards told to slow down lately
        self._sub: Any = None

    async def start(self) -> None:
        """Listen for notices (before the first command goes out)."""
        if self._sub is None:
            self._sub = await self.nc.subscribe(self.subject, cb=self._on_notice)

    async def wait(self, shard: int, commands: int = 1) -> None:
        """Until a message of ``commands`` to ``shard`` would pass the worker's quota;
        then ``spent`` says how many went."""
        if self._sub is None:
            await self.start()
        while (pace := self._paces.get(shard)) is not None:
            now = time.monotonic()
            if now >= pace.until and pace.now_holds(now) >= pace.rate:
                del self._paces[shard]  # quiet for a while, and the bucket full again
                break
            short = min(commands, pace.rate) - pace.now_holds(now)
            if short <= 0:
                break
            # Looked at again after the sleep: a notice meanwhile may have moved it.
            await asyncio.sleep(min(short / pace.rate, MAX_PAUSE_S))

    def affordable(self, shard: int, commands: int) -> int:
        """How many of ``commands`` (in one message) would pass now: all of them, or
        as many as the modelled bucket holds (at least one)."""
        pace = self._paces.get(shard)
        if pace is None:
            return commands
        holds = pace.now_holds(time.monotonic())
        if holds >= min(commands, pace.rate):
            return commands
        return max(1, int(holds))

    def spent(self, shard: int, commands: int) -> None:
        """A message of ``commands`` went out to ``shard``."""
        pace = self._paces.get(shard)
        if pace is not None:
            now = time.monotonic()
            pace.tokens = pace.now_holds(now) - commands
            pace.at = now

    def paused(self, shard: int) -> float:
        """Seconds until one command to ``shard`` may go (0: now)."""
        pace = self._paces.get(shard)
        if pace is None:
            return 0.0
        return max(0.0, (1 - pace.now_holds(time.monotonic())) / pace.rate)

    async def _on_notice(self, msg: Msg) -> None:
        try:
            notice = decode(msg.data, Throttle)
        except Exception as exc:  # advice only: a notice this client cannot read is dropped
            log.debug("unreadable throttle notice: %s", exc)
            return
        self.notices += 1
        rate, after = notice.rate, min(notice.retry_after_s, MAX_PAUSE_S)
        if not (0 < rate < float("inf") and after >= 0):  # NaN fails both
            return
        # The refused message of ``refused`` commands would pass in ``after`` seconds:
        # the bucket holds min(refused, rate) - after * rate now.
        now = time.monotonic()
        self._paces[notice.shard] = _Pace(
            rate, min(max(notice.refused, 1), rate) - after * rate, now
        )

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except Exception as exc:  # the connection is already closed: nothing to undo
                log.debug("throttle subscription: %s", exc)
