"""Redis CPU per append when every round of a shard carries one append: what a worker
sends Redis for a round (its read, its commit, then its tenant's applied position) through
``worker/coalesce.py``, the applied position sent alone after the commit (as before) or
with the next round's read (``Coalesced.later`` now).

    python bench/lone_rounds.py [--commands 3000] [--rounds 3]

No NATS and no worker process: the engine decides the append workload's puts
(bench/workloads.py) here, one per round, round after round, against a private
redis-server (append-only file on, as `zeromem up` runs it), a fresh one per variant, the
variants alternating round after round. Reported per append: the Redis main thread's CPU
(INFO cpu) and the reads Redis processed (a read per round trip). The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import cast

from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).parent))
from commit_breakdown import commands, private_redis

from zeromem.store.keys import redis_keys
from zeromem.worker.analysis import default_engine
from zeromem.worker.coalesce import Coalesced
from zeromem.worker.store import Store


async def run(puts: list, alone: bool) -> dict[str, float]:
    async with private_redis() as redis:
        engine = default_engine()
        coalesced = Coalesced(redis)
        store = Store(
            cast(Redis, coalesced),
            result_ttl_s=86_400,
            tombstone_ttl_s=86_400,
            result_records=1000,
        )
        before = await redis.info("cpu")
        reads = (await redis.info("stats"))["total_reads_processed"]
        shard = 3
        for sequence, put in enumerate(puts, 1):
            (state,), _ = await store.read([(put.tenant, put.key)], [], shard=shard)
            outcome = engine.decide(put, put.key, state, put.ts)
            outcome.sequence = sequence
            decision = store.decision(outcome, sequence, shard)
            await store.commit_decisions([decision], shard=shard, lease_token="")
            coalesced.later("SET", redis_keys(put.tenant).applied(shard), sequence)
            if alone:
                await coalesced.drain()
        await coalesced.drain()
        after = await redis.info("cpu")
        reads = (await redis.info("stats"))["total_reads_processed"] - reads
        cpu = sum(
            after[f] - before[f] for f in ("used_cpu_user_main_thread", "used_cpu_sys_main_thread")
        )
        return {"redis_us": cpu / len(puts) * 1e6, "round_trips": (reads - 2) / len(puts)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    puts = [put for shard_puts in commands(args.commands).values() for put in shard_puts]
    variants = {"applied position alone": True, "with the next round": False}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, alone in variants.items():
            runs[name].append(await run(puts, alone))
    print(f"Redis per append ({len(puts)} appends, one per round, medians of {args.rounds} rounds)")
    out = {}
    for name, results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        out[name] = {k: round(v, 2) for k, v in med.items()}
        each = ", ".join(f"{r['redis_us']:.0f}" for r in results)
        print(
            f"  {name:24} {med['redis_us']:6.1f} µs CPU   {med['round_trips']:.2f} round trips"
            f"   (rounds: {each})"
        )
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
