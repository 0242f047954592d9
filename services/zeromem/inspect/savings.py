"""The savings view's data: tokens recall injected, the baseline (every memory that passed
the filters) and the agents' reported histories, per agent over time.

The figures are the usage ledger ``zeromem stats`` reads (a ``stats`` query through the
viewer's client: per agent and minute), summed into buckets that suit the period and
zero-filled, so a chart's x axis is time and a quiet hour shows as zero, not as a gap.
"""

from __future__ import annotations

import time
from typing import Any

from zeromem.schemas import UsageRow
from zeromem.sdk.client import MemoryClient
from zeromem.store.usage import usage_totals

# period name -> (seconds, bucket seconds): about 60 to 170 points a chart
PERIODS: dict[str, tuple[int, int]] = {
    "1h": (3600, 60),
    "6h": (6 * 3600, 300),
    "24h": (24 * 3600, 900),
    "7d": (7 * 24 * 3600, 3600),
}
MEASURES = ("injected", "baseline", "saved", "history")


def series(
    rows: tuple[UsageRow, ...] | list[UsageRow], since: float, until: float, bucket: int
) -> dict[str, Any]:
    first = int(since // bucket * bucket)
    times = list(range(first, int(until) + 1, bucket))
    index = {t: i for i, t in enumerate(times)}
    agents: dict[str, dict[str, list[int]]] = {}
    total = {m: [0] * len(times) for m in MEASURES}
    for row in rows:
        slot = index.get(int(row.minute // bucket * bucket))
        if slot is None:
            continue
        per = agents.setdefault(row.agent, {m: [0] * len(times) for m in MEASURES})
        figures = {
            "injected": row.injected,
            "baseline": row.baseline,
            "saved": row.baseline - row.injected,
            "history": row.history,
        }
        for measure, value in figures.items():
            per[measure][slot] += value
            total[measure][slot] += value
    return {"times": times, "agents": dict(sorted(agents.items())), "total": total}


def totals(rows: tuple[UsageRow, ...] | list[UsageRow]) -> list[dict[str, Any]]:
    """Per agent and for all (the same sums as ``zeromem stats``'s table)."""
    per = usage_totals(rows)
    grand = dict.fromkeys(("recalls", "injected", "baseline", "history"), 0)
    out: list[dict[str, Any]] = []
    for agent, sums in sorted(per.items()):
        for k in grand:
            grand[k] += sums[k]
        out.append({"agent": agent, **sums})
    out.append({"agent": "all", **grand})
    for t in out:
        t["saved"] = t["baseline"] - t["injected"]
        t["saved_pct"] = round(100 * t["saved"] / t["baseline"], 1) if t["baseline"] else None
        # against carrying the whole history, where the agents reported it
        history = t["history"]
        t["saved_history"] = history - t["injected"] if history else None
        t["saved_history_pct"] = round(100 * t["saved_history"] / history, 1) if history else None
    return out


async def savings(client: MemoryClient, period: str, now: float | None = None) -> dict[str, Any]:
    seconds, bucket = PERIODS[period]
    until = time.time() if now is None else now
    since = until - seconds
    reply = await client.stats(since=since, until=until)
    return {
        "period": period,
        "bucket_s": bucket,
        "since": since,
        "until": until,
        **series(reply.rows, since, until, bucket),
        "totals": totals(reply.rows),
    }
