"""Fixtures: real servers started through the project's own launcher, on free ports in
temp dirs. Nothing here touches a service on a standard port.

Authentication is on for the whole suite, as ``zeromem up`` runs it: one issuing
authority serves the session, every embedded server trusts it, the services run under
their service identities, and ``MemoryClient.connect`` finds the authority through
``ZEROMEM_AUTH_DIR`` and connects each test's agent with a credential for exactly that
tenant and agent (see ``zeromem.auth.credentials``).

One NATS and one Redis serve the whole session; tests isolate themselves by tenant
(every test gets a fresh one), the way faststream's tests use a uuid subject each.

``ZEROMEM_TEST_REDIS_MASTERS=3`` runs the same tests against a Redis Cluster of three
masters instead (``make test-cluster`` and the short cluster run of ``make test``): the
stack's launcher forms it (``zeromem.embedded.redis_cluster``), and every process of the
session names its keys in the cluster's layout.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from zeromem.auth.authority import Authority
from zeromem.embedded import EmbeddedStack
from zeromem.settings import BusSettings, Settings, WorkerSettings

# A Redis Cluster of this many masters instead of one Redis (0: one Redis).
REDIS_MASTERS = int(os.environ.get("ZEROMEM_TEST_REDIS_MASTERS") or 0)

# Short timings so redelivery and leases show up within a test.
TEST_SETTINGS = Settings(
    shards=8,
    bus=BusSettings(ack_wait_s=2.0),
    worker=WorkerSettings(lease_ttl_s=3.0, reaper_interval_s=0.2),
)


@pytest.fixture(scope="session")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Authority]:
    """The session's issuing authority; clients mint their credentials from it."""
    found = Authority.load_or_create(tmp_path_factory.mktemp("zeromem-auth"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZEROMEM_AUTH_DIR", str(found.directory))
        yield found


def admin_settings(stack: EmbeddedStack, data_dir: Path) -> Settings:
    """Settings on ``stack`` as the operator's admin identity (what tests use to look
    into NATS and Redis); the services derive their own roles from it."""
    base = TEST_SETTINGS.with_(data_dir=data_dir, auth_dir=str(stack.authority.directory))
    return stack.settings_for(base, "admin")


@pytest.fixture(scope="session")
def servers(
    tmp_path_factory: pytest.TempPathFactory, authority: Authority
) -> Iterator[EmbeddedStack]:
    stack = EmbeddedStack(
        tmp_path_factory.mktemp("zeromem-stack"), authority=authority, redis_masters=REDIS_MASTERS
    ).start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def settings(servers: EmbeddedStack, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return admin_settings(servers, Path(tmp_path_factory.mktemp("zeromem-data")))


@pytest.fixture(scope="session")
async def running(settings: Settings, authority: Authority) -> AsyncIterator[Settings]:
    """Workers for every shard and the read services, in this process."""
    from tests.harness import ServiceSet

    services = await ServiceSet.start(settings, authority=authority)
    try:
        yield settings
    finally:
        await services.stop()


@pytest.fixture
def isolated(tmp_path: Path, authority: Authority) -> Iterator[Settings]:
    """Servers of its own, for a test that counts everything on them or breaks them."""
    stack = EmbeddedStack(
        tmp_path / "stack", authority=authority, redis_masters=REDIS_MASTERS
    ).start()
    try:
        yield admin_settings(stack, tmp_path / "data")
    finally:
        stack.stop()


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(running: Settings, tenant: str) -> AsyncIterator[object]:
    from zeromem.sdk import MemoryClient

    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, agent="tester", shards=running.shards
    ) as c:
        yield c
