"""End-to-end write throughput next to the raw JetStream publish rate, in one run.

    python bench/write_throughput.py [--commands 30000] [--owners 100] [--workers 2] [--rounds 3]

1. Raw baseline: one Python process publishes N messages of the same size as a put
   command with nats-py's JetStream async publish, to a plain stream, and waits for every
   ack. That is the most a single publisher can push into JetStream here.
2. zeromem: the same process publishes N fire-and-forget puts through the SDK across the
   owners, while `zeromem worker` processes apply them to Redis with the version check and
   every index; the clock stops when the change feed has reported the last one applied
   (then every memory's version is checked in Redis). The SDK sends back-to-back
   fire-and-forget writes to one shard as batch messages (zeromem.sdk.batching), as any
   agent using it does; the same run repeats with batching off (`batch=False`: one
   message per command) and reports that too.

Both run against embedded servers started for this run, secured as `zeromem up` runs them
(`--no-auth`: open servers; bench/auth_cost.py compares the two). The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from nats.js.api import StreamConfig

from zeromem import naming
from zeromem.auth.credentials import local_authority
from zeromem.bus import connect_nats, connect_redis, provision
from zeromem.embedded import EmbeddedStack
from zeromem.embedded.stack import settings_for_role
from zeromem.schemas import Put, encode
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import RedisKeys, shard_lease_key

CONTENT = "moved the meeting to Friday 10:00"  # every benchmark put's summary


def sample_value(i: int) -> dict[str, object]:
    return {"turn": i, "note": "user asked to move the meeting to Friday 10:00"}


async def raw_publish_rate(settings: Settings, n: int, payload: bytes) -> float:
    nc = await connect_nats(settings, "bench-raw")  # the operator's identity, on a secured stack
    js = nc.jetstream(publish_async_max_pending=4000)
    # A fresh stream each round.
    await js.add_stream(StreamConfig(name="BENCH_RAW", subjects=["bench.raw.>"]))
    start = time.perf_counter()
    for i in range(n):
        await js.publish_async(f"bench.raw.{i % 16}", payload, headers={"Nats-Msg-Id": f"r{i}"})
    await js.publish_async_completed()
    elapsed = time.perf_counter() - start
    await js.delete_stream("BENCH_RAW")
    await nc.close()
    return n / elapsed


def sample_payload() -> bytes:
    """An encoded put like the ones the benchmarks publish: the raw baseline's message."""
    return encode(
        Put(
            id="01JBENCHMARK0000000000000",
            tenant="bench",
            agent="bench",
            ts=time.time(),
            key="user:o1:turn",
            value=sample_value(1),
            content=CONTENT,
            type="message",
        )
    )


@contextlib.asynccontextmanager
async def running_workers(
    settings: Settings, count: int
) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    """The streams provisioned and ``count`` `zeromem worker` processes splitting the
    shards, every lease taken; stopped on exit."""
    nc = await connect_nats(settings, "bench-provision")
    await provision(nc.jetstream(), settings)
    await nc.close()
    as_worker = settings_for_role(
        settings, local_authority(settings) if settings.auth_dir else None, "worker"
    )
    env = dict(
        os.environ,
        ZEROMEM_NATS_URL=settings.nats_url,
        ZEROMEM_NATS_CREDS=as_worker.nats_creds,
        ZEROMEM_REDIS_URL=as_worker.redis_url,
        ZEROMEM_SHARDS=str(settings.shards),
        # encryption at rest as the stack has it (stack_settings: its master key)
        ZEROMEM_MASTER_KEY=settings.master_key,
        ZEROMEM_ENCRYPT_TENANTS=settings.encrypt_tenants,
    )
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "zeromem.cli.main",
                "worker",
                "--index",
                str(i),
                "--count",
                str(count),
            ],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        for i in range(count)
    ]
    try:
        await wait_for_workers(settings)
        yield workers
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(10)


def stack_settings(stack: EmbeddedStack, base: Settings) -> Settings:
    """``base`` on ``stack``, as its operator (admin) when the stack is secured."""
    if stack.authority is None:
        return base.with_urls(stack.nats_url, stack.redis_url)
    return stack.settings_for(replace(base, auth_dir=str(stack.authority.directory)), "admin")


async def wait_for_workers(settings: Settings, timeout: float = 60.0) -> None:
    """Until every shard's lease is held: the workers are up and consuming. A fixed sleep
    either wasted time or, on a busy machine, started the clock before the workers had
    even imported, which charged their start-up to zeromem's rate."""
    redis = connect_redis(settings)
    try:
        deadline = time.monotonic() + timeout
        keys = [shard_lease_key(shard) for shard in range(settings.shards)]
        while await redis.exists(*keys) < len(keys):
            if time.monotonic() > deadline:
                raise TimeoutError("the workers did not take every shard's lease")
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()
    await asyncio.sleep(0.2)  # the lease is taken just before the shard's consumer is bound


