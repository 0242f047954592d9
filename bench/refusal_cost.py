"""What a tenant writing past its quota costs the deployment: CPU per refused message.

    python bench/refusal_cost.py [--messages 1000] [--quota 25] [--workers 1]

Workers with a write quota of ``--quota`` commands/s per tenant and shard are started
and left to settle; then one tenant publishes batch messages of 128 puts back to back
(what the SDK sends, as the noisy-neighbour flood does) and the CPU of the workers and of
nats-server is read from /proc until every shard's consumer has acknowledged everything
(nats-server's share includes taking the messages in, the same whatever the workers
do). Nearly every message is refused over the quota (dead-lettered naming it) and a few
are applied; what is reported is CPU per message of the backlog, refused or not, and the
bytes the dead-letter stream took per refused message. CPU time, not a rate: steadier on
a shared machine (run it alternating with the code before a change). The last line is
JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from zeromem import naming
from zeromem.bus import connect_nats
from zeromem.embedded import EmbeddedStack
from zeromem.settings import Settings

sys.path.insert(0, str(Path(__file__).parent))
from write_cost import CpuMeter, cpu_seconds
from write_throughput import client, running_workers, stack_settings

BATCH = 128  # commands per batch message: what the SDK sends at most


async def publish_backlog(settings: Settings, messages: int) -> None:
    # A client that ignores the workers' throttle notices: the cost of refusing is the
    # figure (the SDK's default waits instead, and nothing would be refused).
    async with await client(settings, "flood", pace_writes=False) as memory:
        # One owner: every message on one shard, so the backlog is one shard's stream.
        for i in range(messages * BATCH):
            await memory.put(f"user:f0:k{i % 500}", {"i": i}, content=f"flood note {i}")
        await memory.flush()


async def settled(pids: dict[str, int], timeout: float = 60.0) -> None:
    """Until the processes are done starting (a worker loads its tokenizer and warms its
    rules up after it takes its leases): a second in which they used under 5% of a core."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = sum(cpu_seconds(pid) for pid in pids.values())
        await asyncio.sleep(1.0)
        if sum(cpu_seconds(pid) for pid in pids.values()) - before < 0.05:
            return


async def drained(settings: Settings, timeout: float = 600.0) -> None:
    """Until every command consumer has acknowledged the whole stream."""
    nc = await connect_nats(settings, "bench-drain")
    js = nc.jetstream()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = (await js.stream_info(naming.COMMAND_STREAM)).state.last_seq
            consumers = await js.consumers_info(naming.COMMAND_STREAM)
            floors = [c.ack_floor.stream_seq if c.ack_floor else 0 for c in consumers]
            if consumers and max(floors) >= last:
                return
            await asyncio.sleep(0.1)
        raise TimeoutError("the backlog was not acknowledged")
    finally:
        await nc.close()


async def dead_letter_bytes(settings: Settings) -> tuple[int, int]:
    nc = await connect_nats(settings, "bench-dead")
    try:
        state = (await nc.jetstream().stream_info(naming.DEAD_LETTER_STREAM)).state
        return state.messages, state.bytes
    finally:
        await nc.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--quota", type=float, default=25.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp)) as stack:
        assert stack.nats and stack.nats.process
        settings = stack_settings(stack, Settings(shards=args.shards))
        env = {"ZEROMEM_LIMIT_TENANT_COMMANDS_PER_S": str(args.quota)}
        async with running_workers(settings, args.workers, env_extra=env) as workers:
            pids = {"nats-server": stack.nats.process.pid}
            pids |= {f"worker-{i}": w.pid for i, w in enumerate(workers)}
            await settled(pids)
            started = time.monotonic()
            with CpuMeter(pids) as meter:
                await publish_backlog(settings, args.messages)
                await drained(settings)
            wall = time.monotonic() - started
        letters, letter_bytes = await dead_letter_bytes(settings)
    workers_us = sum(v for k, v in meter.spent.items() if k.startswith("worker-"))
    workers_us = workers_us / args.messages * 1e6
    nats_us = meter.spent["nats-server"] / args.messages * 1e6
    print(
        f"{args.messages} messages of {BATCH} puts, quota {args.quota:g}/s: {letters} "
        f"dead-lettered ({letter_bytes / max(letters, 1):.0f} bytes each) in {wall:.1f} s; "
        f"CPU per message: workers {workers_us:.0f} µs, nats-server {nats_us:.0f} µs"
    )
    print(
        json.dumps(
            {
                "messages": args.messages,
                "dead_letters": letters,
                "dead_letter_bytes": round(letter_bytes / max(letters, 1)),
                "workers_us": round(workers_us),
                "nats_us": round(nats_us),
                "wall_s": round(wall, 2),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
