"""What shards cost while nothing is written: the headroom check of issue 17 (3).

    python bench/idle_shards.py [--shards 16 256] [--workers 2] [--seconds 20]

For each shard count, on a fresh embedded stack: ``--workers`` `zeromem worker` processes
in dynamic membership are started together; reported are the seconds until every shard's
lease is held and the shares have settled (start-up, imports included), then the CPU each
worker, nats-server and Redis spend over ``--seconds`` of idleness, as a percentage of one
core. Run it once with ZEROMEM_IDLE_PULL_S=0.5 in the environment to see the cost of a
fixed half-second pull (the behaviour before idle pulls grew). The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from zeromem.bus import connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.settings import Settings
from zeromem.store.keys import shard_lease_key

sys.path.insert(0, str(Path(__file__).parent))
from write_cost import CpuMeter
from write_throughput import running_workers, stack_settings


async def settled(settings: Settings, workers: int, limit_s: float = 120.0) -> None:
    """Until ``workers`` distinct holders hold every shard's lease, loads within one."""
    redis = connect_redis(settings)
    keys = [shard_lease_key(s) for s in range(settings.shards)]
    deadline = time.monotonic() + limit_s
    try:
        while True:
            held = Counter(t for t in await redis.mget(keys) if t)
            loads = held.values()
            if len(held) == workers and sum(loads) == len(keys) and max(loads) - min(loads) <= 1:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"not settled: {held}")
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()


async def measure(shards: int, workers: int, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp)) as stack:
        settings = stack_settings(stack, Settings(shards=shards))
        started = time.monotonic()
        async with running_workers(settings, workers, dynamic=True) as procs:
            await settled(settings, workers)
            startup = time.monotonic() - started
            await asyncio.sleep(3.0)  # past the start's own work (imports, first pulls)
            pids = {"nats-server": stack.nats.process.pid, "redis-server": stack.redis.process.pid}
            pids |= {f"worker-{i}": p.pid for i, p in enumerate(procs)}
            with CpuMeter(pids) as meter:
                await asyncio.sleep(seconds)
    row = {"shards": shards, "workers": workers, "startup_s": round(startup, 2)}
    for name, spent in meter.spent.items():
        if name != "publisher":
            row[f"{name}_cpu_pct"] = round(100 * spent / seconds, 2)
    worker_pct = [v for k, v in row.items() if k.startswith("worker-")]
    row["worker_cpu_pct_mean"] = round(sum(worker_pct) / len(worker_pct), 2)
    return row


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[16, 256])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    rows = []
    for shards in args.shards:
        row = await measure(shards, args.workers, args.seconds)
        print(
            f"{shards:4d} shards, {args.workers} workers: settled in {row['startup_s']:.1f} s; "
            f"idle CPU per worker {row['worker_cpu_pct_mean']:.2f}% of a core, "
            f"nats-server {row['nats-server_cpu_pct']:.2f}%, "
            f"redis {row['redis-server_cpu_pct']:.2f}%",
            flush=True,
        )
        rows.append(row)
    print(json.dumps(rows))


if __name__ == "__main__":
    asyncio.run(main())
