"""Where the write path's CPU goes: microseconds of CPU per applied command, per process.

    python bench/write_cost.py [--commands 60000] [--owners 100] [--workers 2]
    python bench/write_cost.py --encryption [--commands 20000]

The workloads of bench/write_throughput.py (fire-and-forget puts from the SDK, batched,
applied by `zeromem worker` processes): appends first (new keys, new content: what agents
write), then the rewrite fast path beside them. What it reports is CPU time rather than rate:
read from /proc for the publishing process, every worker, nats-server and the Redis
server, over the whole run, divided by the number of commands. CPU time is far steadier
than a rate on a shared machine, so this is the script to run before and after a change
to the write path. Baselines from the same run: the CPU one raw JetStream async publish
costs (publisher plus nats-server) and one raw Redis SET (client plus server), so the
figures compare across machines as ratios. The last line is JSON.

``--encryption`` runs the workload twice in one run, on two fresh stacks: with nothing
encrypted at rest (no JetStream cipher, no master key), then with everything encrypted
(JetStream's cipher, and the tenant listed in ZEROMEM_ENCRYPT_TENANTS so every put is
sealed with its owner's data key and indexes no terms); it prints the ratio of the two.
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

from zeromem.bus import connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.settings import LifecycleSettings, Settings

sys.path.insert(0, str(Path(__file__).parent))
from workloads import PutSpec, appends, rewrites, take
from write_throughput import (
    raw_publish_rate,
    running_workers,
    sample_payload,
    stack_settings,
    zeromem_rate,
)

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process (and its waited-for children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class CpuMeter:
    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.start: dict[str, float] = {}

    def __enter__(self) -> CpuMeter:
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.start["publisher"] = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.spent = {name: cpu_seconds(pid) - self.start[name] for name, pid in self.pids.items()}
        self.spent["publisher"] = time.process_time() - self.start["publisher"]


async def raw_publish_cost(
    settings: Settings, n: int, payload: bytes, nats_pid: int
) -> dict[str, float]:
    with CpuMeter({"nats-server": nats_pid}) as meter:
        await raw_publish_rate(settings, n, payload)
    return {k: v / n * 1e6 for k, v in meter.spent.items()}


async def raw_redis_cost(
    settings: Settings, n: int, payload: bytes, redis_pid: int
) -> dict[str, float]:
    redis = connect_redis(settings)
    try:
        with CpuMeter({"redis-server": redis_pid}) as meter:
            for start in range(0, n, 500):
                pipe = redis.pipeline(transaction=False)
                for i in range(start, min(n, start + 500)):
                    pipe.set(f"bench:raw:{i}", payload)
                await pipe.execute()
        await redis.flushdb()
    finally:
        await redis.aclose()
    return {k: v / n * 1e6 for k, v in meter.spent.items()}


# Calls of the scripts themselves and of the measuring: not the commands a write makes.
_NOT_WRITES = ("evalsha", "evalsha_ro", "eval", "eval_ro", "info", "script", "hello", "ping")


async def redis_calls(settings: Settings) -> int:
    """Commands Redis has run so far (INFO commandstats), those inside scripts included
    and the script calls themselves left out."""
    redis = connect_redis(settings)
    try:
        stats = await redis.info("commandstats")
    finally:
        await redis.aclose()
    return sum(
        int(v["calls"])
        for k, v in stats.items()
        if k.removeprefix("cmdstat_").split("|")[0] not in _NOT_WRITES
    )


async def zeromem_cost(
    settings: Settings, specs: list[PutSpec], pids: dict[str, int], tenant: str
) -> dict[str, float]:
    """CPU per command of write_throughput's batched run of ``specs``, and the commands
    Redis ran per command (a count, the same on a busy machine as on an idle one)."""
    calls = await redis_calls(settings)
    with CpuMeter(pids) as meter:
        rate, _ = await zeromem_rate(settings, specs, batch=True, tenant=tenant)
    # less the HGET per key of zeromem_rate's own check that every put was applied
    calls = await redis_calls(settings) - calls - len({spec.key for spec in specs})
    per_command = {k: v / len(specs) * 1e6 for k, v in meter.spent.items()}
    workers = sum(v for k, v in per_command.items() if k.startswith("worker-"))
    total = workers + per_command["publisher"] + per_command["nats-server"]
    total += per_command["redis-server"]
    return per_command | {
        "workers": workers,
        "total": total,
        "rate": rate,
        "redis_calls": calls / len(specs),
    }


async def encryption_cost(args: argparse.Namespace) -> None:
    """The same workloads without and with encryption at rest: CPU per command, and ratio."""
    plain = await measure(args, encrypt=False)
    sealed = await measure(args, encrypt=True)
    print(f"CPU per command, µs ({args.commands} puts per workload, {args.owners} owners)")
    out: dict[str, object] = {"commands": args.commands}
    for workload in ("append", "rewrite"):
        before, after = plain[workload], sealed[workload]
        print(f"{workload:8}         plain   encrypted  ratio")
        for name, key in (
            ("SDK publisher", "publisher"),
            ("nats-server", "nats-server"),
            ("workers", "workers"),
            ("redis-server", "redis-server"),
            ("all", "total"),
        ):
            ratio = after[key] / before[key]
            print(f"  {name:14} {before[key]:6.1f}   {after[key]:6.1f}    {ratio:.2f}")
        print(f"  wall rate      {before['rate']:6.0f}   {after['rate']:6.0f}    cmd/s")
        out[workload] = {
            "plain_total_us": round(before["total"], 2),
            "encrypted_total_us": round(after["total"], 2),
            "ratio": round(after["total"] / before["total"], 3),
            "workers_ratio": round(after["workers"] / before["workers"], 3),
            "nats_ratio": round(after["nats-server"] / before["nats-server"], 3),
        }
    print(json.dumps(out))


async def measure(args: argparse.Namespace, *, encrypt: bool) -> dict[str, dict[str, float]]:
    """CPU per command of each workload on a fresh stack, encryption at rest on or off
    throughout (on: the tenants listed for encryption, so every put is sealed)."""
    append_specs = take(appends(args.commands, args.owners), args.commands)
    rewrite_specs = take(rewrites(args.commands, args.owners), args.commands)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp), encrypt=encrypt) as stack:
        assert stack.nats and stack.nats.process and stack.redis and stack.redis.process
        base = Settings(
            shards=args.shards,
            lifecycle=LifecycleSettings(encrypt_tenants="append,rewrite" if encrypt else ""),
        )
        settings = stack_settings(stack, base)
        async with running_workers(settings, args.workers) as workers:
            pids = {"nats-server": stack.nats.process.pid, "redis-server": stack.redis.process.pid}
            pids |= {f"worker-{i}": w.pid for i, w in enumerate(workers)}
            return {
                "append": await zeromem_cost(settings, append_specs, pids, "append"),
                "rewrite": await zeromem_cost(settings, rewrite_specs, pids, "rewrite"),
            }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=60_000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument(
        "--encryption", action="store_true", help="compare encryption at rest off and on"
    )
    args = parser.parse_args()
    if args.encryption:
        await encryption_cost(args)
        return

    append_specs = take(appends(args.commands, args.owners), args.commands)
    rewrite_specs = take(rewrites(args.commands, args.owners), args.commands)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp)) as stack:
        assert stack.nats and stack.nats.process and stack.redis and stack.redis.process
        settings = stack_settings(stack, Settings(shards=args.shards))
        payload = sample_payload(append_specs)
        async with running_workers(settings, args.workers) as workers:
            pids = {"nats-server": stack.nats.process.pid, "redis-server": stack.redis.process.pid}
            pids |= {f"worker-{i}": w.pid for i, w in enumerate(workers)}
            raw_nats = await raw_publish_cost(settings, args.commands, payload, pids["nats-server"])
            raw_redis = await raw_redis_cost(settings, args.commands, payload, pids["redis-server"])
            append = await zeromem_cost(settings, append_specs, pids, "append")
            rewrite = await zeromem_cost(settings, rewrite_specs, pids, "rewrite")

    raw_publish = raw_nats["publisher"] + raw_nats["nats-server"]
    raw_set = raw_redis["publisher"] + raw_redis["redis-server"]
    print(
        f"CPU per command, µs ({args.commands} puts across {args.owners} owners, "
        f"{args.workers} worker process(es))"
    )
    print("                  append   rewrite (fast path)")
    for label, name in (
        ("SDK publisher", "publisher"),
        ("nats-server", "nats-server"),
        ("workers", "workers"),
        ("redis-server", "redis-server"),
        ("all", "total"),
    ):
        print(f"  {label:14s} {append[name]:7.1f}   {rewrite[name]:7.1f}")
    print(f"  wall rate      {append['rate']:7.0f}   {rewrite['rate']:7.0f}   cmd/s")
    print(
        f"  Redis commands {append['redis_calls']:7.1f}   {rewrite['redis_calls']:7.1f}"
        "   per command (inside the scripts included)"
    )
    print(
        f"baseline: raw JetStream async publish {raw_publish:5.1f} µs/msg "
        f"(publisher {raw_nats['publisher']:.1f}, nats-server {raw_nats['nats-server']:.1f}); "
        f"raw pipelined Redis SET {raw_set:5.1f} µs (server {raw_redis['redis-server']:.1f})"
    )
    print(
        f"CPU per command / raw publish CPU per message: append {append['total'] / raw_publish:.2f}"
        f", rewrite {rewrite['total'] / raw_publish:.2f}"
    )

    def figures(cost: dict[str, float]) -> dict[str, float]:
        return {
            "publisher_us": round(cost["publisher"], 2),
            "nats_us": round(cost["nats-server"], 2),
            "workers_us": round(cost["workers"], 2),
            "redis_us": round(cost["redis-server"], 2),
            "total_us": round(cost["total"], 2),
            "ratio_to_raw_publish": round(cost["total"] / raw_publish, 3),
            "redis_calls": round(cost["redis_calls"], 2),
        }

    print(
        json.dumps(
            {
                "commands": args.commands,
                "workers": args.workers,
                "append": figures(append),
                "rewrite": figures(rewrite),
                "raw_publish_us": round(raw_publish, 2),
                "raw_redis_set_us": round(raw_set, 2),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
