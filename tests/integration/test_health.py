"""Issue 17 (4): /healthz and /readyz of real `zeromem worker` and `zeromem serve`
processes, through a broker outage and a lease held by someone else."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.eventually import eventually
from tests.reliability.cluster import Cluster, ServiceProcess
from zeromem.auth.authority import Authority
from zeromem.embedded import free_port


def probe(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def until(
    port: int, path: str, status: int, limit_s: float = 30.0, started: bool = True
) -> dict:
    """Until ``path`` answers ``status`` (for /readyz: from a process that has started,
    unless ``started`` is False)."""
    deadline = time.monotonic() + limit_s
    last: tuple[int, dict] | None = None
    while time.monotonic() < deadline:
        try:
            last = await asyncio.to_thread(probe, port, path)
            if last[0] == status and (not started or last[1].get("started", True)):
                return last[1]
        except OSError:
            pass  # not listening yet
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} on {port} never answered {status}; last: {last}")


def _after(text: str, marker: str) -> str | None:
    return text[text.index(marker) :] if marker in text else None


def service(cluster: Cluster, args: list[str], role: str, port: int, name: str) -> ServiceProcess:
    env = dict(cluster.env(role), ZEROMEM_METRICS_PORT=str(port), ZEROMEM_METRICS_HOST="127.0.0.1")
    proc = ServiceProcess(args, env, cluster.root / name).start()
    cluster.processes.append(proc)
    return proc


async def test_ready_when_serving_unready_without_nats_alive_throughout(
    tmp_path: Path, authority: Authority
) -> None:
    cluster = await Cluster(tmp_path / "cluster", authority).start()
    try:
        worker_port, serve_port = free_port(), free_port()
        service(cluster, ["worker", "0", "1"], "worker", worker_port, "worker.log")
        serve = service(cluster, ["serve"], "reader", serve_port, "serve.log")
        ready = await until(worker_port, "/readyz", 200)
        assert ready == {
            "ok": True,
            "started": True,
            "nats_connected": True,
            "owns_its_shards": True,
        }
        assert (await until(serve_port, "/readyz", 200))["nats_connected"] is True
        assert (await asyncio.to_thread(probe, worker_port, "/healthz"))[0] == 200
        metrics = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{worker_port}/metrics").read()
        )
        assert b"# TYPE" in metrics

        cluster.nats.kill()  # the broker is gone: not ready, still alive (a restart won't help)
        down = await until(worker_port, "/readyz", 503)
        assert down["nats_connected"] is False
        assert (await until(serve_port, "/readyz", 503))["nats_connected"] is False
        assert (await asyncio.to_thread(probe, worker_port, "/healthz"))[0] == 200
        assert (await asyncio.to_thread(probe, serve_port, "/healthz"))[0] == 200

        cluster.nats.start()
        await until(worker_port, "/readyz", 200)
        await until(serve_port, "/readyz", 200)

        # kill -USR1: the read service writes its state to its log (query.dump), here
        # after the restart: the connection back, a subscription for every read kind.
        serve.signal(signal.SIGUSR1)
        dump = await eventually(lambda: _after(serve.log_path.read_text(), "state:"))
        assert "gate: {'busy': 0, 'queued': 0" in dump
        assert "nats zeromem-read: connected=True" in dump
        subscriptions = [line for line in dump.splitlines() if line.startswith("subscription ")]
        kinds = {line.split()[1] for line in subscriptions}
        assert kinds == {"info", "get", "list", "owners", "archived", "recall", "stats"}, dump
        assert "task(s) at " in dump
        assert serve.alive
    finally:
        cluster.stop()


async def test_a_worker_whose_shards_are_leased_elsewhere_is_not_ready(
    tmp_path: Path, authority: Authority
) -> None:
    cluster = await Cluster(tmp_path / "cluster", authority).start()
    try:
        first, second = free_port(), free_port()
        holder = service(cluster, ["worker", "0", "1"], "worker", first, "w1.log")
        await until(first, "/readyz", 200)
        # the same index again (a pod replacing another during a rolling update)
        service(cluster, ["worker", "0", "1"], "worker", second, "w2.log")
        waiting = await until(second, "/readyz", 503)
        assert waiting["owns_its_shards"] is False and waiting["nats_connected"] is True
        holder.signal(signal.SIGTERM)  # the old one stops and releases its leases
        await until(second, "/readyz", 200)
    finally:
        cluster.stop()
