"""Bad input is dead-lettered with its reason and raw bytes; everything around it applies."""

from __future__ import annotations

import time

import msgspec

from tests.eventually import eventually
from tests.harness import ServiceSet
from zeromem import naming
from zeromem.bus import connect_nats
from zeromem.schemas import DeadLetter, Put, decode, encode, encode_batch
from zeromem.sdk import MemoryClient


def valid(i: int, tenant: str = "acme") -> Put:
    return Put(
        id=f"ok-{i}", tenant=tenant, agent="a", ts=time.time(), key=f"user:u{i % 3}:k{i}", value=i
    )


def raw(**fields: object) -> bytes:
    base = {"op": "put", "id": "bad", "tenant": "acme", "agent": "a", "ts": 1.0, "key": "user:u1:x"}
    base.update(fields)
    return msgspec.msgpack.encode(base)


BAD_MESSAGES: list[tuple[str, bytes, str]] = [
    ("not msgpack", b"\xc1\xff\x00garbage", "invalid"),
    ("truncated msgpack", raw()[:-5], "invalid"),
    ("unknown op", raw(op="explode"), "invalid"),
    (
        "missing field",
        msgspec.msgpack.encode({"op": "put", "id": "x", "tenant": "acme"}),
        "invalid",
    ),
    ("mistyped field", raw(ts="yesterday"), "invalid"),
    ("key outside the grammar", raw(key="user u1 x"), "invalid"),
    ("content over 200 characters", raw(content="x" * 201), "invalid"),
    ("value over the size limit", raw(value="v" * (64 * 1024 + 10)), "limit value_bytes"),
    ("tenant mismatch", raw(tenant="other"), "tenant_mismatch"),
    # the payload claims another agent than the one the server let publish here
    ("agent mismatch", raw(agent="b"), "agent_mismatch"),
    ("not a map", msgspec.msgpack.encode([1, 2, 3]), "invalid"),
    ("deep nesting", raw(value=msgspec.Raw(b"\x91" * 3000 + b"\x00")), "limit nesting_depth"),
]


async def test_each_bad_message_is_dead_lettered_and_valid_ones_apply(isolated) -> None:
    settings = isolated
    services = await ServiceSet.start(settings)
    nc = await connect_nats(settings, "bad-input-test")  # the operator's, to read dead letters
    js = nc.jetstream()
    try:
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant="acme", agent="a", shards=settings.shards
        ) as client:
            shard_of_u1 = naming.shard_for("acme", "user:u1", settings.shards)
            n = 0
            for _, data, _ in BAD_MESSAGES:  # sent by the agent itself, on its own subject
                await client.send(valid(n))
                n += 1
                await client.js.publish(naming.command_subject("acme", shard_of_u1, "a"), data)
            wrong_shard = (shard_of_u1 + 1) % settings.shards
            await client.js.publish(naming.command_subject("acme", wrong_shard, "a"), raw(id="ws"))
            await client.send(valid(n), wait="applied")
            n += 1
            await client.flush()

            stats = services.workers[0].stats
            await eventually(lambda: stats.dead_lettered >= len(BAD_MESSAGES) + 1)
            for i in range(n):
                item = await client.get(f"user:u{i % 3}:k{i}")
                assert item is not None and item.value == i

        sub = await js.pull_subscribe(naming.DEAD_LETTER_SUBJECTS, stream=naming.DEAD_LETTER_STREAM)
        letters = [decode(m.data, DeadLetter) for m in await sub.fetch(100, timeout=2)]
        assert len(letters) == len(BAD_MESSAGES) + 1
        by_raw = {letter.raw: letter for letter in letters}
        for name, data, reason in BAD_MESSAGES:
            assert data in by_raw, f"{name} was not dead-lettered with its raw bytes"
            assert by_raw[data].reason.startswith(reason), (name, by_raw[data].reason)
        assert any(letter.reason.startswith("wrong_shard") for letter in letters)
        assert services.workers[0].stats.dead_lettered == len(BAD_MESSAGES) + 1
    finally:
        await nc.close()
        await services.stop()


async def test_a_waiting_caller_hears_why_its_command_was_refused(
    client: MemoryClient, running
) -> None:
    inbox = client.nc.new_inbox()
    sub = await client.nc.subscribe(inbox)
    subject = naming.command_subject(
        client.tenant, naming.shard_for(client.tenant, "user:u1", running.shards), client.agent
    )
    await client.js.publish(
        subject,
        raw(tenant=client.tenant, agent=client.agent, content="y" * 300),
        headers={naming.MSG_ID_HEADER: "bad-1", naming.REPLY_HEADER: inbox},
    )
    from zeromem.schemas import Rejected, decode_result

    result = decode_result((await sub.next_msg(timeout=5)).data)
    assert isinstance(result, Rejected) and "$.content" in result.reason
    assert encode(result)


