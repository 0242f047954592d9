"""What a process answers on its metrics address: ``/metrics`` (Prometheus), ``/healthz``
(liveness) and ``/readyz`` (readiness), for Kubernetes probes and anyone else asking.

* ``/healthz`` is 200 while the process's event loop turns: a task beats every second and
  the answer is 503 once no beat came for ``Settings.telemetry.liveness_stall_s``. A loop blocked by
  a stuck call answers nothing else either, so that is what a restart can cure; a broker
  or database that is down is not (restarting would not bring it back), and only makes
  the process unready.
* ``/readyz`` is 200 once the process has started and every readiness check holds (a
  worker: connected to NATS and
  holding the leases of all its shards; a read service: its connections up), else
  503; the checks' results as JSON either way.

The server runs in a thread of its own, so a probe is answered even while the loop is
busy; the checks only read state the loop keeps (no I/O from the probe's thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

BEAT_S = 1.0  # how often the loop proves it turns


class Health:
    """The liveness beat and the named readiness checks of one process."""

    def __init__(self, stall_s: float = 30.0) -> None:
        self.stall_s = stall_s
        self._beat = time.monotonic()
        self._started = False
        self._checks: dict[str, Callable[[], bool]] = {"started": lambda: self._started}
        self._beating: asyncio.Task[None] | None = None

    def started(self) -> None:
        """The process has started and added its checks: from now on they decide. Until
        then it is not ready, whatever the checks added so far say."""
        self._started = True

    def ready_when(self, name: str, check: Callable[[], bool]) -> None:
        """Add a readiness check: a cheap, non-blocking look at the process's state."""
        self._checks[name] = check

    def start_beating(self) -> None:
        """Beat from the running loop (call once the process's loop runs)."""
        if self._beating is None:
            self._beating = asyncio.get_running_loop().create_task(self._beat_forever())

    def stop_beating(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            self._beating = None

    async def _beat_forever(self) -> None:
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(BEAT_S)

    def liveness(self) -> tuple[bool, dict[str, object]]:
        silent = time.monotonic() - self._beat
        return silent < self.stall_s, {"loop_silent_s": round(silent, 3), "limit_s": self.stall_s}

    def readiness(self) -> tuple[bool, dict[str, object]]:
        results: dict[str, object] = {}
        for name, check in list(self._checks.items()):
            try:
                results[name] = bool(check())
            except Exception as exc:  # a check that fails to answer says "not ready"
                results[name] = f"check failed: {exc}"
        return all(v is True for v in results.values()), results


def serve_health(health: Health, host: str, port: int) -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` from a daemon
    thread, and start the liveness beat when called from a running loop; returns the
    server (``.shutdown()`` stops it)."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
            elif path in ("/healthz", "/readyz"):
                ok, detail = health.liveness() if path == "/healthz" else health.readiness()
                body = json.dumps({"ok": ok, **detail}).encode()
                self._send(200 if ok else 503, "application/json", body)
            else:
                self._send(404, "text/plain", b"try /metrics, /healthz or /readyz\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds is not news

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="zeromem-health", daemon=True)
    thread.start()
    with contextlib.suppress(RuntimeError):  # no running loop: the caller beats later
        health.start_beating()
    return server
