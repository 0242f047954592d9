"""Rate quotas per tenant: token buckets, one per key, refilled continuously.

The workers keep one per (shard, tenant) for ``Limits.tenant_commands_per_s``; each read
service one per tenant for ``Limits.tenant_requests_per_s``. A bucket holds one second
of its rate, so a tenant may burst to a second's worth after a pause, never beyond.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

_MAX_KEYS = 65536  # buckets remembered at once; a forgotten one starts full again


def refilled(tokens: float, since: float, now: float, rate: float) -> float:
    """A bucket's tokens at ``now``, holding ``tokens`` at ``since`` and refilled at
    ``rate`` up to a second's worth: what a worker's quota holds, and what the SDK
    models of it from a throttle notice (``sdk.pacing``)."""
    return min(rate, tokens + (now - since) * rate)


class RateQuota:
    """``rate`` per second for each key; a rate of 0 admits everything."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._buckets: dict[Hashable, list[float]] = {}  # key -> [tokens, last refill]

    def take(self, key: Hashable, count: int = 1, now: float | None = None) -> bool:
        """Take ``count`` tokens for ``key`` if it has them."""
        if self.rate <= 0:
            return True
        now = time.monotonic() if now is None else now
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= _MAX_KEYS:
                self._buckets.clear()
            bucket = self._buckets[key] = [self.rate, now]
        tokens = refilled(bucket[0], bucket[1], now, self.rate)
        bucket[1] = now
        # A take larger than a second's worth (a batch message) passes when the bucket is
        # full and leaves it in debt: the average stays at ``rate``.
        if tokens < min(count, self.rate):
            bucket[0] = tokens
            return False
        bucket[0] = tokens - count
        return True

    def wait_for(self, key: Hashable, count: int = 1, now: float | None = None) -> float:
        """Seconds until ``take(key, count)`` would pass (0: now), taking nothing."""
        bucket = self._buckets.get(key)
        if self.rate <= 0 or bucket is None:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens = refilled(bucket[0], bucket[1], now, self.rate)
        return max(0.0, (min(count, self.rate) - tokens) / self.rate)
