"""The inspector's pages on a tenant with a million memories: paged, never a full scan.

    python bench/inspect_scale.py [--memories 1000000] [--owners 100000] [--samples 200]

Fills one tenant's store in Redis with --memories memories over --owners owners (item hashes
in the workers' format and the key index, written directly: loading a million through the
write path is `make bench-recall`'s job, not this one's), runs the read services in process
under their identity, and times, through a tenant's own credential: a page of 50 owners
(the skip-scan), a page of 50 memories, one memory, and the inspector's memories page over
HTTP (owners and memories together, JSON). Next to them, in the same run: a raw NATS
request-reply, and one full read of the tenant's key index (what listing owners by scanning
would cost, before any request). The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
from recall_latency import percentile, raw_round_trips
from write_throughput import stack_settings

from zeromem.auth.mcp_tokens import McpTokens
from zeromem.bus import connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.embedded.inprocess import InProcessServices
from zeromem.embedded.stack import settings_for_role
from zeromem.inspect import InspectSettings, create_app
from zeromem.inspect.access import Access
from zeromem.schemas import MemoryItem, MemoryType
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import RedisKeys, tenants_key

TENANT = "bench"
PAGE = 50


async def fill(settings: Settings, memories: int, owners: int) -> float:
    redis = connect_redis(settings)
    keys = RedisKeys(TENANT)
    encode = msgspec.msgpack.Encoder().encode
    started = time.perf_counter()
    now = time.time()
    per_owner = memories // owners
    async with redis.pipeline(transaction=False) as pipe:
        for o in range(owners):
            owner = f"user:u{o:06d}"
            names = {}
            for i in range(per_owner):
                key = f"{owner}:m{i:03d}"
                item = MemoryItem(
                    key=key,
                    value={"i": i},
                    content=f"memory {i} of {owner}",
                    type=MemoryType.FACT,
                    created_at=now,
                    updated_at=now,
                    version=1,
                )
                pipe.hset(keys.item(key), mapping={"v": 1, "d": encode(item), "lc": "bench"})
                names[key] = 0
            pipe.zadd(keys.keys(keys.shard_of(owner)), names)
            if o % 500 == 499:
                await pipe.execute()
        await pipe.execute()
    await redis.sadd(tenants_key(0), TENANT)  # one Redis: one set of tenants
    await redis.aclose()
    return time.perf_counter() - started


async def timed(samples: int, call: Any) -> list[float]:
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        await call()
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(samples), 2), "p99": round(percentile(samples, 99), 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--owners", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp)) as stack:
        settings = stack_settings(stack, Settings(data_dir=Path(tmp) / "data"))
        load_s = await fill(settings, args.memories, args.owners)
        print(
            f"filled {args.memories} memories over {args.owners} owners in {load_s:.0f} s",
            file=sys.stderr,
        )
        services = await InProcessServices.start(settings, authority=stack.authority)
        tokens = McpTokens(Path(tmp) / "tokens.json")
        creds = stack.authority.issue_agent(TENANT, "viewer", record=False).write(
            Path(tmp) / "viewer.creds"
        )
        token = tokens.add(TENANT, "viewer", creds)
        app = create_app(
            settings_for_role(settings, stack.authority, "reader"),
            InspectSettings(page_size=PAGE),
            Access(tokens.path),
        )
        import uvicorn

        from zeromem.embedded.servers import free_port

        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        serving = asyncio.create_task(server.serve())
        try:
            for _ in range(600):  # uvicorn says it started with a flag, not an event
                if server.started:
                    break
                await asyncio.sleep(0.05)
            client = await MemoryClient.connect(
                settings.bus.nats_url, creds=creds, settings=settings, timeout=10
            )

            def owner() -> str:
                return f"user:u{rng.randrange(args.owners):06d}"

            samples = args.samples
            results = {
                "owners page (50 owners, skip-scan)": summary(
                    await timed(samples, lambda: client.owners(owner()[:9], limit=PAGE))
                ),
                "memories page (50 memories)": summary(
                    await timed(
                        samples, lambda: client.list(f"{owner()}:", limit=PAGE, slide=False)
                    )
                ),
                "one memory": summary(
                    await timed(samples, lambda: client.get(f"{owner()}:m001", slide=False))
                ),
            }
            bearer = {"authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", timeout=30, headers=bearer
            ) as http:

                async def page() -> None:
                    response = await http.get(
                        f"/api/t/{TENANT}/memories", params={"prefix": f"{owner()}:"}
                    )
                    assert response.status_code == 200 and response.json()["items"]

                results["memories page over HTTP (owners + memories)"] = summary(
                    await timed(args.samples, page)
                )
            raw = await raw_round_trips(settings, args.samples)
            redis = connect_redis(settings)
            started = time.perf_counter()
            whole = await redis.zrange(RedisKeys(TENANT).keys(0), 0, -1)
            scan_ms = (time.perf_counter() - started) * 1000
            await redis.aclose()
            await client.close()
        finally:
            server.should_exit = True
            await serving
            await services.stop()
    print(f"{args.memories:,} memories over {args.owners:,} owners, {args.samples} samples each")
    for name, figures in results.items():
        print(f"  {name:<46} p50 {figures['p50']:7.2f} ms   p99 {figures['p99']:7.2f} ms")
    print(f"  raw NATS request-reply (baseline)              p50 {statistics.median(raw):7.2f} ms")
    print(
        f"  one full read of the key index ({len(whole):,} keys)  {scan_ms:9.0f} ms "
        "(not done by any page)"
    )
    print(
        json.dumps(
            {
                "memories": args.memories,
                "owners": args.owners,
                **results,
                "raw_p50": round(statistics.median(raw), 3),
                "full_index_read_ms": round(scan_ms),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
