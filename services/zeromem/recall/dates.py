"""Dates a query names, as a time range: "what did Mara say in March 2024?".

Recognised (English month names and their usual abbreviations, UTC): a day
(``14 March 2024``, ``March 14, 2024``, ``March 14th 2024``, ``2024-03-14``) and a month
(``March 2024``, ``2024-03``). A query naming several takes the first. No relative dates
("last week"): their meaning depends on when the memory was written, not on the query.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        )
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_PATTERNS = (
    re.compile(rf"\b{_YEAR}-(?P<mnum>[01]\d)(?:-(?P<dnum>[0-3]\d))?\b"),
    re.compile(rf"\b{_DAY}(?: of)? {_MONTH},? {_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH} {_DAY},? {_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH},? {_YEAR}\b", re.IGNORECASE),
)


def date_range(query: str) -> tuple[float, float] | None:
    """``(start, end)`` epoch seconds of the first day or month ``query`` names, else None."""
    best: tuple[int, tuple[float, float]] | None = None
    for pattern in _PATTERNS:
        match = pattern.search(query)
        if match is None or (best is not None and match.start() >= best[0]):
            continue
        found = _range(match)
        if found is not None:
            best = (match.start(), found)
    return best[1] if best else None


def _range(match: re.Match[str]) -> tuple[float, float] | None:
    groups = match.groupdict()
    year = int(groups["year"])
    if groups.get("mnum"):
        month = int(groups["mnum"])
        day = int(groups["dnum"]) if groups.get("dnum") else None
    else:
        month = _MONTHS[groups["month"].lower()]
        day = int(groups["day"]) if groups.get("day") else None
    try:
        if day is None:
            start = datetime(year, month, 1, tzinfo=UTC)
            end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
        else:
            start = datetime(year, month, day, tzinfo=UTC)
            end = datetime.fromtimestamp(start.timestamp() + 86_400, UTC)
    except ValueError:  # "31 February"
        return None
    return start.timestamp(), end.timestamp()


__all__ = ["date_range"]
