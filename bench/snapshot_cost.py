"""What a snapshot costs, and what a rebuild from one saves, at 100,000 memories.

    python bench/snapshot_cost.py [--memories 100000] [--owners 1000]

On a fresh embedded stack with two `zeromem worker` processes: the memories are written
(bench/workloads.py appends, through the SDK), then

- a writer puts one memory at a time and waits for it to be applied, 200 of them, first
  alone (the baseline) and then while `zeromem snapshot` runs: the latency of each write
  (p50, p99, max), so the pause the snapshot causes shows next to the same writes without
  it;
- the snapshot's own figures: its time split (fork and transfer, the scratch server's load
  and the dump, the object store), Redis's fork time (``latest_fork_usec``: the only moment
  Redis stops serving), the bytes of Redis's copy and of the snapshot as stored, next to
  Redis's ``used_memory``;
- `zeromem rebuild` from the snapshot next to the same rebuild replaying the whole log
  (``--whole-log``), after 1,000 more commands.

The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from zeromem.bus import connect_nats, connect_redis, shard_backlogs
from zeromem.embedded import EmbeddedStack
from zeromem.embedded.snapshot import take_snapshot
from zeromem.settings import Settings
from zeromem.worker.rebuild import rebuild

sys.path.insert(0, str(Path(__file__).parent))
from workloads import PutSpec, appends, take
from write_throughput import client, percentile, running_workers, stack_settings

TENANT = "bench-snapshot"


async def lone_writes(settings: Settings, n: int, tag: str) -> list[float]:
    """Latency (ms) of ``n`` puts, each waited for until applied, one after another."""
    out = []
    async with await client(settings, TENANT, batch=False) as memory:
        for i in range(n):
            start = time.perf_counter()
            await memory.put(
                f"user:lone:{tag}{i}", {"i": i}, content="a lone write", wait="applied"
            )
            out.append((time.perf_counter() - start) * 1000)
    return out


async def applied_all(settings: Settings, specs: list[PutSpec]) -> None:
    """Publish ``specs`` and wait until every shard's consumer has them all applied."""
    async with await client(settings, TENANT) as memory:
        for spec in specs:
            await memory.put(spec.key, spec.value, **spec.kwargs())
        await memory.flush(timeout=120)
    nc = await connect_nats(settings, "bench-drained")

    async def drained() -> bool:
        return not any((await shard_backlogs(nc.jetstream(), settings.shards)).values())

    try:
        await until(drained)
    finally:
        await nc.close()


async def until(condition) -> None:  # type: ignore[no-untyped-def]
    """Poll ``condition`` every 0.1 s until it holds (the workers report no event)."""
    while not await condition():  # noqa: ASYNC110
        await asyncio.sleep(0.1)


def latency(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 0.5), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
        "max_ms": round(max(values), 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=200)
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="zeromem-bench-snapshot-") as tmp:
        stack = EmbeddedStack(Path(tmp) / "stack").start()
        try:
            # Leases of 30 s: a replay of the whole log on a loaded machine lost its leases
            # to the workers at the default 10 s (LeaseLostError) in an earlier run.
            base = Settings().with_(data_dir=Path(tmp) / "data", worker={"lease_ttl_s": 30.0})
            settings = stack_settings(stack, base)
            async with running_workers(
                settings, 2, dynamic=True, env_extra={"ZEROMEM_LEASE_TTL_S": "30"}
            ):
                specs = take(appends(args.memories, args.owners), args.memories)
                began = time.perf_counter()
                await applied_all(settings, specs)
                rate = len(specs) / (time.perf_counter() - began)
                print(f"{args.memories} memories written at {rate:.0f}/s", flush=True)
                redis = connect_redis(settings)
                used = int((await redis.info("memory"))["used_memory"])

                alone = await lone_writes(settings, args.writes, "a")
                writer = asyncio.create_task(lone_writes(settings, args.writes, "b"))
                await asyncio.sleep(0.5)
                report = await take_snapshot(settings)
                during = await writer
                print(
                    f"snapshot: {report.keys} keys, {report.seconds:.2f}s "
                    f"(copy {report.copy_s:.2f}, read {report.read_s:.2f}, "
                    f"store {report.store_s:.2f}), fork {report.fork_ms:.1f} ms, "
                    f"Redis's copy {report.rdb_bytes} bytes, stored {report.stored_bytes}, "
                    f"Redis used_memory {used}",
                    flush=True,
                )
                print(f"lone writes alone: {latency(alone)}  during: {latency(during)}")

                # 1,000 more commands (new values of the first memories) after the snapshot
                await applied_all(settings, take(appends(1000, args.owners, seed=12), 1000))
                from_snapshot = await rebuild(settings, redis=redis)
                print(
                    f"rebuild from the snapshot: {from_snapshot.seconds:.2f}s "
                    f"({from_snapshot.commands} commands replayed, "
                    f"{from_snapshot.restored} keys restored)",
                    flush=True,
                )
                whole = await rebuild(settings, redis=redis, use_snapshot=False)
                print(
                    f"rebuild from the whole log: {whole.seconds:.2f}s ({whole.commands} commands)",
                    flush=True,
                )
                await redis.aclose()
        finally:
            stack.stop()
    print(
        json.dumps(
            {
                "memories": args.memories,
                "load_before": load,
                "write_rate": round(rate),
                "snapshot_s": round(report.seconds, 2),
                "copy_s": round(report.copy_s, 2),
                "read_s": round(report.read_s, 2),
                "store_s": round(report.store_s, 2),
                "fork_ms": report.fork_ms,
                "rdb_bytes": report.rdb_bytes,
                "stored_bytes": report.stored_bytes,
                "redis_used_memory": used,
                "lone_writes_alone": latency(alone),
                "lone_writes_during_snapshot": latency(during),
                "rebuild_from_snapshot_s": round(from_snapshot.seconds, 2),
                "rebuild_from_snapshot_commands": from_snapshot.commands,
                "rebuild_whole_log_s": round(whole.seconds, 2),
                "rebuild_whole_log_commands": whole.commands,
                "load_after": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
