"""End-to-end write throughput and latency next to the raw JetStream publish rate, in one run.

    python bench/write_throughput.py [--commands 30000] [--owners 100] [--workers 2] [--rounds 3]

The workload leads: appends, what agents mostly write (bench/workloads.py: a new key and
new content every time, 10-40 words from a Zipf-like vocabulary, tags, mixed types, some
references and TTLs). The rewrite workload (the same keys with identical content, the
worker's fast path) is measured beside it, never instead of it.

1. Raw baseline: one Python process publishes N messages of the size of a median append
   command with nats-py's JetStream async publish, to a plain stream, and waits for every
   ack. That is the most a single publisher can push into JetStream here.
2. zeromem: the same process publishes N fire-and-forget puts through the SDK, while
   `zeromem worker` processes apply them to Redis with the version check and every index;
   the clock stops when the change feed has reported the last one applied (then every
   memory's version is checked in Redis). The SDK sends back-to-back fire-and-forget
   writes to one shard as batch messages (zeromem.sdk.batching), as any agent using it
   does; the append run repeats with batching off (one message per command) too.
3. Latency: appends paced at half the measured append rate, then at a low rate (lone
   writes), each timed from the SDK call to the change feed's event for that key; then
   at half the rate again, with every 20th append read back at once by its own client,
   with read-your-writes on (the read waits for the write to be applied) and off (it
   may miss it): the read's latency and how many reads missed.

Baseline and zeromem alternate round after round: the machine's load drifts, and each
ratio compares runs made seconds apart. Both run against embedded servers started for
this run, secured as `zeromem up` runs them (`--no-auth`: open servers; bench/auth_cost.py
compares the two). The last line is JSON.
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
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from nats.js.api import StreamConfig

sys.path.insert(0, str(Path(__file__).parent))
from workloads import PutSpec, appends, rewrites, take

from zeromem import naming
from zeromem.auth.credentials import local_authority
from zeromem.bus import connect_nats, connect_redis, provision
from zeromem.embedded import EmbeddedStack
from zeromem.embedded.stack import settings_for_role
from zeromem.schemas import Put, decode_results, encode
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import RedisKeys, shard_lease_key


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


def encoded(spec: PutSpec) -> bytes:
    return encode(
        Put(
            id="01JBENCHMARK0000000000000",
            tenant="bench",
            agent="bench",
            ts=time.time(),
            key=spec.key,
            value=spec.value,
            content=spec.content,
            type=spec.type,
            tags=spec.tags,
            references=spec.references,
            ttl_s=spec.ttl,
        )
    )


def sample_payload(specs: Sequence[PutSpec]) -> bytes:
    """The raw baseline's message: an encoded put of the workload's median size."""
    sizes = sorted((encoded(s) for s in specs[:2000]), key=len)
    return sizes[len(sizes) // 2]


def role_env(settings: Settings, role: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a service process of ``role`` on the benchmark's stack."""
    as_role = settings_for_role(
        settings, local_authority(settings) if settings.auth_dir else None, role
    )
    return dict(
        os.environ,
        ZEROMEM_NATS_URL=settings.bus.nats_url,
        ZEROMEM_NATS_CREDS=as_role.bus.nats_creds,
        ZEROMEM_REDIS_URL=as_role.store.redis_url,
        ZEROMEM_SHARDS=str(settings.shards),
        # encryption at rest as the stack has it (stack_settings: its master key)
        ZEROMEM_MASTER_KEY=settings.lifecycle.master_key,
        ZEROMEM_ENCRYPT_TENANTS=settings.lifecycle.encrypt_tenants,
        **(extra or {}),
    )