async def test_a_bad_command_in_a_batch_is_refused_alone(isolated) -> None:
    """A batch message (what the SDK sends for back-to-back fire-and-forget writes) is
    applied command by command: each bad one is dead-lettered with its reason, its batch
    index and its own bytes, and its neighbours, before and after, are applied in order."""
    settings = isolated
    services = await ServiceSet.start(settings)
    nc = await connect_nats(settings, "bad-batch-test")
    js = nc.jetstream()
    agent = await MemoryClient.connect(
        settings.bus.nats_url, tenant="acme", agent="a", shards=settings.shards
    )
    try:
        shard = naming.shard_for("acme", "user:u1", settings.shards)
        subject = naming.command_subject("acme", shard, "a")

        def put(i: int) -> bytes:
            return encode(
                Put(
                    id=f"b-{i}",
                    tenant="acme",
                    agent="a",
                    ts=time.time(),
                    key="user:u1:seq",
                    value=i,
                )
            )

        bad = [raw(op="explode"), raw(tenant="other"), msgspec.msgpack.encode([1, 2])]
        parts = [put(0), bad[0], put(1), bad[1], put(2), bad[2], put(3)]
        await agent.js.publish(
            subject,
            encode_batch(parts),
            headers={naming.BATCH_HEADER: str(len(parts)), naming.MSG_ID_HEADER: "b1"},
        )
        # Broken framing (bytes that are not msgpack) cannot be split: the whole message goes.
        await agent.js.publish(
            subject,
            b"\xc1\x02not an array",
            headers={naming.BATCH_HEADER: "2", naming.MSG_ID_HEADER: "b2"},
        )
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant="acme", shards=settings.shards
        ) as client:
            after = await client.put("user:u1:seq", 4, wait="applied")
            assert after.version == 5  # the batch's four puts came first, in order
            stats = services.workers[0].stats
            await eventually(lambda: stats.dead_lettered >= 4)
        sub = await js.pull_subscribe(naming.DEAD_LETTER_SUBJECTS, stream=naming.DEAD_LETTER_STREAM)
        letters = [decode(m.data, DeadLetter) for m in await sub.fetch(10, timeout=2)]
        by_raw = {letter.raw: letter.reason for letter in letters}
        assert by_raw[bad[0]].startswith("invalid") and by_raw[bad[1]].startswith("tenant_mismatch")
        assert by_raw[bad[2]].startswith("invalid")
        assert by_raw[b"\xc1\x02not an array"].startswith("invalid: not a command batch")
        assert len(letters) == 4
    finally:
        await agent.close()
        await nc.close()
        await services.stop()


async def test_every_command_of_a_batch_with_zm_reply_gets_its_own_result(
    client: MemoryClient, running
) -> None:
    """A batch that asked for results (Zm-Reply) hears of each command, applied or
    refused, by its own id; a batch refused whole (its bytes are not an array) still gets
    a rejection, under the reply subject's last token."""
    from zeromem.schemas import Applied, Rejected, decode_result

    inbox = f"{naming.agent_inbox_prefix(client.tenant, client.agent)}.batch"
    sub = await client.nc.subscribe(f"{inbox}.*")
    shard = naming.shard_for(client.tenant, "user:u1", running.shards)
    subject = naming.command_subject(client.tenant, shard, client.agent)
    mine = {"tenant": client.tenant, "agent": client.agent}
    # an owner of another shard (the tenant is random, so is which owners share a shard)
    other = next(
        owner
        for owner in (f"user:someone-else-{i}" for i in range(100))
        if naming.shard_for(client.tenant, owner, running.shards) != shard
    )
    parts = [
        raw(id="good-1", **mine),
        raw(id="bad-op", op="explode", **mine),
        raw(id="other-shard", key=f"{other}:x", **mine),
        raw(id="good-2", **mine),
    ]
    await client.js.publish(
        subject,
        encode_batch(parts),
        headers={
            naming.MSG_ID_HEADER: f"{client.tenant}.batch-1",  # the window spans tenants
            naming.BATCH_HEADER: "4",
            naming.REPLY_HEADER: f"{inbox}.b1",
        },
    )
    results = {}
    for _ in range(4):
        result = decode_result((await sub.next_msg(timeout=5)).data)
        results[result.command_id] = result
    assert sorted(results) == ["bad-op", "good-1", "good-2", "other-shard"]
    assert isinstance(results["good-1"], Applied) and isinstance(results["good-2"], Applied)
    assert isinstance(results["bad-op"], Rejected) and results["bad-op"].op == "explode"
    refused = results["other-shard"]
    assert isinstance(refused, Rejected) and refused.reason.startswith("wrong_shard")
    assert refused.key == f"{other}:x"

    await client.js.publish(
        subject,
        b"\xc1 not an array",
        headers={
            naming.MSG_ID_HEADER: f"{client.tenant}.batch-2",
            naming.BATCH_HEADER: "2",
            naming.REPLY_HEADER: f"{inbox}.b2",
        },
    )
    whole = decode_result((await sub.next_msg(timeout=5)).data)
    assert isinstance(whole, Rejected) and whole.command_id == "b2"
    assert whole.reason.startswith("invalid: not a command batch")
