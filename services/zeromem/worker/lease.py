"""Shard leases: only the worker holding a shard's lease may apply its commands.

A lease is a Redis key holding the holder's token, with a time to live the holder keeps
renewing. The commit script checks the token with every commit (``store/commit.lua``), so
a worker that lost its lease (paused past it, cut off from Redis) is fenced: nothing it
decided afterwards is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from redis.asyncio import Redis
from redis.exceptions import RedisError

from zeromem.store import scripts
from zeromem.store.keys import shard_lease_key

log = logging.getLogger(__name__)


class LeaseLostError(RuntimeError):
    """The shard's lease is no longer this worker's; the message says how it was lost."""

    def __init__(self, shard: int, how: str = "a commit was fenced") -> None:
        super().__init__(f"shard {shard}: {how}")
        self.shard = shard
        self.how = how


class ShardLeases:
    """The leases one worker takes, holds and gives back, under one token."""

    def __init__(self, redis: Redis, ttl_s: float, token: str | None = None) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self.token = token or uuid.uuid4().hex
        self.owned: set[int] = set()  # shards whose lease this worker holds right now
        # Per shard, until when (monotonic) the lease is known to be ours without asking.
        self._sure_until: dict[int, float] = {}

    @property
    def _ttl_ms(self) -> int:
        return int(self.ttl_s * 1000)

    async def acquire(self, shard: int) -> None:
        """Wait until the shard's lease is free (or already ours) and take it."""
        key = shard_lease_key(shard)
        while True:
            try:
                if await self.redis.set(key, self.token, nx=True, px=self._ttl_ms):
                    break
                if await self.redis.get(key) == self.token.encode():
                    break
            except RedisError as exc:
                log.warning("redis unavailable while taking the lease of shard %d: %s", shard, exc)
            await asyncio.sleep(min(1.0, self.ttl_s / 4))
        self.owned.add(shard)
        self._sure_until[shard] = time.monotonic() + self.ttl_s / 2

    async def keep(self, shard: int) -> None:
        """Renew the lease until cancelled; raises ``LeaseLostError`` once it is lost (taken
        by another, expired before a renewal came, or Redis unreachable for longer than
        the lease lives), saying which and how late the renewals were: a worker whose
        event loop was held up past the lease's life loses it without any other worker
        wanting it, and that must be told apart from a takeover."""
        key = shard_lease_key(shard)
        failures_since = None
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                asked_at = time.monotonic()
                held = await scripts.LEASE_RENEW(self.redis, [key], [self.token, self._ttl_ms])
                if held != 1:
                    raise LeaseLostError(shard, self._lost(held, time.monotonic() - renewed_at))
                renewed_at = asked_at
                self._sure_until[shard] = asked_at + self.ttl_s / 2
                failures_since = None
            except RedisError as exc:
                failures_since = failures_since or time.monotonic()
                if time.monotonic() - failures_since > self.ttl_s:
                    raise LeaseLostError(
                        shard, f"Redis unreachable for longer than the lease lives: {exc}"
                    ) from None

    def _lost(self, held: object, since_renewal_s: float) -> str:
        if held == -1:
            return "another worker holds the lease"
        return (
            f"the lease expired: {since_renewal_s:.1f}s since its last renewal "
            f"(it lives {self.ttl_s:g}s, renewed every {self.ttl_s / 3:.2f}s; the event "
            "loop or Redis was held up)"
        )

    async def confirm(self, shard: int) -> None:
        """Unless the lease was renewed recently, ask Redis whether it is still ours: a
        worker that stalled (SIGSTOP, a frozen host) asks before taking more commands."""
        if time.monotonic() <= self._sure_until.get(shard, 0.0):
            return
        checked_at = time.monotonic()
        key = shard_lease_key(shard)
        held = await scripts.LEASE_RENEW(self.redis, [key], [self.token, self._ttl_ms])
        if held != 1:
            since = checked_at - (self._sure_until.get(shard, checked_at) - self.ttl_s / 2)
            raise LeaseLostError(shard, self._lost(held, since))
        self._sure_until[shard] = checked_at + self.ttl_s / 2

    async def release(self, shard: int, timeout: float = 1.0) -> None:
        """Give the lease back if it is still ours (bounded: a stop must not wait on a
        server that does not answer)."""
        self.owned.discard(shard)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                scripts.LEASE_RELEASE(self.redis, [shard_lease_key(shard)], [self.token]), timeout
            )
