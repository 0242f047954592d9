"""Recall latency of another revision and of this tree, side by side in one run.

    python bench/recall_ab.py [--base REV] [--sizes 1000,10000] [--store 30000] [--queries 300]

``bench/recall_latency.py`` measures one tree, so a before/after comparison spans two runs
and whatever else the machine did in between (on a shared two-core machine, p50s moved
2-3x between runs). Here two embedded stacks run at once: one whose workers and read
service are ``--base`` (a git revision, extracted with ``git archive``), one this tree's.
Both get the same memories (the same seed); then the same query goes to both, query by
query, each side first every other query, so the machine's drifting load falls on both
alike. Each side's
raw NATS request-reply is measured in the same run too. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from recall_latency import load, percentile, query, raw_round_trips, start_services
from write_throughput import stack_settings

from zeromem.embedded import EmbeddedStack
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings

REPO = Path(__file__).resolve().parents[1]


def extract(rev: str, into: Path) -> Path:
    """The tree of ``rev`` under ``into``; returns the PYTHONPATH that imports it."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryFile() as raw:
        raw.write(archive)
        raw.seek(0)
        with tarfile.open(fileobj=raw) as tar:
            tar.extractall(into, filter="data")
    return into


@contextlib.contextmanager
def pythonpath(path: str | None):  # type: ignore[no-untyped-def]
    """The services started inside import ``path`` first (the other revision)."""
    before = os.environ.get("PYTHONPATH")
    if path is not None:
        os.environ["PYTHONPATH"] = path
    try:
        yield
    finally:
        if path is not None:
            if before is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = before


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD~1", help="the git revision to compare with")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--store", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        base_src = extract(args.base, tmp / "src")
        base_path = f"{base_src / 'services'}{os.pathsep}{base_src / 'schemas'}"
        sides = {"base": base_path, "tree": None}
        stacks = {
            side: stack.enter_context(EmbeddedStack(tmp / side, secure=True)) for side in sides
        }
        settings = {side: stack_settings(s, Settings()) for side, s in stacks.items()}
        procs = []
        try:
            clients = {}
            for side, path in sides.items():
                with pythonpath(path):
                    procs += await start_services(settings[side], 2)
                clients[side] = await MemoryClient.connect(
                    settings[side].nats_url,
                    tenant="bench",
                    agent="bench",
                    timeout=600,
                    settings=settings[side],
                )
                rng = random.Random(7)  # the same memories on both sides
                started = time.perf_counter()
                for size in sizes:
                    await load(clients[side], f"user:s{size}", size, rng)
                filler = max(0, args.store - sum(sizes)) // 1000
                for o in range(1000):
                    await load(clients[side], f"user:f{o}", filler, rng)
                print(f"{side}: loaded in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            raw = {side: await raw_round_trips(settings[side], args.queries) for side in sides}
            samples: dict[str, dict[int, list[float]]] = {s: {n: [] for n in sizes} for s in sides}
            rng = random.Random(11)
            for size in sizes:
                owners = [f"user:s{size}"]
                for _ in range(20):  # warm both
                    for client in clients.values():
                        await client.recall(query(rng), owners=owners)
                for i in range(args.queries):
                    q = query(rng)
                    # Each side goes first every other query: no side always follows the
                    # other's recall (and its after-reply bookkeeping) on the shared cores.
                    order = list(clients.items())
                    for side, client in order if i % 2 else reversed(order):
                        start = time.perf_counter()
                        await client.recall(q, owners=owners, k=5, budget=1500)
                        samples[side][size].append((time.perf_counter() - start) * 1000)
            for client in clients.values():
                await client.close()
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)

    result: dict[str, object] = {"base": args.base, "store": args.store}
    for side in sides:
        raw50 = percentile(raw[side], 50)
        print(f"{side:<5} raw NATS request-reply   p50 {raw50:6.2f} ms")
        result[f"{side}_raw_p50_ms"] = round(raw50, 3)
        for size in sizes:
            p50, p99 = percentile(samples[side][size], 50), percentile(samples[side][size], 99)
            print(
                f"{side:<5} recall {size:>7} in scope p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
                f"({p50 / raw50:.1f}x raw p50)"
            )
            result[f"{side}_{size}"] = {
                "p50_ms": round(p50, 3),
                "p99_ms": round(p99, 3),
                "p50_over_raw": round(p50 / raw50, 2),
            }
    for size in sizes:
        tree = percentile(samples["tree"][size], 50)
        base = percentile(samples["base"][size], 50)
        print(f"tree / base p50, {size} in scope: {tree / base:.2f}")
        result[f"tree_over_base_p50_{size}"] = round(tree / base, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
