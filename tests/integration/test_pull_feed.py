"""The shard's pull feed keeps one request open across fetches (``worker/pull.py``): a
lone command comes through it as soon as it is stored, and a request spent on a backlog
is followed by the next one at once."""

from __future__ import annotations

import time
from typing import Any

from zeromem import naming
from zeromem.bus import connect_nats, open_shard_consumer, provision
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.worker.messages import stream_position
from zeromem.worker.pull import PullFeed


async def _put(settings: Settings, owner: str, n: int) -> int:
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant="acme", shards=settings.shards
    ) as client:
        for i in range(n):
            await client.put(f"{owner}:step", i, wait="stored")
    return naming.shard_for("acme", owner, settings.shards)


def _count_requests(feed: PullFeed) -> list[str]:
    sent: list[str] = []
    publish = feed.nc.publish

    async def counted(subject: str, *args: Any, **kwargs: Any) -> None:
        if subject == feed.request_subject:
            sent.append(subject)
        await publish(subject, *args, **kwargs)

    feed.nc.publish = counted  # type: ignore[method-assign]
    return sent


async def test_a_backlog_comes_batch_after_batch(isolated: Settings) -> None:
    nc = await connect_nats(isolated, "feed-test")
    await provision(nc.jetstream(), isolated)
    shard = await _put(isolated, "task:f1", 10)
    consumer = await open_shard_consumer(nc.jetstream(), isolated, shard, "a1", 0)
    feed = await PullFeed(nc, naming.COMMAND_STREAM, consumer).start()
    try:
        got = []
        for want in (4, 4, 2):
            started = time.monotonic()
            batch = await feed.fetch(want, timeout=3.0)
            # a spent request is followed by the next at once, not at its expiry
            assert len(batch) == want and time.monotonic() - started < 2.0
            got += batch
        positions = [stream_position(m.reply)[0] for m in got]
        assert positions == sorted(positions) and len(set(positions)) == 10
    finally:
        await feed.stop()
        await nc.close()


async def test_lone_commands_come_through_one_open_request(isolated: Settings) -> None:
    nc = await connect_nats(isolated, "feed-test")
    await provision(nc.jetstream(), isolated)
    shard = naming.shard_for("acme", "task:f2", isolated.shards)
    consumer = await open_shard_consumer(nc.jetstream(), isolated, shard, "a1", 0)
    feed = await PullFeed(nc, naming.COMMAND_STREAM, consumer, expires_s=30.0).start()
    requests = _count_requests(feed)
    try:
        for i in range(3):
            fetching = feed.fetch(64, timeout=10.0)
            await _put(isolated, "task:f2", 1)
            started = time.monotonic()
            msgs = await fetching
            # returned as it came (the consumer had no more), not at the timeout
            assert len(msgs) == 1 and time.monotonic() - started < 5.0, i
        assert len(requests) == 1
    finally:
        await feed.stop()
        await nc.close()
