"""Latency and CPU per append at a fixed, paced rate: what a round of a shard costs when
it carries one or two commands (the half-load regime of bench/write_throughput.py).

    python bench/paced_cost.py [--rate 300] [--seconds 6] [--rounds 3] [--shards 16]
                               [--burst 1] [--census] [--stages] [--base DIR]

One embedded stack (secured, as `zeromem up` runs it); per round, two fresh `zeromem
worker` processes (``--shards`` shards) apply the append workload (bench/workloads.py)
published through the SDK at ``--rate`` puts per second. Reported per round: the time
from each SDK call to its event on the change feed (p50, p90, p99), the CPU per append of
every process (workers, redis-server, nats-server, the publishing process: /proc and
``time.process_time``), and the reads Redis processed per append (INFO stats
``total_reads_processed``: one per round trip from a worker).

``--burst K``: the puts go K at a time at the same average rate, instead of evenly spaced;
the SDK sends a burst's puts to one shard as one message, so this sets what a message
costs apart from what a command does.

``--census``: the workers run on the standard asyncio loop, every callback it runs
counted by kind (``bench/census/sitecustomize.py``), and each round also prints what
woke the workers per append: the loop's turns, and the tasks and callbacks run, most
first. uvloop is faster, so CPU figures of a census round compare only with another's.

``--stages``: the workers time every command's three stages (``bench/stages/
sitecustomize.py``): publish to its arrival at the shard's feed, arrival to the call that
takes it, and that call; each round also prints their p50, p90 and p99 and the commands
a call carried. The timing costs the workers a little CPU.

``--base DIR``: an A/B in one run. DIR holds another tree of this repository (say
``git archive main | tar -x -C DIR``); its workers (PYTHONPATH DIR/services:DIR/schemas)
and this tree's alternate round after round, each on fresh workers, the same stack. The
publisher and the measuring are this tree's in both.
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

sys.path.insert(0, str(Path(__file__).parent))
from workloads import appends, take
from write_cost import CpuMeter
from write_throughput import paced_latency, percentile, running_workers, stack_settings

from zeromem.bus import connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.settings import Settings

HERE = Path(__file__).resolve().parent.parent
CENSUS = Path(__file__).resolve().parent / "census"
STAGES = Path(__file__).resolve().parent / "stages"


async def census(folder: Path, pids: list[int]) -> Counter[str]:
    """The workers' counts now (bench/census/sitecustomize.py), summed."""
    await asyncio.sleep(0.3)  # past the next write of every worker
    total: Counter[str] = Counter()
    for pid in pids:
        with (folder / f"{pid}.json").open() as counts:
            total.update(json.load(counts))
    return total


def stages(folder: Path, pids: list[int], since: float) -> None:
    """Print the stages of the commands published from ``since`` (a wall-clock time) on,
    as the workers timed them (bench/stages/sitecustomize.py)."""
    rows = []
    for pid in pids:
        path = folder / f"{pid}.jsonl"
        if path.exists():
            rows += [row for row in map(json.loads, path.open()) if row[0] >= since]
    if not rows:
        print("  stages: no command timed")
        return
    for name, spans in (
        ("publish to arrival", [row[1] - row[0] for row in rows]),
        ("arrival to call", [row[2] - row[1] for row in rows]),
        ("the call", [row[3] - row[2] for row in rows]),
    ):
        ms = [s * 1000 for s in spans]
        print(
            f"  {name:19} p50 {percentile(ms, 0.5):7.1f}  p90 {percentile(ms, 0.9):7.1f}"
            f"  p99 {percentile(ms, 0.99):7.1f} ms"
        )
    sizes = [row[4] for row in rows]
    mean = sum(sizes) / len(sizes)
    print(f"  commands per call  p50 {percentile(sizes, 0.5):5.0f}  mean {mean:5.1f}")
    calls = [row[5] for row in rows if len(row) > 5 and row[5]]
    if calls:  # a tree with worker/rounds.py: each command's round, by its calls
        mean = sum(calls) / len(calls)
        print(f"  calls in its round p50 {percentile(calls, 0.5):5.0f}  mean {mean:5.1f}")


