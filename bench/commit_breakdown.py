"""Where an append's Redis time goes inside the commit script, part by part.

    python bench/commit_breakdown.py [--commands 10000] [--rounds 3] [--batch 64]

No NATS and no worker process: the engine decides the append workload's puts
(bench/workloads.py) in this process, and ``Store.commit_decisions`` sends them in
batches of ``--batch`` per shard to a private redis-server (append-only file on, as
`zeromem up` runs it). Reported per append: the Redis main thread's CPU (INFO cpu), the
commands Redis ran inside the script, and its keys and memory at the end; then the same
with parts of commit.lua switched off in a copy of it (each variant on a fresh server,
the variants alternating round after round, medians), so each part's share is the
difference. What the variants leave out:

- ``unpack only``: the call and msgpack decoding of the batch, nothing applied;
- ``no index ops``: the memory, its result and the shard position, no index write;
- ``no index flush``: index operations collected in Lua but never written;
- ``no sorted sets``: every index write but the sorted sets' (postings, time, key list);
- ``append-only file off``: the whole script, ``appendonly no``.

``--bounded`` keeps the tenant's results index as the worker does (``Limits``' default
bounds, which 10,000 appends stay under: the bookkeeping, not the trimming).

CPU time is steadier than a rate on a shared machine, but a loaded machine still inflates
it: compare the variants of one run, not runs. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).parent))
from workloads import appends, as_put, take

from zeromem.embedded.servers import find_redis_server
from zeromem.limits import Limits
from zeromem.naming import shard_for
from zeromem.schemas import Put, owner_of
from zeromem.store import scripts
from zeromem.store.items import KeyState
from zeromem.worker.analysis import default_engine
from zeromem.worker.store import Store

SHARDS = 16
_SOURCE = scripts.COMMIT.source
# variant -> (commit.lua as changed, appendonly)
VARIANTS: dict[str, tuple[str, str]] = {
    "whole script": (_SOURCE, "yes"),
    "unpack only": (
        _SOURCE.replace(
            "local decisions = cmsgpack.unpack(ARGV[5])",
            "local decisions = cmsgpack.unpack(ARGV[5])\nif true then return {} end",
        ),
        "yes",
    ),
    "no index ops": (
        _SOURCE.replace(
            "  for i = 1, #ops, 4 do\n    local key = ops[i + 1]",
            "  for i = 1, 0, 4 do\n    local key = ops[i + 1]",
        ),
        "yes",
    ),
    "no index flush": (_SOURCE.replace("\nflush_index()\n", "\n"), "yes"),
    "no sorted sets": (
        _SOURCE.replace(
            "local command = RUN_COMMAND[op]",
            "local command = RUN_COMMAND[op]\n  if op == 'za' or op == 'zr' then return end",
        ),
        "yes",
    ),
    "append-only file off": (_SOURCE, "no"),
}


for _name, (_changed, _aof) in VARIANTS.items():
    # a variant whose edit no longer applies (commit.lua changed) must not pass as a part
    assert (_changed != _SOURCE) == (_name not in ("whole script", "append-only file off")), _name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def commands(n: int) -> dict[int, list[Put]]:
    """The append workload's puts, by shard."""
    by_shard: dict[int, list[Put]] = {}
    for i, spec in enumerate(take(appends(n, 100), n)):
        put = as_put(spec, i, "01JBREAKDOWN")
        by_shard.setdefault(shard_for("append", owner_of(spec.key), SHARDS), []).append(put)
    return by_shard


@contextlib.asynccontextmanager
async def private_redis(appendonly: str = "yes") -> AsyncIterator[Redis]:
    """A redis-server of its own on a free port in a temporary directory, persisting as
    `zeromem up` runs it (append-only file, fsync every second, no RDB saves)."""
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        server = subprocess.Popen(
            [
                *(find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp),
                *("--appendonly", appendonly, "--appendfsync", "everysec", "--save", ""),
            ],
            stdout=subprocess.DEVNULL,
        )
        redis = Redis(port=port)
        try:
            for _ in range(100):
                try:
                    await redis.ping()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            yield redis
        finally:
            await redis.aclose()
            server.terminate()
            server.wait()


async def run(
    source: str,
    appendonly: str,
    by_shard: dict[int, list[Put]],
    batch: int,
    bounded: bool = False,
) -> dict:
    """One variant on a fresh server: Redis CPU, commands, keys, memory per append."""
    commit = scripts.Script("commit.lua")
    commit.source, commit.sha = source, hashlib.sha1(source.encode()).hexdigest()
    scripts.COMMIT = commit
    async with private_redis(appendonly) as redis:
        engine = default_engine()
        limits = Limits()
        store = Store(
            redis,
            result_ttl_s=86_400,
            tombstone_ttl_s=86_400,
            result_records=limits.idempotency_records if bounded else 0,
            result_bytes=limits.idempotency_bytes if bounded else 0,
        )
        before = await redis.info("cpu")
        calls_before = await redis.info("commandstats")
        n, sequence = 0, 0
        applied: dict[int, int] = {}
        for shard, puts in by_shard.items():
            for start in range(0, len(puts), batch):
                part = puts[start : start + batch]
                decisions = []
                for put in part:
                    sequence += 1
                    outcome = engine.decide(put, put.key, KeyState(), put.ts)
                    outcome.sequence = sequence
                    decisions.append(store.decision(outcome, sequence, shard))
                # as the worker does: the last sequence it applied on the shard
                await store.commit_decisions(
                    decisions,
                    shard=shard,
                    lease_token="",
                    applied_through=applied.get(shard, 0),
                )
                applied[shard] = sequence
                n += len(part)
        after = await redis.info("cpu")
        calls_after = await redis.info("commandstats")
        cpu = sum(
            after[f] - before[f] for f in ("used_cpu_user_main_thread", "used_cpu_sys_main_thread")
        )

        def inside(stats: dict) -> int:
            return sum(
                int(v["calls"])
                for k, v in stats.items()
                if k.removeprefix("cmdstat_") not in ("evalsha", "eval", "info", "script")
            )

        return {
            "redis_us": cpu / n * 1e6,
            "commands": (inside(calls_after) - inside(calls_before)) / n,
            "keys": await redis.dbsize() / n,
            "bytes": (await redis.info("memory"))["used_memory"] / n,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="puts per commit call")
    parser.add_argument(
        "--bounded",
        action="store_true",
        help="keep the results index the worker keeps (Limits.idempotency_*)",
    )
    args = parser.parse_args()
    by_shard = commands(args.commands)
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, (source, appendonly) in VARIANTS.items():
            runs[name].append(await run(source, appendonly, by_shard, args.batch, args.bounded))
    print(
        f"Redis per append ({args.commands} appends, {args.batch} per commit call, "
        f"results {'bounded' if args.bounded else 'unbounded'}, medians of {args.rounds} rounds)"
    )
    print(f"  {'variant':22} {'CPU µs':>7} {'commands':>9} {'keys':>6} {'bytes':>7}")
    out = {}
    for name, results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        out[name] = {k: round(v, 2) for k, v in med.items()}
        print(
            f"  {name:22} {med['redis_us']:7.1f} {med['commands']:9.2f} {med['keys']:6.2f}"
            f" {med['bytes']:7.0f}"
        )
    print(
        json.dumps(
            {
                "commands": args.commands,
                "batch": args.batch,
                "bounded": args.bounded,
                "variants": out,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
