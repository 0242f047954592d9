"""Issue 17 (2): the write path on a three-node JetStream cluster, every stream with three
replicas, while nodes are SIGKILLed and restarted one at a time under load: nothing
acknowledged lost, nothing applied twice, each owner's order kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.reliability.cluster import Cluster, scale
from tests.reliability.conftest import deployed
from tests.reliability.test_faults import assert_clean, later, run_scenario
from zeromem import naming
from zeromem.auth.authority import Authority
from zeromem.bus import connect_nats
from zeromem.embedded.nats_cluster import NatsCluster


@pytest.fixture
async def replicated(
    tmp_path: Path, authority: Authority, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    async with deployed(tmp_path, authority, request, nats_nodes=3) as deployment:
        yield deployment


async def test_a_node_killed_and_restarted_at_a_time_loses_nothing(
    replicated: Cluster, tenant: str
) -> None:
    await assert_three_replicas(replicated)
    await replicated.start_services(workers=2)
    assert isinstance(replicated.nats, NatsCluster)
    nodes = replicated.nats.nodes
    kills = 0

    async def fault() -> None:
        nonlocal kills
        for round_ in range(int(scale(2, 6))):
            node = nodes[round_ % len(nodes)]
            await later(scale(1.0, 6.0))
            await asyncio.to_thread(node.kill)
            await later(scale(1.5, 4.0))
            await asyncio.to_thread(node.start)
            kills += 1

    report = await run_scenario(
        replicated,
        tenant,
        "nats cluster: one node SIGKILLed and restarted at a time",
        fault=fault,
        duration_s=scale(5.0, 40.0),
        client_timeout=5.0,
        idle_limit_s=30.0,
    )
    report.extra["kills"] = kills
    assert_clean(report)


async def assert_three_replicas(replicated: Cluster) -> None:
    nc = await connect_nats(replicated.settings, "observer")
    try:
        js = nc.jetstream()
        for stream in (
            naming.COMMAND_STREAM,
            naming.DEAD_LETTER_STREAM,
            naming.CHANGE_STREAM,
            naming.AUDIT_STREAM,
        ):
            info = await js.stream_info(stream)
            assert info.config.num_replicas == 3, stream
            assert info.cluster is not None and len(info.cluster.replicas or []) == 2, stream
    finally:
        await nc.close()
