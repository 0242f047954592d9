"""Each tenure of a shard's lease reads through a consumer of its own.

The race this closes: a worker frozen (SIGSTOP, a stalled host) between its lease check
and its pull request wakes after another worker took the shard over, and fetches. Its
commits are fenced, so it applies nothing; but with one consumer per shard, the commands
it fetched were in flight on the consumer the new owner acknowledges cumulatively, and
the new owner's next ack covered them: acknowledged, never applied.
"""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from tests.eventually import eventually
from tests.harness import ServiceSet
from zeromem import naming
from zeromem.auth.authority import Authority
from zeromem.bus import connect_nats, open_shard_consumer, provision, shard_backlogs
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.worker.messages import stream_position
from zeromem.worker.pull import PullFeed


async def _publish(settings: Settings, tenant: str, owner: str, n: int) -> int:
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant=tenant, shards=settings.shards
    ) as client:
        for i in range(n):
            await client.put(f"{owner}:step", i, wait="stored")
    return naming.shard_for(tenant, owner, settings.shards)


async def test_a_new_tenure_gets_what_a_replaced_owner_fetched(isolated: Settings) -> None:
    nc = await connect_nats(isolated, "tenure-test")  # the operator's, as a worker would
    js = nc.jetstream()
    await provision(js, isolated)
    shard = await _publish(isolated, "acme", "task:t1", 10)

    first = await open_shard_consumer(js, isolated, shard, "a1", applied_through=0)
    zombie = await PullFeed(nc, naming.COMMAND_STREAM, first).start()
    taken = await zombie.fetch(4, timeout=2.0)  # fetched by the owner that is then replaced
    assert len(taken) == 4

    second = await open_shard_consumer(js, isolated, shard, "b1", applied_through=0)
    consumers = {i.name for i in await js.consumers_info(naming.COMMAND_STREAM)}
    assert first not in consumers and second in consumers
    with pytest.raises(Exception):  # noqa: B017 - consumer gone: an error or nothing at all
        await zombie.fetch(4, timeout=1.0)

    owner = await PullFeed(nc, naming.COMMAND_STREAM, second).start()
    got = await owner.fetch(10, timeout=2.0)
    positions = [stream_position(m.reply)[0] for m in got]
    # everything, the zombie's four included, in stream order, to the new owner
    assert positions[:4] == [stream_position(m.reply)[0] for m in taken]
    assert len(got) == 10 and positions == sorted(positions)
    await got[-1].ack()  # acks the new consumer's ten; the zombie's ack has nowhere to go
    await taken[-1].ack()
    await eventually(lambda: shard_backlogs(js, isolated.shards), lambda b: b[shard] == 0)
    await zombie.stop()
    await owner.stop()
    await nc.close()


async def test_a_new_tenure_starts_where_the_shard_stands(isolated: Settings) -> None:
    nc = await connect_nats(isolated, "tenure-test")  # the operator's, as a worker would
    js = nc.jetstream()
    await provision(js, isolated)
    shard = await _publish(isolated, "acme", "task:t2", 6)
    assert (await shard_backlogs(js, isolated.shards))[shard] is None  # nobody reads it yet

    first = await open_shard_consumer(js, isolated, shard, "a1", applied_through=0)
    feed = await PullFeed(nc, naming.COMMAND_STREAM, first).start()
    msgs = await feed.fetch(6, timeout=2.0)
    seqs = [stream_position(m.reply)[0] for m in msgs]
    await msgs[2].ack_sync()  # the first three processed and acknowledged
    await feed.stop()

    # Redis holds five as applied: the two applied but never acknowledged come again (their
    # results go out), then the one not applied at all.
    second = await open_shard_consumer(js, isolated, shard, "b1", applied_through=seqs[4])
    feed = await PullFeed(nc, naming.COMMAND_STREAM, second).start()
    again = await feed.fetch(6, timeout=2.0)
    assert [stream_position(m.reply)[0] for m in again] == seqs[3:]

    # Redis came back behind the acknowledged floor (it lost the unsynced tail of its
    # append-only file): the commands it lost come again.
    third = await open_shard_consumer(js, isolated, shard, "c1", applied_through=seqs[0])
    feed2 = await PullFeed(nc, naming.COMMAND_STREAM, third).start()
    replay = await feed2.fetch(6, timeout=2.0)
    assert [stream_position(m.reply)[0] for m in replay] == seqs[1:]
    await feed.stop()
    await feed2.stop()
    await nc.close()


async def test_a_delivery_lost_in_transit_is_delivered_again_in_order(
    isolated: Settings, authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message the server delivered but the worker never received (in flight on a
    connection that broke, as when a NATS node is killed) counts as delivered: with the
    cumulative acknowledgement of the next batch it would count as done, never applied,
    and the owner's later commands would be applied without it. The worker sees the hole
    in the consumer's delivery sequence and opens the consumer again where the shard
    stands."""
    lost: list[Msg] = []
    deliver = PullFeed._on_msg

    async def lossy(self: PullFeed, msg: Msg) -> None:
        if msg.reply and not lost:
            lost.append(msg)  # the first delivery never arrives
            return
        await deliver(self, msg)

    monkeypatch.setattr(PullFeed, "_on_msg", lossy)
    services = await ServiceSet.start(isolated, authority=authority)
    try:
        async with await MemoryClient.connect(
            isolated.bus.nats_url, tenant="acme", shards=isolated.shards
        ) as client:
            for i in range(5):
                await client.put("task:t3:step", i, wait="stored")
            receipt = await client.put("task:t3:done", True, wait="applied")
            assert receipt.status == "applied"
            step = await client.get("task:t3:step")
        assert lost, "no delivery was dropped: the test proves nothing"
        assert step is not None and (step.version, step.value) == (5, 4)  # all five, in order
        assert sum(w.stats.delivery_gaps for w in services.workers) >= 1
    finally:
        await services.stop()
