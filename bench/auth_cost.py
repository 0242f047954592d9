"""What authentication costs: the write and recall benchmarks with it on and off, in one run.

    python bench/auth_cost.py [--commands 20000] [--memories 2000] [--queries 300] [--rounds 3]

Two embedded stacks run side by side, one secured as `zeromem up` runs it (every
connection authenticated with a signed credential, per-agent permissions checked by the
server on every message, Redis ACL users) and one open. Round after round, on each:

- writes: the raw JetStream publish rate (one process, plain stream: the baseline), then
  fire-and-forget SDK puts applied end to end by two `zeromem worker` processes
  (the append workload of bench/workloads.py);
- recall: raw NATS request-reply round trips (the baseline), then recalls over
  ``--memories`` memories in scope answered by `zeromem serve`.

It prints each figure next to its raw baseline, and the secured/open ratios. The last line
is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from recall_latency import load, percentile, query, raw_round_trips, start_services
from workloads import appends, take
from write_throughput import raw_publish_rate, sample_payload, stack_settings, zeromem_rate

from zeromem.embedded import EmbeddedStack
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings


async def recall_latencies(
    modes: dict[str, Settings], owner: str, queries: int, rng: random.Random
) -> dict[str, list[float]]:
    """Recall round trips on every stack, interleaved query by query (the same query on
    each), so the machine's drifting load falls on both alike."""
    import time

    clients = {
        mode: await MemoryClient.connect(
            settings.bus.nats_url, tenant="bench", agent="bench", timeout=30, settings=settings
        )
        for mode, settings in modes.items()
    }
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        for _ in range(20):  # warm the services
            for client in clients.values():
                await client.recall(query(rng), owners=[owner])
        for _ in range(queries):
            q = query(rng)
            for mode, client in clients.items():
                started = time.perf_counter()
                await client.recall(q, owners=[owner], k=5, budget=1500)
                samples[mode].append((time.perf_counter() - started) * 1000)
    finally:
        for client in clients.values():
            await client.close()
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=20_000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--memories", type=int, default=2_000, help="in recall's scope")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(13)
    specs = take(appends(args.commands, args.owners), args.commands)
    payload = sample_payload(specs)
    rounds: list[dict[str, float]] = []

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stacks:
        modes = {}
        procs = []
        for mode, secure in (("on", True), ("off", False)):
            stack = stacks.enter_context(EmbeddedStack(Path(tmp) / mode, secure=secure))
            settings = stack_settings(stack, Settings(shards=16))
            procs += await start_services(settings, workers=2)
            async with await MemoryClient.connect(
                settings.bus.nats_url, tenant="bench", agent="bench", timeout=30, settings=settings
            ) as client:
                await load(client, "user:recall", args.memories, random.Random(7))
            modes[mode] = settings
        try:
            for r in range(args.rounds):
                row: dict[str, float] = {}
                # which stack goes first alternates from round to round
                order = list(modes.items()) if r % 2 == 0 else list(modes.items())[::-1]
                for mode, settings in order:
                    row[f"raw_{mode}"] = await raw_publish_rate(settings, args.commands, payload)
                    row[f"applied_{mode}"], _ = await zeromem_rate(
                        settings, specs, batch=True, tenant=f"w{r}"
                    )
                    rtt = await raw_round_trips(settings, args.queries)
                    row[f"rtt_p50_{mode}"] = percentile(rtt, 50)
                samples = await recall_latencies(modes, "user:recall", args.queries, rng)
                for mode, measured in samples.items():
                    row[f"recall_p50_{mode}"] = percentile(measured, 50)
                    row[f"recall_p99_{mode}"] = percentile(measured, 99)
                rounds.append(row)
                print(
                    f"round {r + 1}: applied on/off {row['applied_on']:.0f}/"
                    f"{row['applied_off']:.0f} cmd/s (raw {row['raw_on']:.0f}/"
                    f"{row['raw_off']:.0f} msg/s); recall p50 on/off "
                    f"{row['recall_p50_on']:.2f}/{row['recall_p50_off']:.2f} ms",
                    flush=True,
                )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)

    def median(field: str) -> float:
        return statistics.median(r[field] for r in rounds)

    m = {field: median(field) for field in rounds[0]}
    out = {
        "commands": args.commands,
        "memories_in_scope": args.memories,
        "rounds": args.rounds,
        **{k: round(v, 3) for k, v in m.items()},
        "write_ratio_to_raw_on": round(m["applied_on"] / m["raw_on"], 3),
        "write_ratio_to_raw_off": round(m["applied_off"] / m["raw_off"], 3),
        "write_on_over_off": round(m["applied_on"] / m["applied_off"], 3),
        "raw_publish_on_over_off": round(m["raw_on"] / m["raw_off"], 3),
        "recall_p50_over_raw_on": round(m["recall_p50_on"] / m["rtt_p50_on"], 3),
        "recall_p50_over_raw_off": round(m["recall_p50_off"] / m["rtt_p50_off"], 3),
        "recall_p50_on_over_off": round(m["recall_p50_on"] / m["recall_p50_off"], 3),
        "recall_p99_on_over_off": round(m["recall_p99_on"] / m["recall_p99_off"], 3),
    }
    print(f"medians of {args.rounds} rounds")
    for mode in ("on", "off"):
        print(
            f"auth {mode:3}  raw publish {m[f'raw_{mode}']:8.0f} msg/s   applied "
            f"{m[f'applied_{mode}']:8.0f} cmd/s "
            f"(ratio to raw {out[f'write_ratio_to_raw_{mode}']:.2f})"
            f"   raw rtt p50 {m[f'rtt_p50_{mode}']:.2f} ms   recall p50 "
            f"{m[f'recall_p50_{mode}']:.2f} ms p99 {m[f'recall_p99_{mode}']:.2f} ms"
        )
    print(
        f"secured / open: writes {out['write_on_over_off']:.2f}, raw publish "
        f"{out['raw_publish_on_over_off']:.2f}, recall p50 {out['recall_p50_on_over_off']:.2f}, "
        f"p99 {out['recall_p99_on_over_off']:.2f}"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
