"""At-least-once delivery made exactly-once in effect: a command id is applied once."""

from __future__ import annotations

import asyncio
import time

from tests.eventually import eventually
from tests.harness import ServiceSet
from tests.resend import send_as_new_message
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis
from zeromem.schemas import Feedback, Put, Result, decode_result, encode, encode_batch
from zeromem.sdk import MemoryClient
from zeromem.worker.service import WorkerService


async def test_same_command_id_published_twice_is_applied_once(
    client: MemoryClient, running
) -> None:
    command = Put(
        id="dup-cmd-1",
        tenant=client.tenant,
        agent=client.agent,
        ts=time.time(),
        key="user:u1:counter",
        value=1,
    )
    first = await client.send(command, wait="applied")
    again = await client.send(command, wait="stored")
    assert first.version == 1 and again.duplicate  # JetStream's own dedupe window caught it

    # Past the dedupe window (simulated with a different message id), the worker's record
    # of the command id answers with the original result and applies nothing.
    result = await send_as_new_message(client, command)
    assert result.command_id == "dup-cmd-1" and result.version == 1
    item = await client.get("user:u1:counter")
    assert item.version == 1


class CrashAfterCommit(WorkerService):
    """Applies a batch to Redis, then dies before acking it: the worst moment to crash."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)

        async def crash(shard, batch, results):  # type: ignore[no-untyped-def]
            raise ConnectionAbortedError("simulated crash between apply and ack")

        self.outbox.publish_results = crash  # type: ignore[method-assign]


async def test_worker_killed_after_apply_before_ack_applies_nothing_twice(isolated) -> None:
    """A crashed worker's batch is redelivered after ack_wait to its successor, which
    finds each command already applied and only publishes the original results."""
    settings = isolated
    nc = await connect_nats(settings, "crashing")
    redis = connect_redis(settings)
    shards = list(range(settings.shards))
    crashing = await CrashAfterCommit(settings, shards, nc=nc, redis=redis).start()
    await crashing.wait_owned()
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant="acme", shards=settings.shards
    ) as c:
        for i in range(20):
            await c.put("task:t7:step", i)
        await c.flush()
        # the first batch is applied, then the worker "dies" before acking
        await eventually(lambda: crashing.stats.applied)
        await asyncio.sleep(0.3)
        applied_before_crash = crashing.stats.applied
        assert applied_before_crash >= 1
        await crashing.stop()  # gone, holding applied but unacknowledged commands
        await nc.close()
        await redis.aclose()

        services = await ServiceSet.start(settings)
        try:
            successor = services.workers[0]
            # redelivered once ack_wait (2 s in the tests) has passed
            stats = successor.stats
            await eventually(lambda: stats.duplicates + stats.applied >= 20, timeout=15.0)
            # what the dead worker applied is recognised, nothing is applied twice
            assert successor.stats.duplicates == applied_before_crash
            assert successor.stats.applied == 20 - applied_before_crash
            item = await c.get("task:t7:step")
            assert item.value == 19 and item.version == 20
        finally:
            await services.stop()


async def test_duplicates_inside_one_batch_message_apply_once(
    client: MemoryClient, running
) -> None:
    """A command id seen again in the same batch (or in a later one, past the dedupe
    window) is answered with its stored result; what follows it for the same memory is
    decided on what Redis holds, not on a second apply that never happened."""
    tenant, key = client.tenant, "user:u7:plan"
    subject = naming.command_subject(
        tenant, naming.shard_for(tenant, "user:u7", running.shards), client.agent
    )

    def put(cid: str, value: int) -> Put:
        return Put(id=cid, tenant=tenant, agent=client.agent, ts=time.time(), key=key, value=value)

    def like(cid: str) -> Feedback:
        return Feedback(id=cid, tenant=tenant, agent=client.agent, ts=time.time(), key=key)

    async def publish_batch(commands: list[object], msg_id: str) -> list[Result]:
        inbox = client.nc.new_inbox()
        sub = await client.nc.subscribe(inbox)
        headers = {
            naming.BATCH_HEADER: str(len(commands)),
            naming.MSG_ID_HEADER: msg_id,
            naming.REPLY_HEADER: inbox,
        }
        await client.js.publish(
            subject, encode_batch([encode(c) for c in commands]), headers=headers
        )
        replies = [decode_result((await sub.next_msg(timeout=10)).data) for _ in commands]
        await sub.unsubscribe()
        return replies  # the worker answers in the batch's order

    first = await publish_batch(
        [put("b-x", 1), put("b-y", 2), put("b-x", 1), like("b-z"), put("b-w", 3)], "batch-1"
    )
    assert [(r.command_id, r.version) for r in first] == [
        ("b-x", 1),
        ("b-y", 2),
        ("b-x", 1),
        ("b-z", 2),
        ("b-w", 3),
    ]
    again = await publish_batch([like("b-z"), like("b-v"), put("b-w", 3), put("b-u", 4)], "batch-2")
    assert [(r.command_id, r.version) for r in again] == [
        ("b-z", 2),
        ("b-v", 3),
        ("b-w", 3),
        ("b-u", 4),
    ]
    item = await client.get(key)
    assert item.version == 4 and item.value == 4 and item.feedback.liked == 2
