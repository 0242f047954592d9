"""Fixtures: real servers started through the project's own launcher, on free ports in
temp dirs. Nothing here touches a service on a standard port.

One NATS and one Redis serve the whole session; tests isolate themselves by tenant
(every test gets a fresh one), the way faststream's tests use a uuid subject each.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from zeromem.embedded import EmbeddedStack
from zeromem.settings import Settings

# Short timings so redelivery and leases show up within a test.
TEST_SETTINGS = dict(shards=8, ack_wait_s=2.0, lease_ttl_s=3.0, reaper_interval_s=0.2)


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    stack = EmbeddedStack(tmp_path_factory.mktemp("zeromem-stack")).start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def settings(servers: EmbeddedStack, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        nats_url=servers.nats_url,
        redis_url=servers.redis_url,
        data_dir=Path(tmp_path_factory.mktemp("zeromem-data")),
        **TEST_SETTINGS,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="session")
async def running(settings: Settings) -> AsyncIterator[Settings]:
    """Workers for every shard and the read services, in this process."""
    from tests.harness import ServiceSet

    services = await ServiceSet.start(settings)
    try:
        yield settings
    finally:
        await services.stop()


@pytest.fixture
def isolated(tmp_path: Path) -> Iterator[Settings]:
    """Servers of its own, for a test that counts everything on them or breaks them."""
    stack = EmbeddedStack(tmp_path / "stack").start()
    try:
        yield Settings(nats_url=stack.nats_url, redis_url=stack.redis_url,
                       data_dir=tmp_path / "data", **TEST_SETTINGS)  # type: ignore[arg-type]
    finally:
        stack.stop()


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(running: Settings, tenant: str) -> AsyncIterator[object]:
    from zeromem.sdk import MemoryClient

    async with await MemoryClient.connect(
        running.nats_url, tenant=tenant, agent="tester", shards=running.shards
    ) as c:
        yield c