async def zeromem_rate(
    settings: Settings, n: int, owners: int, batch: bool, tenant: str
) -> tuple[float, float]:
    per_owner = n // owners
    total = per_owner * owners
    applied = 0
    done = asyncio.Event()

    async def on_change(msg) -> None:  # type: ignore[no-untyped-def]
        # Counted from the change feed's headers, without decoding: polling the broker or
        # Redis for progress would take CPU from the system being measured.
        nonlocal applied
        headers = msg.headers
        applied += int(headers[naming.BATCH_HEADER]) if headers else 1
        if applied >= total:
            done.set()

    observer = await connect_nats(settings, "bench-observer")  # agents may not watch core subjects
    async with await MemoryClient.connect(
        settings.nats_url,
        tenant=tenant,
        agent="bench",
        shards=settings.shards,
        batch=batch,
        settings=settings,
    ) as client:
        sub = await observer.subscribe(naming.change_watch_subject(tenant), cb=on_change)
        await observer.flush()
        start = time.perf_counter()
        for i in range(total):
            await client.put(
                f"user:o{i % owners}:turn",
                sample_value(i // owners),
                content=CONTENT,
                type="message",
            )
        await client.flush(timeout=120)
        published = time.perf_counter() - start
        await asyncio.wait_for(done.wait(), 300)
        elapsed = time.perf_counter() - start
        await sub.unsubscribe()
    await observer.close()
    redis = connect_redis(settings)
    try:
        keys = RedisKeys(tenant)
        versions = [await redis.hget(keys.item(f"user:o{o}:turn"), "v") for o in range(owners)]
    finally:
        await redis.aclose()
    assert all(int(v) == per_owner for v in versions), "not every command was applied"
    return total / elapsed, total / published


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=30_000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="baseline/zeromem pairs; medians")
    parser.add_argument("--no-auth", action="store_true", help="open servers (no credentials)")
    args = parser.parse_args()

    rounds: list[dict[str, float]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedStack(Path(tmp), secure=not args.no_auth) as stack,
    ):
        settings = stack_settings(stack, Settings(shards=args.shards))
        payload = sample_payload()
        async with running_workers(settings, args.workers):
            # Baseline and zeromem alternate, round after round: on a shared machine the
            # load drifts, and each ratio compares runs made seconds apart.
            for r in range(args.rounds):
                raw = await raw_publish_rate(settings, args.commands, payload)
                applied, published = await zeromem_rate(
                    settings, args.commands, args.owners, batch=True, tenant=f"bench{r}"
                )
                unbatched, _ = await zeromem_rate(
                    settings, args.commands, args.owners, batch=False, tenant=f"bench{r}-unbatched"
                )
                rounds.append(
                    {
                        "raw": raw,
                        "applied": applied,
                        "published": published,
                        "unbatched": unbatched,
                        "ratio": applied / raw,
                    }
                )
                print(
                    f"round {r + 1}: raw {raw:8.0f} msg/s   applied {applied:8.0f} cmd/s   "
                    f"ratio {applied / raw:.2f}   (unbatched {unbatched / raw:.2f})"
                )

    def median(field: str) -> float:
        return statistics.median(r[field] for r in rounds)

    raw, applied, published, unbatched = (
        median(f) for f in ("raw", "applied", "published", "unbatched")
    )
    ratio = median("ratio")
    print(
        f"commands                      {args.commands} across {args.owners} owners, "
        f"{args.workers} worker process(es), {args.shards} shards; median of {args.rounds} rounds"
    )
    print(f"raw JetStream async publish   {raw:10.0f} msg/s   (baseline, one Python process)")
    print(f"zeromem SDK publish           {published:10.0f} cmd/s")
    print(f"zeromem applied end to end    {applied:10.0f} cmd/s   ratio to raw {ratio:.2f}")
    print(
        f"  with SDK batching off       {unbatched:10.0f} cmd/s   ratio to raw "
        f"{median('unbatched') / raw:.2f}"
    )
    print(
        json.dumps(
            {
                "commands": args.commands,
                "owners": args.owners,
                "workers": args.workers,
                "rounds": args.rounds,
                "raw_publish_per_s": round(raw),
                "sdk_publish_per_s": round(published),
                "applied_per_s": round(applied),
                "ratio": round(ratio, 3),
                "ratios": [round(r["ratio"], 3) for r in rounds],
                "unbatched_applied_per_s": round(unbatched),
                "unbatched_ratio": round(unbatched / raw, 3),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
