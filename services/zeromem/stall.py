"""Where the event loop is when it stops turning.

Everything a service does runs on one event loop, so one call that holds it (a long
computation, a blocking system call, a process starved of CPU) holds every shard and
every request with it, and a worker's shard leases expire behind it. ``/healthz`` says
that the loop stalled (``health``); this says where: a thread of its own looks at the
loop's beat, and once the loop has been silent for ``threshold_s`` it logs the Python
stack of the loop's thread, once per stall, and the loop logs how long it was held when
it turns again. Logged at most once per ``log_interval_s`` each, so a process that keeps
stalling does not fill its log.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger(__name__)


class StallWatch:
    """The watch of one event loop (``start`` from the loop's thread)."""

    def __init__(self, threshold_s: float, log_interval_s: float = 30.0) -> None:
        self.threshold_s = threshold_s
        self.log_interval_s = log_interval_s
        # The beat is a fraction of the threshold: a stall is seen within a quarter of it.
        self._period_s = max(0.01, threshold_s / 4)
        self._beat = time.monotonic()
        self._loop_thread = 0
        self._seen: float | None = None  # the beat of the stall already reported
        self._stack_logged_at = -float("inf")
        self._end_logged_at = -float("inf")
        self._stopped = threading.Event()
        self._handle: asyncio.TimerHandle | None = None
        self.stalls = 0  # stalls seen since the start

    def start(self) -> StallWatch:
        if self.threshold_s <= 0:
            return self  # switched off
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._handle = asyncio.get_running_loop().call_later(self._period_s, self._on_beat)
        threading.Thread(target=self._watch, name="zeromem-stall-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _on_beat(self) -> None:
        now = time.monotonic()
        held = now - self._beat - self._period_s  # beyond the beat's own wait
        self._beat = now
        if held >= self.threshold_s:
            self.stalls += 1
            if now - self._end_logged_at >= self.log_interval_s:
                self._end_logged_at = now
                log.warning(
                    "the event loop was held for %.2fs (a blocking call, or the process "
                    "starved of CPU); stalls so far: %d",
                    held,
                    self.stalls,
                )
        if not self._stopped.is_set():
            self._handle = asyncio.get_running_loop().call_later(self._period_s, self._on_beat)

    def _watch(self) -> None:
        while not self._stopped.wait(self._period_s):
            beat = self._beat
            silent = time.monotonic() - beat - self._period_s
            if silent < self.threshold_s or self._seen == beat:
                continue
            self._seen = beat
            now = time.monotonic()
            if now - self._stack_logged_at < self.log_interval_s:
                continue
            self._stack_logged_at = now
            frame = sys._current_frames().get(self._loop_thread)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "?\n"
            log.warning(
                "the event loop has not turned for %.2fs; its thread is at:\n%s",
                silent,
                stack.rstrip("\n"),
            )
