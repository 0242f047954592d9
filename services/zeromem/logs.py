"""Log lines for failures that can repeat, at a bounded rate.

A hostile client can make the same failure happen thousands of times a second (one
batch message of 50,000 bad commands once wrote 650,000 warning lines, 100 MB, in two
minutes). ``BoundedLog`` writes a line for a kind of failure at most once per interval
and counts the others; the next line it writes says how many it left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable

_MAX_KINDS = 4096  # kinds remembered at once; forgetting one only lets one more line out


class BoundedLog:
    def __init__(self, logger: logging.Logger, interval_s: float) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last: dict[Hashable, float] = {}  # kind -> when it was last written
        self._skipped: dict[Hashable, int] = {}

    def log(
        self,
        level: int,
        kind: Hashable,
        msg: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> bool:
        """Write ``msg`` unless a line of ``kind`` was written less than an interval ago;
        returns whether it was written."""
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
            return False
        if len(self._last) >= _MAX_KINDS:
            self._last.clear()
            self._skipped.clear()
        self._last[kind] = now
        skipped = self._skipped.pop(kind, 0)
        if skipped:
            msg += " (and %d more like it in the last %.0fs, not logged)"
            args = (*args, skipped, self.interval_s)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(
        self, kind: Hashable, msg: str, *args: object, exc_info: BaseException | None = None
    ) -> bool:
        return self.log(logging.WARNING, kind, msg, *args, exc_info=exc_info)

    def error(
        self, kind: Hashable, msg: str, *args: object, exc_info: BaseException | None = None
    ) -> bool:
        return self.log(logging.ERROR, kind, msg, *args, exc_info=exc_info)
