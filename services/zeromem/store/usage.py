"""A ledger of recall token usage per tenant, agent and minute, kept in Redis for
``zeromem stats``.

Recalls add to an in-memory tally; a background task flushes it every few seconds in one
pipelined round trip, so a recall never waits on the ledger. (The OpenTelemetry metrics
carry the same figures to a collector; this ledger serves the built-in view.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

from redis.asyncio import Redis
from redis.exceptions import RedisError

from zeromem.schemas import UsageRow
from zeromem.store.keys import USAGE_FIELD_SEPARATOR, RedisKeys, usage_field

log = logging.getLogger(__name__)

MEASURES = ("recalls", "injected", "baseline", "history")
RETENTION_S = 35 * 24 * 3600


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%d")


class UsageLedger:
    def __init__(self, redis: Redis, flush_interval_s: float = 2.0) -> None:
        self.redis = redis
        self.flush_interval_s = flush_interval_s
        self._tally: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        self._task: asyncio.Task[None] | None = None

    def record(self, tenant: str, agent: str, injected: int, baseline: int, history: int) -> None:
        if self._task is None:
            self.start()  # on the first recall, inside the service's event loop
        minute = int(time.time() // 60 * 60)
        counts = self._tally[(tenant, agent or "-", minute)]
        counts[0] += 1
        counts[1] += injected
        counts[2] += baseline
        counts[3] += history

    async def flush(self) -> None:
        tally, self._tally = self._tally, defaultdict(lambda: [0, 0, 0, 0])
        if not tally:
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for (tenant, agent, minute), counts in tally.items():
                    key = RedisKeys(tenant).usage(_day(minute))
                    for measure, count in zip(MEASURES, counts, strict=True):
                        if count:
                            pipe.hincrby(key, usage_field(minute, agent, measure), count)
                    pipe.expire(key, RETENTION_S)
                await pipe.execute()
        except RedisError as exc:  # usage figures are best effort; recalls never suffer
            log.warning("usage ledger flush failed: %s", exc)

    def start(self) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(self.flush_interval_s)
                await self.flush()

        self._task = asyncio.get_running_loop().create_task(loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()


class TooManyRows(ValueError):
    """The range holds more rows than one reply may carry."""


async def read_usage(
    redis: Redis, tenant: str, since: float, until: float, max_rows: int | None = None
) -> list[UsageRow]:
    """The tenant's rows between ``since`` and ``until``. Only the days the ledger still
    keeps are read (at most 36 hash reads, whatever the range); more than ``max_rows``
    rows raise ``TooManyRows``."""
    keys = RedisKeys(tenant)
    first = max(since, time.time() - RETENTION_S - 86400)
    if first > until:
        return []
    days = sorted({_day(t) for t in range(int(first), int(until) + 86400, 86400)} | {_day(until)})
    async with redis.pipeline(transaction=False) as pipe:
        for day in days:
            pipe.hgetall(keys.usage(day))
        replies = await pipe.execute()
    rows: dict[tuple[float, str], dict[str, int]] = {}
    for reply in replies:
        for field, value in reply.items():
            parts = field.decode(errors="replace").split(USAGE_FIELD_SEPARATOR)
            if len(parts) != 3 or parts[2] not in MEASURES:
                continue  # not a field this ledger writes
            minute, agent, measure = parts
            try:
                at = float(minute)
            except ValueError:
                continue
            if since <= at <= until:
                rows.setdefault((at, agent), {})[measure] = int(value)
                if max_rows is not None and len(rows) > max_rows:
                    raise TooManyRows(f"more than {max_rows} rows")
    return [UsageRow(minute=m, agent=a, **counts) for (m, a), counts in sorted(rows.items())]


def usage_totals(rows: Sequence[UsageRow]) -> dict[str, dict[str, int]]:
    """Per agent, each measure summed over ``rows``."""
    totals: dict[str, dict[str, int]] = {}
    for row in rows:
        t = totals.setdefault(row.agent, dict.fromkeys(MEASURES, 0))
        t["recalls"] += row.recalls
        t["injected"] += row.injected
        t["baseline"] += row.baseline
        t["history"] += row.history
    return totals
