"""Appends applied/s on a Redis Cluster of one master against two, in one run (issue 17,
docs/scaling.md's check of the sizing model).

    python bench/redis_masters.py [--commands 20000] [--owners 100] [--workers 2] [--rounds 3]

Two stacks, started side by side: each its own nats-server and a Redis Cluster formed by
the project's launcher (zeromem.embedded.redis_cluster), one with one master, one with
two; both use the cluster key layout, so the only difference is the number of masters.
Round after round, alternating, `--workers` `zeromem worker` processes are started on one
stack, the SDK publishes `--commands` fire-and-forget appends (bench/workloads.py, as
bench/write_throughput.py does), the clock stops when the change feed reports the last one
applied, and the workers are stopped. Measured: appends applied/s, and the CPU the
redis-server processes spent per append (from /proc), with the share the busiest master
took. The ratio two masters / one is per round; the summary gives medians. The last line
is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

from redis.crc import key_slot

sys.path.insert(0, str(Path(__file__).parent))
from workloads import appends, take
from write_cost import CpuMeter
from write_throughput import running_workers, stack_settings, zeromem_rate

from zeromem.embedded import EmbeddedStack
from zeromem.settings import Settings
from zeromem.store.keys import SLOTS, Layout


def shards_per_master(masters: int, shards: int) -> list[int]:
    """How many shards' slots each master serves (the launcher splits the slots evenly)."""
    layout = Layout(cluster=True, shards=shards)
    per = SLOTS // masters
    counts = [0] * masters
    for shard in range(shards):
        counts[min(key_slot(layout.tag(shard).encode()) // per, masters - 1)] += 1
    return counts


async def one_round(
    stack: EmbeddedStack, settings: Settings, args: argparse.Namespace, tenant: str
) -> dict[str, float]:
    specs = take(appends(args.commands, args.owners, seed=hash(tenant) & 0xFFFF), args.commands)
    assert stack.redis_cluster is not None
    pids = {
        f"master-{i}": node.process.pid
        for i, node in enumerate(stack.redis_cluster.nodes)
        if node.process is not None
    }
    async with running_workers(settings, args.workers):
        with CpuMeter(pids) as meter:
            rate, _ = await zeromem_rate(settings, specs, batch=True, tenant=tenant)
    redis_cpu = [meter.spent[name] for name in pids]
    return {
        "rate": rate,
        "redis_us": sum(redis_cpu) / len(specs) * 1e6,
        "busiest_share": max(redis_cpu) / sum(redis_cpu),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=20_000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Settings(shards=args.shards)
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with (
        tempfile.TemporaryDirectory() as one_dir,
        tempfile.TemporaryDirectory() as two_dir,
        EmbeddedStack(Path(one_dir), redis_masters=1) as one,
        EmbeddedStack(Path(two_dir), redis_masters=2) as two,
    ):
        stacks = {1: (one, stack_settings(one, base)), 2: (two, stack_settings(two, base))}
        for r in range(args.rounds):
            for masters in (1, 2) if r % 2 == 0 else (2, 1):
                stack, settings = stacks[masters]
                got = await one_round(stack, settings, args, f"m{masters}r{r}")
                results[masters].append(got)
                print(
                    f"round {r + 1}, {masters} master(s): {got['rate']:7.0f} appends/s, "
                    f"Redis {got['redis_us']:.0f} µs/append, busiest master "
                    f"{got['busiest_share']:.0%} of Redis CPU"
                )
    ratios = [b["rate"] / a["rate"] for a, b in zip(results[1], results[2], strict=True)]
    summary = {
        "commands": args.commands,
        "workers": args.workers,
        "shards": args.shards,
        "shards_per_master_of_two": shards_per_master(2, args.shards),
        "one_master_rate": statistics.median(x["rate"] for x in results[1]),
        "two_masters_rate": statistics.median(x["rate"] for x in results[2]),
        "ratio_per_round": [round(x, 3) for x in ratios],
        "ratio": round(statistics.median(ratios), 3),
        "redis_us_one": round(statistics.median(x["redis_us"] for x in results[1]), 1),
        "redis_us_two": round(statistics.median(x["redis_us"] for x in results[2]), 1),
        "busiest_share_two": round(statistics.median(x["busiest_share"] for x in results[2]), 3),
    }
    print(
        f"\n{args.commands} appends, {args.workers} worker processes, {args.shards} shards "
        f"(on two masters: {summary['shards_per_master_of_two']} shards each); medians of "
        f"{args.rounds} rounds"
    )
    print(
        f"one master  {summary['one_master_rate']:7.0f} appends/s   two masters "
        f"{summary['two_masters_rate']:7.0f} appends/s   ratio {summary['ratio']:.2f}"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
