"""What a call costs Redis on this machine, apart from what the call does: the cost model
behind docs/write-path.md.

    python bench/redis_call_costs.py [--calls 5000] [--appends 3000]

Against a private redis-server (append-only file on, as `zeromem up` runs it), Redis's
main-thread CPU (INFO cpu) per call, for:

- a lone ``SET`` of 100 bytes, one round trip each (the Python client waits for each
  reply), and the same sixteen to a pipeline: the difference is what a wake-up costs;
- a lone script call that returns at once, one that runs a ``SET``, one that creates ten
  sorted sets (``ZADD`` to new keys, as an append's postings do);
- the client's side of a lone script call (``time.process_time`` in this process): through
  redis-py's client, through one of its connections directly, and written to the socket
  and parsed with hiredis by hand (what the worker's client library costs it per call),
  and through the worker's ``Coalesced`` (its own connections), alone and four a round;
- the real commit script (store/commit.lua) committing one append per call, with its
  time split by ``SLOWLOG`` (threshold 0) into the commands it ran inside and the rest
  (the script's own Lua and the call's fixed cost), medians over the calls.

The last line is JSON. Only ratios within one run mean much on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).parent))
from commit_breakdown import commands, private_redis

from zeromem.limits import Limits
from zeromem.store.items import KeyState
from zeromem.worker.analysis import default_engine
from zeromem.worker.coalesce import Coalesced
from zeromem.worker.store import Store

SCRIPTS = {
    "script returning at once": ("return 1", []),
    "script with one SET": ("redis.call('SET', KEYS[1], ARGV[1]) return 1", ["x" * 100]),
    "script creating ten sorted sets": (
        "for i = 1, 10 do redis.call('ZADD', KEYS[1] .. ':' .. i, 1, 'm') end return 1",
        [],
    ),
}


async def cpu_s(redis: Redis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user_main_thread"] + info["used_cpu_sys_main_thread"])


async def lone_and_pipelined(redis: Redis, calls: int) -> dict[str, float]:
    out: dict[str, float] = {}
    before = await cpu_s(redis)
    for i in range(calls):
        await redis.set(f"lone:{i}", "x" * 100)
    out["lone SET"] = (await cpu_s(redis) - before) / calls * 1e6
    before = await cpu_s(redis)
    for start in range(0, calls, 16):
        pipe = redis.pipeline(transaction=False)
        for i in range(start, min(calls, start + 16)):
            pipe.set(f"piped:{i}", "x" * 100)
        await pipe.execute()
    out["SET, sixteen to a pipeline"] = (await cpu_s(redis) - before) / calls * 1e6
    for name, (source, args) in SCRIPTS.items():
        sha = await redis.script_load(source)
        before = await cpu_s(redis)
        for i in range(calls):
            await redis.evalsha(sha, 1, f"{name[:6]}:{i}", *args)
        out[name] = (await cpu_s(redis) - before) / calls * 1e6
    return out


async def client_side(redis: Redis, calls: int, repeats: int = 3) -> dict[str, float]:
    """This process's CPU per lone call of an empty script, four ways: the median of
    ``repeats`` passes, the ways taking turns (one pass each is at the mercy of whatever
    else the shared machine runs at that moment)."""
    import hiredis

    sha = await redis.script_load("return 1")
    kwargs = redis.connection_pool.connection_kwargs
    connection = await redis.connection_pool.get_connection()
    reader, writer = await asyncio.open_connection(kwargs["host"], kwargs["port"])
    parser = hiredis.Reader()
    head = b"*5\r\n$7\r\nEVALSHA\r\n$40\r\n" + sha.encode() + b"\r\n$1\r\n1\r\n"
    coalesced = Coalesced(redis)  # the worker's own path (worker/coalesce.py)

    async def client() -> None:
        for i in range(calls):
            await redis.evalsha(sha, 1, f"c:{i}", "a")

    async def on_connection() -> None:
        for i in range(calls):
            packed = connection.pack_command("EVALSHA", sha, 1, f"c:{i}", "a")
            await connection.send_packed_command(packed, check_health=False)
            await connection.read_response()

    async def by_hand() -> None:
        for i in range(calls):
            key = f"c:{i}".encode()
            writer.write(head + b"$%d\r\n%b\r\n$1\r\na\r\n" % (len(key), key))
            while parser.gets() is False:
                parser.feed(await reader.read(65536))

    async def worker_path() -> None:
        for i in range(calls):
            await coalesced.evalsha(sha, 1, f"c:{i}", "a")

    async def worker_path_four() -> None:
        for i in range(calls):  # per round of four: divided by calls below, like the rest
            await asyncio.gather(*(coalesced.evalsha(sha, 1, f"c:{i}:{j}", "a") for j in range(4)))

    ways = {
        "client: redis-py client, lone call": client,
        "client: redis-py connection, lone call": on_connection,
        "client: socket and hiredis, lone call": by_hand,
        "client: worker's Coalesced, lone call": worker_path,
        "  four calls a round, per round": worker_path_four,
    }
    passes: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(repeats):
            for name, way in ways.items():
                start = time.process_time()
                await way()
                passes[name].append((time.process_time() - start) / calls * 1e6)
    finally:
        await redis.connection_pool.release(connection)
        writer.close()
        await coalesced.drain()
    return {name: statistics.median(values) for name, values in passes.items()}


async def lone_commits(redis: Redis, appends: int) -> dict[str, float]:
    """The commit script, one append per call: its SLOWLOG time, inside and outside."""
    limits = Limits()
    store = Store(
        redis,
        result_ttl_s=86_400,
        tombstone_ttl_s=86_400,
        result_records=limits.idempotency_records,
        result_bytes=limits.idempotency_bytes,
    )
    engine = default_engine()
    await redis.config_set("slowlog-log-slower-than", 0)
    await redis.config_set("slowlog-max-len", 200_000)
    await redis.slowlog_reset()
    applied: dict[int, int] = {}
    for shard, puts in commands(appends).items():
        for put in puts:
            sequence = applied.get(shard, 0) + 1
            outcome = engine.decide(put, put.key, KeyState(), put.ts)
            outcome.sequence = sequence
            await store.commit_decisions(
                [store.decision(outcome, sequence, shard)],
                shard=shard,
                lease_token="",
                applied_through=sequence - 1,
            )
            applied[shard] = sequence
    entries = await redis.slowlog_get(200_000)
    await redis.config_set("slowlog-log-slower-than", 10_000)
    calls: list[int] = []
    inside: list[int] = []
    running = 0
    for entry in reversed(entries):  # oldest first: a script's commands come before it
        name = entry["command"].split(b" ", 1)[0].upper()
        if name == b"EVALSHA":
            calls.append(entry["duration"])
            inside.append(running)
            running = 0
        elif name not in (b"SLOWLOG", b"CONFIG"):
            running += entry["duration"]
    warm = len(calls) // 5  # the first calls create the keyspace and load the script
    calls, inside = calls[warm:], inside[warm:]
    return {
        "commit call, one append (SLOWLOG µs)": statistics.median(calls),
        "  of it, the commands inside": statistics.median(inside),
        "  of it, the script and the call": statistics.median(
            [c - i for c, i in zip(calls, inside, strict=True)]
        ),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--appends", type=int, default=3000)
    args = parser.parse_args()
    async with private_redis() as redis:
        figures = await lone_and_pipelined(redis, args.calls)
        figures |= await client_side(redis, args.calls)
    async with private_redis() as redis:
        figures |= await lone_commits(redis, args.appends)
    for name, value in figures.items():
        print(f"  {name:40s} {value:8.1f} µs")
    print(json.dumps({k.strip(): round(v, 1) for k, v in figures.items()}))


if __name__ == "__main__":
    asyncio.run(main())
