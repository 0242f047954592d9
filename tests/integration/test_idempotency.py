"""At-least-once delivery made exactly-once in effect: a command id is applied once."""

from __future__ import annotations

import asyncio
import time

from tests.harness import ServiceSet
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis
from zeromem.schemas import Put, decode_result, encode
from zeromem.sdk import MemoryClient
from zeromem.worker.service import WorkerService


async def test_same_command_id_published_twice_is_applied_once(client: MemoryClient, running) -> None:
    command = Put(id="dup-cmd-1", tenant=client.tenant, agent="a", ts=time.time(),
                  key="user:u1:counter", value=1)  # fmt: skip
    first = await client.send(command, wait="applied")
    again = await client.send(command, wait="stored")
    assert first.version == 1 and again.duplicate  # JetStream's own dedupe window caught it

    # Past the dedupe window (simulated with a different message id), the worker's record
    # of the command id answers with the original result and applies nothing.
    subject = naming.command_subject(client.tenant,
                                     naming.shard_for(client.tenant, "user:u1", running.shards))  # fmt: skip
    inbox = client.nc.new_inbox()
    sub = await client.nc.subscribe(inbox)
    await client.js.publish(subject, encode(command),
                            headers={naming.MSG_ID_HEADER: "other-id", naming.REPLY_HEADER: inbox})  # fmt: skip
    msg = await sub.next_msg(timeout=5)
    result = decode_result(msg.data)
    assert result.command_id == "dup-cmd-1" and result.version == 1
    item = await client.get("user:u1:counter")
    assert item.version == 1


class CrashAfterCommit(WorkerService):
    """Applies a batch to Redis, then dies before acking it: the worst moment to crash."""

    async def _publish_results(self, shard, batch, results):  # type: ignore[override]
        raise ConnectionAbortedError("simulated crash between apply and ack")


async def test_worker_killed_after_apply_before_ack_applies_nothing_twice(isolated) -> None:
    """A crashed worker's batch is redelivered after ack_wait to its successor, which
    finds each command already applied and only publishes the original results."""
    settings = isolated
    nc = await connect_nats(settings, "crashing")
    redis = connect_redis(settings)
    shards = list(range(settings.shards))
    crashing = await CrashAfterCommit(settings, shards, nc=nc, redis=redis).start()
    await crashing.wait_owned()
    async with await MemoryClient.connect(settings.nats_url, tenant="acme",
                                          shards=settings.shards) as c:  # fmt: skip
        for i in range(20):
            await c.put("task:t7:step", i)
        await c.flush()
        for _ in range(200):  # the first batch is applied, then the worker "dies" before acking
            if crashing.stats.applied:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        applied_before_crash = crashing.stats.applied
        assert applied_before_crash >= 1
        await crashing.stop()  # gone, holding applied but unacknowledged commands
        await nc.close()
        await redis.aclose()

        services = await ServiceSet.start(settings)
        try:
            successor = services.workers[0]
            for _ in range(300):  # redelivered once ack_wait (2 s in the tests) has passed
                if successor.stats.duplicates + successor.stats.applied >= 20:
                    break
                await asyncio.sleep(0.05)
            # what the dead worker applied is recognised, nothing is applied twice
            assert successor.stats.duplicates == applied_before_crash
            assert successor.stats.applied == 20 - applied_before_crash
            item = await c.get("task:t7:step")
            assert item.value == 19 and item.version == 20
        finally:
            await services.stop()
