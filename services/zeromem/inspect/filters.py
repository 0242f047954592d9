"""The inspector's Jinja filters: times, durations, numbers and JSON as the pages show them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def when(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def clock(ts: float | None) -> str:
    """The time of day to the millisecond, as the live rows show it (UTC)."""
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S.%f")[:-3] + "Z"


def ago(ts: float | None) -> str:
    return seconds(time.time() - ts) + " ago" if ts else "-"


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    s = abs(s)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.1f}{unit}"
    return f"{s:.0f}s"


def num(n: float | None) -> str:
    return "-" if n is None else f"{n:,}"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


FILTERS: dict[str, Callable[..., str]] = {
    "when": when,
    "clock": clock,
    "ago": ago,
    "num": num,
    "pretty": pretty,
    "seconds": seconds,
}
"""Every filter the templates use, by the name they use."""
