"""The ``info`` query: the contract version and the deployment's shard count over NATS,
so a client never guesses the count (a wrong one is dead-lettered, ``wrong_shard``)."""

from __future__ import annotations

import pytest

from zeromem import naming
from zeromem.schemas import WIRE_VERSION, ErrorReply, InfoReply, InfoRequest, decode, encode
from zeromem.sdk import MemoryClient
from zeromem.sdk.errors import ZeromemError
from zeromem.settings import Settings


async def test_info_tells_the_version_shards_and_limits(
    client: MemoryClient, running: Settings
) -> None:
    info = await client.info()
    assert info.version == WIRE_VERSION
    assert info.shards == running.shards
    assert info.dedupe_window_s == running.bus.dedupe_window_s
    assert info.batch_commands == running.limits.batch_commands
    assert info.value_bytes == running.limits.value_bytes
    assert info.max_payload == client.nc.max_payload > 0


async def test_a_client_discovers_the_shard_count(running: Settings, tenant: str) -> None:
    assert running.shards != 3
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, agent="finder", shards=3
    ) as wrong:
        owner = next(
            f"user:u{i}"
            for i in range(100)
            if naming.shard_for(tenant, f"user:u{i}", 3)
            != naming.shard_for(tenant, f"user:u{i}", running.shards)
        )
        receipt = await wrong.put(f"{owner}:a", 1, wait="applied")
        assert receipt.status == "rejected" and "wrong_shard" in receipt.reason
        await wrong.discover()
        assert wrong.shards == running.shards
        assert (await wrong.put(f"{owner}:a", 1, wait="applied")).status == "applied"
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, agent="finder", shards="auto"
    ) as found:
        assert found.shards == running.shards


async def test_a_shard_past_the_count_is_refused_at_publish(running: Settings, tenant: str) -> None:
    """Too large a count: a shard the deployment does not have is no subject of the
    command stream, so the publish fails at once instead of being stored unread."""
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, agent="finder", shards=running.shards * 8
    ) as wrong:
        owner = next(
            f"user:u{i}"
            for i in range(100)
            if naming.shard_for(tenant, f"user:u{i}", running.shards * 8) >= running.shards
        )
        with pytest.raises(ZeromemError, match="no stream stores"):
            await wrong.put(f"{owner}:a", 1, wait="stored")


async def test_an_info_request_for_another_tenant_is_refused(
    client: MemoryClient,
) -> None:
    msg = await client.nc.request(
        naming.query_subject(client.tenant, client.agent, "info"),
        encode(InfoRequest(tenant="someone-else")),
        timeout=5,
    )
    assert msg.headers and msg.headers[naming.ERROR_HEADER] == "bad_request"
    assert decode(msg.data, ErrorReply).code == "bad_request"
    ok = await client.nc.request(
        naming.query_subject(client.tenant, client.agent, "info"),
        encode(InfoRequest(tenant=client.tenant)),
        timeout=5,
    )
    assert decode(ok.data, InfoReply).shards > 0
