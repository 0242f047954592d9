"""The health endpoints in one process: liveness follows the event loop, readiness its
checks (the same server the services start on their metrics address)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

from zeromem.embedded import free_port
from zeromem.health import Health, serve_health


def get(port: int, path: str) -> tuple[int, dict | str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            body = r.read().decode()
            return r.status, json.loads(body) if path != "/metrics" else body
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()) if e.code != 404 else ""


async def test_liveness_fails_while_the_loop_is_blocked_and_recovers() -> None:
    health = Health(stall_s=0.5)
    port = free_port()
    server = serve_health(health, "127.0.0.1", port)
    try:
        health.start_beating()
        await asyncio.sleep(0.05)
        assert (await asyncio.to_thread(get, port, "/healthz"))[0] == 200
        time.sleep(1.2)  # noqa: ASYNC251 (the point: a stuck call holds the loop)
        status, body = get(port, "/healthz")
        assert status == 503 and body["loop_silent_s"] >= 1.0
        await asyncio.sleep(0.05)  # the loop turns again and beats
        assert (await asyncio.to_thread(get, port, "/healthz"))[0] == 200
    finally:
        health.stop_beating()
        server.shutdown()


async def test_readiness_is_every_check_and_a_broken_check_is_not_ready() -> None:
    health = Health()
    state = {"connected": False}
    health.ready_when("connected", lambda: state["connected"])
    port = free_port()
    server = serve_health(health, "127.0.0.1", port)
    try:
        state["connected"] = True
        assert await asyncio.to_thread(get, port, "/readyz") == (
            503,
            {"ok": False, "started": False, "connected": True},
        )  # not started yet: not ready whatever the checks say
        health.started()
        state["connected"] = False
        assert (await asyncio.to_thread(get, port, "/readyz"))[0] == 503
        state["connected"] = True
        assert (await asyncio.to_thread(get, port, "/readyz"))[0] == 200
        health.ready_when("broken", lambda: 1 / 0)
        status, body = await asyncio.to_thread(get, port, "/readyz")
        assert status == 503 and body["broken"].startswith("check failed")
        assert (await asyncio.to_thread(get, port, "/nowhere"))[0] == 404
        assert (await asyncio.to_thread(get, port, "/metrics"))[0] == 200
    finally:
        server.shutdown()
