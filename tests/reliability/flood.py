"""A noisy tenant, as its own process: recalls over many owners from many concurrent
requesters, and fire-and-forget writes as fast as the SDK sends them, for a while.

    python -m tests.reliability.flood NATS_URL TENANT SHARDS SECONDS

Prints one JSON line: what it sent, what was answered, what was refused (and why).
``FLOOD_MODE=writes`` or ``recalls`` runs one half alone (to see which one hurts).
``FLOOD_PACE=0``: the writer ignores the workers' throttle notices (``pace_writes=False``),
as a client that is not the SDK, or a hostile one, would.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter

from zeromem.sdk import MemoryClient
from zeromem.sdk.errors import RequestRejectedError, ServiceUnavailableError
from zeromem.settings import Settings

REQUESTERS = 32


# As many owners as a recall may search (the heaviest recall the service admits).
OWNERS = [f"user:a{i}" for i in range(Settings.from_env().limits.recall_owners)]


async def flood(url: str, tenant: str, shards: int, seconds: float) -> dict[str, object]:
    readers = [
        await MemoryClient.connect(url, tenant=tenant, agent=f"a{i}", shards=shards, timeout=5.0)
        for i in range(4)
    ]
    writer = await MemoryClient.connect(
        url,
        tenant=tenant,
        agent="aw",
        shards=shards,
        pace_writes=os.environ.get("FLOOD_PACE", "1") != "0",
    )
    stop_at = time.monotonic() + seconds
    counts: Counter[str] = Counter()

    async def recalls(n: int) -> None:
        client = readers[n % len(readers)]
        while time.monotonic() < stop_at:
            # Now and then far more owners than a recall may search: refused at once.
            owners = [f"user:x{i}" for i in range(2000)] if n % 8 == 0 else OWNERS
            try:
                await client.recall("deploy budget report meeting", owners=owners, k=10)
                counts["recall_answered"] += 1
            except RequestRejectedError as exc:
                counts[f"recall_refused_{exc.code}"] += 1
            except ServiceUnavailableError:
                counts["recall_timeout"] += 1

    async def writes() -> None:
        i = 0
        while time.monotonic() < stop_at:
            for _ in range(200):  # back to back: the SDK sends them as batch messages
                await writer.put(
                    f"{OWNERS[i % len(OWNERS)]}:w{i % 500}",
                    {"i": i},
                    content=f"flood note {i} about the deploy budget",
                )
                i += 1
            counts["writes"] += 200
            await asyncio.sleep(0)

    mode = os.environ.get("FLOOD_MODE", "both")
    jobs = ([writes()] if mode in ("both", "writes") else []) + (
        [recalls(n) for n in range(REQUESTERS)] if mode in ("both", "recalls") else []
    )
    try:
        await asyncio.gather(*jobs)
        await asyncio.wait_for(writer.flush(), 30)
    finally:
        for client in (*readers, writer):
            await client.close()
    return dict(counts)


def main() -> None:
    url, tenant, shards, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    print(json.dumps(asyncio.run(flood(url, tenant, shards, seconds))), flush=True)


if __name__ == "__main__":
    main()
