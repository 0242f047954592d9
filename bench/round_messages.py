"""What a paced shard's rounds send the broker: messages the workers publish per applied
append, by kind, at a fixed rate; a count, so it does not move with a shared machine's load.

    python bench/round_messages.py [--rate 300] [--seconds 6] [--rounds 3] [--base DIR]

One embedded stack (secured) and the workers for all 16 shards inside this process
(``InProcessServices``), every publish of theirs counted by subject: pull requests
(``$JS.API.CONSUMER.MSG.NEXT``), acknowledgements (``$JS.ACK``) and the rest (audit
records, change feed, replies). The append workload (bench/workloads.py) is published
through the SDK at ``--rate`` puts per second. Also reported: the time from each SDK call
to its event on the change feed, and CPU per append of this process (workers and SDK
together), nats-server and redis-server.

``--base DIR``: another tree of this repository (say ``git archive main | tar -x -C
DIR``); each round runs in a fresh process, this tree's and DIR's alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from workloads import appends, take
from write_cost import cpu_seconds
from write_throughput import paced_latency, percentile, stack_settings

from zeromem.embedded import EmbeddedStack
from zeromem.embedded.inprocess import InProcessServices
from zeromem.settings import Settings

HERE = Path(__file__).resolve().parent.parent


def kind_of(subject: str) -> str:
    if subject.startswith("$JS.API.CONSUMER.MSG.NEXT."):
        return "pull requests"
    if subject.startswith("$JS.ACK."):
        return "acks"
    return "other"


def count_publishes(nc: Any, counts: Counter[str]) -> None:
    publish = nc.publish

    async def counted(subject: str, *args: Any, **kwargs: Any) -> None:
        counts[kind_of(subject)] += 1
        await publish(subject, *args, **kwargs)

    nc.publish = counted


async def one_round(rate: float, seconds: float, seed: int, name: str) -> None:
    n = int(rate * seconds)
    specs = take(appends(n + 10, 100, seed=seed), n)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp), secure=True) as stack:
        assert stack.nats and stack.nats.process and stack.redis and stack.redis.process
        settings = stack_settings(stack, Settings(shards=16))
        services = await InProcessServices.start(settings, authority=stack.authority)
        try:
            counts: Counter[str] = Counter()
            for worker in services.workers:
                count_publishes(worker.nc, counts)
            await asyncio.sleep(1.0)  # past the start-up
            counts.clear()
            pids = {"nats": stack.nats.process.pid, "redis": stack.redis.process.pid}
            start = {k: cpu_seconds(pid) for k, pid in pids.items()}
            own = time.process_time()
            delays = await paced_latency(settings, specs, rate, f"rounds{seed}")
            own = (time.process_time() - own) / n * 1e6
            us = {k: (cpu_seconds(pid) - start[k]) / n * 1e6 for k, pid in pids.items()}
        finally:
            await services.stop()
    sent = "  ".join(f"{k} {counts[k] / n:.2f}" for k in ("pull requests", "acks", "other"))
    print(
        f"{name:4} at {rate:.0f}/s: p50 {percentile(delays, 0.5):6.1f} ms  p99 "
        f"{percentile(delays, 0.99):6.1f} | sent per append: {sent} | CPU µs/append: "
        f"workers+SDK {own:5.0f} nats {us['nats']:5.0f} redis {us['redis']:4.0f} | "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=300.0, help="puts per second")
    parser.add_argument("--seconds", type=float, default=6.0, help="of paced puts per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", type=Path, help="another tree of the repository (A/B)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a round in this process: its name
    args = parser.parse_args()
    if args.one:
        asyncio.run(one_round(args.rate, args.seconds, 31, args.one))
        return
    trees = {"this": HERE} | ({"base": args.base.resolve()} if args.base else {})
    for r in range(args.rounds):
        for name, tree in reversed(trees.items()) if r % 2 else trees.items():
            env = os.environ | {"PYTHONPATH": f"{tree / 'services'}:{tree / 'schemas'}"}
            own = ["--rate", str(args.rate), "--seconds", str(args.seconds), "--one", name]
            subprocess.run([sys.executable, __file__, *own], env=env, check=True)


if __name__ == "__main__":
    main()