async def redis_reads(settings: Settings) -> int:
    redis = connect_redis(settings)
    try:
        return int((await redis.info("stats"))["total_reads_processed"])
    finally:
        await redis.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=300.0, help="puts per second")
    parser.add_argument("--seconds", type=float, default=6.0, help="of paced puts per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", type=Path, help="another tree of the repository (A/B)")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--census", action="store_true", help="count what wakes the workers")
    parser.add_argument("--stages", action="store_true", help="time each command's stages")
    parser.add_argument(
        "--burst", type=int, default=1, help="puts issued together (1: evenly spaced)"
    )
    args = parser.parse_args()
    if args.census and args.stages:
        parser.error("--census and --stages each install hooks of their own: one at a time")
    trees = {"this": HERE} | ({"base": args.base.resolve()} if args.base else {})
    n = int(args.rate * args.seconds)
    total = n * args.rounds * len(trees)
    specs = take(appends(total + 10, 100, seed=31), total)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp), secure=True) as stack:
        assert stack.nats and stack.nats.process and stack.redis and stack.redis.process
        settings = stack_settings(stack, Settings(shards=args.shards))
        used = 0
        for r in range(args.rounds):
            for name, tree in reversed(trees.items()) if r % 2 else trees.items():
                path = f"{tree / 'services'}:{tree / 'schemas'}"
                env = (
                    {"PYTHONPATH": f"{CENSUS}:{path}", "ZEROMEM_CENSUS_DIR": tmp}
                    if args.census
                    else {"PYTHONPATH": f"{STAGES}:{path}", "ZEROMEM_STAGES_DIR": tmp}
                    if args.stages
                    else {"PYTHONPATH": path}
                )
                async with running_workers(settings, 2, env_extra=env) as ws:
                    await asyncio.sleep(1.0)  # past the workers' start-up
                    counted = await census(Path(tmp), [w.pid for w in ws]) if args.census else None
                    pids = {"nats": stack.nats.process.pid, "redis": stack.redis.process.pid}
                    pids |= {f"worker-{i}": w.pid for i, w in enumerate(ws)}
                    chunk = specs[used : used + n]
                    used += n
                    reads = await redis_reads(settings)
                    paced_from = time.time()
                    with CpuMeter(pids) as meter:
                        delays = await paced_latency(
                            settings, chunk, args.rate, f"paced{r}{name}", args.burst
                        )
                    reads = await redis_reads(settings) - reads
                    us = {k: v / n * 1e6 for k, v in meter.spent.items()}
                    workers = sum(v for k, v in us.items() if k.startswith("worker-"))
                    print(
                        f"round {r + 1} {name:4} at {args.rate:.0f}/s: p50 "
                        f"{percentile(delays, 0.5):6.1f} ms  p90 {percentile(delays, 0.9):6.1f}"
                        f"  p99 {percentile(delays, 0.99):6.1f} | CPU µs/append: workers "
                        f"{workers:5.0f} redis {us['redis']:4.0f} nats {us['nats']:4.0f} "
                        f"publisher {us['publisher']:4.0f} | Redis reads/append {reads / n:.2f}",
                        flush=True,
                    )
                    if args.stages:
                        await asyncio.sleep(0.5)  # past the workers' next write
                        stages(Path(tmp), [w.pid for w in ws], paced_from)
                    if counted is not None:
                        woke = await census(Path(tmp), [w.pid for w in ws]) - counted
                        print("  per append, on the workers' loops (standard asyncio):")
                        for kind, times in woke.most_common(16):
                            print(f"  {times / n:8.2f}  {kind}")


if __name__ == "__main__":
    asyncio.run(main())