async def start_reader(
    settings: Settings, extra: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A `zeromem serve` process (the reads, with ``extra`` variables), once it answers."""
    reader = subprocess.Popen(
        [sys.executable, "-m", "zeromem.cli.main", "serve"],
        env=role_env(settings, "reader", extra),
        stderr=subprocess.DEVNULL,
    )
    async with await client(settings, "bench-probe") as probe:
        for _ in range(300):
            try:
                await probe.get("user:probe:x")
                break
            except Exception:
                await asyncio.sleep(0.1)
    return reader


@contextlib.asynccontextmanager
async def running_reader(settings: Settings) -> AsyncIterator[subprocess.Popen[bytes]]:
    """A `zeromem serve` process (the reads), answering; stopped on exit."""
    reader = await start_reader(settings)
    try:
        yield reader
    finally:
        reader.terminate()
        reader.wait(10)


@contextlib.asynccontextmanager
async def running_workers(
    settings: Settings,
    count: int,
    *,
    dynamic: bool = False,
    env_extra: dict[str, str] | None = None,
) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    """The streams provisioned and ``count`` `zeromem worker` processes splitting the
    shards (each ``--index I --count N``, or with ``dynamic`` in dynamic membership),
    every lease taken; stopped on exit."""
    nc = await connect_nats(settings, "bench-provision")
    await provision(nc.jetstream(), settings)
    await nc.close()
    env = role_env(settings, "worker", env_extra)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "zeromem.cli.main",
                "worker",
                *([] if dynamic else ["--index", str(i), "--count", str(count)]),
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
    return stack.settings_for(base.with_(auth_dir=str(stack.authority.directory)), "admin")


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


def client(  # type: ignore[no-untyped-def]
    settings: Settings,
    tenant: str,
    batch: bool = True,
    read_your_writes: bool = True,
    pace_writes: bool = True,
):
    return MemoryClient.connect(
        settings.bus.nats_url,
        tenant=tenant,
        agent="bench",
        shards=settings.shards,
        batch=batch,
        settings=settings,
        read_your_writes=read_your_writes,
        pace_writes=pace_writes,
    )


async def check_applied(settings: Settings, tenant: str, specs: Sequence[PutSpec]) -> None:
    """Every key holds the version its puts should have given it."""
    expected = Counter(spec.key for spec in specs)
    keys = RedisKeys(tenant)
    redis = connect_redis(settings)
    try:
        pipe = redis.pipeline(transaction=False)
        for key in expected:
            pipe.hget(keys.item(key), "v")
        versions = await pipe.execute()
    finally:
        await redis.aclose()
    wrong = [k for k, v in zip(expected, versions, strict=True) if int(v or 0) != expected[k]]
    assert not wrong, f"{len(wrong)} memories not applied as published, e.g. {wrong[:3]}"


async def zeromem_rate(
    settings: Settings, specs: Sequence[PutSpec], batch: bool, tenant: str
) -> tuple[float, float]:
    """(applied/s, published/s) of fire-and-forget puts, from the first call to the last
    change on the feed."""
    total = len(specs)
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
    async with await client(settings, tenant, batch) as memory:
        sub = await observer.subscribe(naming.change_watch_subject(tenant), cb=on_change)
        await observer.flush()
        start = time.perf_counter()
        for spec in specs:
            await memory.put(spec.key, spec.value, **spec.kwargs())
        await memory.flush(timeout=120)
        published = time.perf_counter() - start
        await asyncio.wait_for(done.wait(), 300)
        elapsed = time.perf_counter() - start
        await sub.unsubscribe()
    await observer.close()
    await check_applied(settings, tenant, specs)
    return total / elapsed, total / published


async def paced_latency(
    settings: Settings, specs: Sequence[PutSpec], rate: float, tenant: str, burst: int = 1
) -> list[float]:
    """Milliseconds from each put's SDK call to its event on the change feed, with the
    puts paced at ``rate`` per second, ``burst`` at a time (1: evenly spaced, as puts
    from many agents come; more: a burst every ``burst / rate`` seconds, whose puts to one
    shard the SDK sends as one message)."""
    sent: dict[str, float] = {}
    delays: list[float] = []
    done = asyncio.Event()

    async def on_change(msg) -> None:  # type: ignore[no-untyped-def]
        now = time.perf_counter()
        batched = bool(msg.headers and naming.BATCH_HEADER in msg.headers)
        for result in decode_results(msg.data, batched):
            start = sent.pop(result.key, None)
            if start is not None:
                delays.append((now - start) * 1000)
        if len(delays) >= len(specs):
            done.set()

    observer = await connect_nats(settings, "bench-observer")
    async with await client(settings, tenant) as memory:
        sub = await observer.subscribe(naming.change_watch_subject(tenant), cb=on_change)
        await observer.flush()
        start = time.perf_counter()
        for i, spec in enumerate(specs):
            due = start + (i - i % burst) / rate
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            sent[spec.key] = time.perf_counter()
            await memory.put(spec.key, spec.value, **spec.kwargs())
        await memory.flush(timeout=120)
        await asyncio.wait_for(done.wait(), 120)
        await sub.unsubscribe()
    await observer.close()
    return delays


async def own_reads(
    settings: Settings,
    specs: Sequence[PutSpec],
    rate: float,
    tenant: str,
    read_your_writes: bool,
    every: int = 20,
) -> tuple[list[float], int, float]:
    """Appends paced at ``rate``, every ``every``-th read back at once by the client that
    wrote it: (milliseconds per read, reads that did not find the write, the rate the puts
    went at). Each read runs beside the puts: a read that held the pacing loop would slow
    the puts down to what the stack keeps up with (seen: a read of about 25 ms every 20
    puts held puts "at 1,351/s" to at most 800/s)."""
    latencies: list[float] = []
    missed = 0

    async def read_back(memory: MemoryClient, key: str) -> None:
        nonlocal missed
        began = time.perf_counter()
        item = await memory.get(key)
        latencies.append((time.perf_counter() - began) * 1000)
        missed += item is None

    async with await client(settings, tenant, read_your_writes=read_your_writes) as memory:
        reads = []
        start = time.perf_counter()
        for i, spec in enumerate(specs):
            due = start + i / rate
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            await memory.put(spec.key, spec.value, **spec.kwargs())
            if i % every == 0:
                reads.append(asyncio.create_task(read_back(memory, spec.key)))
        achieved = len(specs) / (time.perf_counter() - start)
        await asyncio.gather(*reads)
        await memory.flush(timeout=120)
    return latencies, missed, achieved


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=30_000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="baseline/zeromem sets; medians")
    parser.add_argument("--latency-s", type=float, default=8.0, help="seconds of paced appends")
    parser.add_argument("--no-auth", action="store_true", help="open servers (no credentials)")
    args = parser.parse_args()

    append_specs = take(appends(args.commands, args.owners), args.commands)
    rewrite_specs = take(rewrites(args.commands, args.owners), args.commands)
    rounds: list[dict[str, float]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedStack(Path(tmp), secure=not args.no_auth) as stack,
    ):
        settings = stack_settings(stack, Settings(shards=args.shards))
        payload = sample_payload(append_specs)
        async with running_workers(settings, args.workers):
            for r in range(args.rounds):
                raw = await raw_publish_rate(settings, args.commands, payload)
                append, published = await zeromem_rate(
                    settings, append_specs, batch=True, tenant=f"append{r}"
                )
                rewrite, _ = await zeromem_rate(
                    settings, rewrite_specs, batch=True, tenant=f"rewrite{r}"
                )
                unbatched, _ = await zeromem_rate(
                    settings, append_specs, batch=False, tenant=f"unbatched{r}"
                )
                rounds.append(
                    {
                        "raw": raw,
                        "append": append,
                        "published": published,
                        "rewrite": rewrite,
                        "unbatched": unbatched,
                    }
                )
                print(
                    f"round {r + 1}: raw {raw:7.0f} msg/s   append {append:7.0f} cmd/s "
                    f"({append / raw:.2f})   rewrite {rewrite / raw:.2f}   "
                    f"unbatched append {unbatched / raw:.2f}"
                )

            def median(name: str) -> float:
                return statistics.median(r[name] for r in rounds)

            def ratio(name: str) -> float:
                return statistics.median(r[name] / r["raw"] for r in rounds)

            half = median("append") / 2
            later = take(appends(2 * args.commands, args.owners, seed=29), 2 * args.commands)
            n_half = min(len(later), int(half * args.latency_s))
            at_half = await paced_latency(settings, later[:n_half], half, "latency-half")
            low_rate = 50.0
            n_low = int(low_rate * args.latency_s)
            at_low = await paced_latency(
                settings, later[n_half : n_half + n_low], low_rate, "latency-low"
            )
            # Read your writes at half load: the same reads with the SDK's wait on and off.
            async with running_reader(settings):
                reads = {
                    on: await own_reads(
                        settings, later[:n_half], half, f"ryw-{str(on).lower()}", on
                    )
                    for on in (True, False)
                }

    raw = median("raw")
    print(
        f"\n{args.commands} commands across {args.owners} owners, {args.workers} worker "
        f"process(es), {args.shards} shards; medians of {args.rounds} rounds"
    )
    print(
        f"raw JetStream async publish   {raw:8.0f} msg/s   baseline, one Python process, "
        f"{len(payload)}-byte messages"
    )
    print(
        f"append, applied end to end    {median('append'):8.0f} cmd/s   "
        f"ratio to raw {ratio('append'):.2f}   (SDK publish {median('published'):.0f}/s)"
    )
    print(
        f"  append, SDK batching off    {median('unbatched'):8.0f} cmd/s   "
        f"ratio to raw {ratio('unbatched'):.2f}"
    )
    print(
        f"rewrite (fast path), applied  {median('rewrite'):8.0f} cmd/s   "
        f"ratio to raw {ratio('rewrite'):.2f}"
    )
    print(
        f"append latency, call to change feed, at {half:.0f}/s (half the append rate): "
        f"p50 {percentile(at_half, 0.5):.1f} ms   p99 {percentile(at_half, 0.99):.1f} ms"
    )
    print(
        f"append latency at {low_rate:.0f}/s (lone writes): "
        f"p50 {percentile(at_low, 0.5):.1f} ms   p99 {percentile(at_low, 0.99):.1f} ms"
    )
    for on, (latencies, missed, achieved) in reads.items():
        print(
            f"a client reading its own append back at {half:.0f}/s (puts went at "
            f"{achieved:.0f}/s), read your writes "
            f"{'on ' if on else 'off'}: p50 {percentile(latencies, 0.5):.1f} ms   "
            f"p99 {percentile(latencies, 0.99):.1f} ms   "
            f"{missed} of {len(latencies)} reads without the write"
        )
    print(
        json.dumps(
            {
                "commands": args.commands,
                "owners": args.owners,
                "workers": args.workers,
                "rounds": args.rounds,
                "raw_publish_per_s": round(raw),
                "append_applied_per_s": round(median("append")),
                "append_ratio": round(ratio("append"), 3),
                "append_ratios": [round(r["append"] / r["raw"], 3) for r in rounds],
                "append_unbatched_ratio": round(ratio("unbatched"), 3),
                "rewrite_applied_per_s": round(median("rewrite")),
                "rewrite_ratio": round(ratio("rewrite"), 3),
                "half_load_per_s": round(half),
                "half_load_p50_ms": round(percentile(at_half, 0.5), 2),
                "half_load_p99_ms": round(percentile(at_half, 0.99), 2),
                "low_load_p50_ms": round(percentile(at_low, 0.5), 2),
                "low_load_p99_ms": round(percentile(at_low, 0.99), 2),
                "own_read_p50_ms": {
                    "on" if on else "off": round(percentile(lat, 0.5), 2)
                    for on, (lat, _, _) in reads.items()
                },
                "own_read_p99_ms": {
                    "on" if on else "off": round(percentile(lat, 0.99), 2)
                    for on, (lat, _, _) in reads.items()
                },
                "own_read_missed": {"on" if on else "off": m for on, (_, m, _) in reads.items()},
                "own_read_puts_per_s": {
                    "on" if on else "off": round(rate) for on, (_, _, rate) in reads.items()
                },
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
