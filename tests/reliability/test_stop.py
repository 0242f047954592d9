"""A worker stops promptly on SIGTERM whatever it is doing: retrying a poisoned batch, or
waiting on a Redis that does not answer (frozen with SIGSTOP)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable

import msgspec

from tests.reliability.cluster import Cluster
from tests.reliability.history import summarize
from zeromem import naming
from zeromem.bus import connect_nats
from zeromem.schemas import encode_batch

# SIGTERM to exit: the worker gives its shards a few seconds to finish what they hold,
# then goes regardless (Limits.stop_grace_s, 5 s by default).
STOP_BOUND_S = 8.0


def _poison(tenant: str, i: int) -> bytes:
    return msgspec.msgpack.encode(
        {
            "op": "patch",
            "id": f"p{i}",
            "tenant": tenant,
            "agent": "a",
            "ts": time.time(),
            "key": f"user:u{i}:k",
            "patch": {"a": 1, 2: 3},
        }
    )


def _put(tenant: str, i: int) -> bytes:
    return msgspec.msgpack.encode(
        {
            "op": "put",
            "id": f"w{i}",
            "tenant": tenant,
            "agent": "a",
            "ts": time.time(),
            "key": f"user:u{i}:k",
            "value": i,
        }
    )


async def _publish(
    cluster: Cluster, tenant: str, make: Callable[[str, int], bytes], count: int
) -> None:
    nc = await connect_nats(cluster.settings, "stop-test")  # the operator's: any subject
    try:
        js = nc.jetstream()
        for i in range(count):
            shard = naming.shard_for(tenant, f"user:u{i}", cluster.settings.shards)
            await js.publish(naming.command_subject(tenant, shard, "a"), make(tenant, i))
    finally:
        await nc.close()


def _seconds_to_exit(proc: subprocess.Popen[bytes]) -> float:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return float("inf")
    return time.monotonic() - started


async def test_sigterm_stops_a_worker_that_holds_poisoned_batches(
    cluster: Cluster, tenant: str
) -> None:
    (worker,) = await cluster.start_services(workers=1, serve=False)
    nc = await connect_nats(cluster.settings, "stop-test")
    try:  # 50,000 nils in one batch message: as many dead letters, once
        await nc.jetstream().publish(
            naming.command_subject(tenant, 0, "a"),
            encode_batch([b"\xc0"] * 50_000),
            headers={naming.BATCH_HEADER: "50000"},
        )
    finally:
        await nc.close()
    await _publish(cluster, tenant, _poison, 40)
    await asyncio.sleep(3.0)  # the worker is busy with them (or, once fixed, done)
    assert worker.process is not None
    took = _seconds_to_exit(worker.process)
    summarize(f"[reliability] stop on SIGTERM with poisoned batches: exited in {took:.2f}s")
    assert took < STOP_BOUND_S


async def test_sigterm_stops_a_worker_stuck_on_a_frozen_redis(
    cluster: Cluster, tenant: str
) -> None:
    (worker,) = await cluster.start_services(workers=1, serve=False)
    cluster.redis.signal(signal.SIGSTOP)
    try:
        await _publish(cluster, tenant, _put, 40)
        await asyncio.sleep(1.0)  # every shard with a command waits on Redis
        assert worker.process is not None
        took = _seconds_to_exit(worker.process)
    finally:
        cluster.redis.signal(signal.SIGCONT)
    summarize(f"[reliability] stop on SIGTERM with Redis frozen: exited in {took:.2f}s")
    assert took < STOP_BOUND_S
