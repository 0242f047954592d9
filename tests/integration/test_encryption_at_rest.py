"""Issue 14 items 1-3: encryption at rest and erasure by crypto-shredding.

Sensitive memories of two owners, and every memory of a tenant that asked for encryption
(``ZEROMEM_ENCRYPT_TENANTS``); one owner and the whole tenant are forgotten. Then every
file under the NATS and Redis data directories is scanned byte by byte: none holds a
plaintext value or content. The same workload on a stack with encryption off shows the
scan finds them there (so the test can fail). The other owner still reads and recalls its
memories, and ``zeromem rebuild`` reproduces the live state exactly.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.conftest import REDIS_MASTERS, admin_settings
from tests.harness import ServiceSet
from zeromem.auth.authority import Authority
from zeromem.bus import connect_nats, connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.lifecycle.crypto import is_sealed
from zeromem.lifecycle.snapshot import differences, snapshot
from zeromem.lifecycle.vault import vault_of
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import DATA_KEY_FIELD, RedisKeys

# What is on disk is read from one Redis's files (and rewritten with its BGREWRITEAOF).
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        REDIS_MASTERS > 0, reason="reads one Redis's files on disk; the cluster run has none"
    ),
]
# The tenant that asked for every memory to be encrypted (ZEROMEM_ENCRYPT_TENANTS).
WHOLE = f"enc{uuid.uuid4().hex[:10]}"


@dataclass
class Deployment:
    stack: EmbeddedStack
    settings: Settings
    services: ServiceSet


@pytest.fixture
async def deployed(
    request: pytest.FixtureRequest, tmp_path: Path, authority: Authority
) -> AsyncIterator[Deployment]:
    encrypt, encrypt_tenants = request.param
    stack = EmbeddedStack(tmp_path / "stack", authority=authority, encrypt=encrypt).start()
    settings = admin_settings(stack, tmp_path / "data").with_(
        lifecycle={"encrypt_tenants": encrypt_tenants}
    )
    services = await ServiceSet.start(settings, authority=authority)
    try:
        yield Deployment(stack, settings, services)
    finally:
        await services.stop()
        stack.stop()


def found_in_files(root: Path, needles: list[bytes]) -> dict[bytes, list[str]]:
    """Which of ``needles`` occur in which files under ``root`` (read raw, byte by byte)."""
    found: dict[bytes, list[str]] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        for needle in needles:
            if needle in data:
                found.setdefault(needle, []).append(str(path.relative_to(root)))
    return found


async def _write(settings: Settings, tenant: str, marker: str) -> dict[str, list[bytes]]:
    """Sensitive memories for user:a and user:b of ``tenant``; returns each owner's
    plaintexts (values and contents)."""
    out: dict[str, list[bytes]] = {}
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant=tenant, agent="writer", shards=settings.shards
    ) as client:
        for owner in ("user:a", "user:b"):
            value = f"VALUE-{owner[-1]}-{marker}"
            content = f"CONTENT-{owner[-1]}-{marker}"
            receipt = await client.put(
                f"{owner}:secret",
                {"api": value},
                content=content,
                sensitive=True,
                tags=("vault",),
                wait="applied",
            )
            assert receipt.status == "applied"
            out[owner] = [value.encode(), content.encode()]
    return out


async def _write_tenant(settings: Settings, tenant: str, marker: str) -> list[bytes]:
    """Ordinary (not sensitive) memories of a tenant that encrypts everything."""
    plain: list[bytes] = []
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant=tenant, agent="writer", shards=settings.shards
    ) as client:
        for n, owner in enumerate(("task:t1", "task:t2")):
            value = f"TENANTVALUE-{n}-{marker}"
            content = f"TENANTCONTENT-{n}-{marker}"
            await client.put(f"{owner}:note", {"v": value}, content=content, wait="applied")
            await client.patch(f"{owner}:note", {"w": f"PATCHED-{n}-{marker}"}, wait="applied")
            plain += [value.encode(), content.encode(), f"PATCHED-{n}-{marker}".encode()]
    return plain


async def _persisted(redis: Redis) -> None:
    """Redis's append-only file written out (it syncs every second)."""
    await asyncio.sleep(1.2)


@pytest.mark.parametrize("deployed", [(False, "")], indirect=True)
async def test_without_encryption_the_scan_finds_the_plaintext(deployed: Deployment) -> None:
    """The control: the same writes on a stack with encryption off are on disk in clear,
    so the scan below would catch a leak."""
    settings = deployed.settings
    marker = uuid.uuid4().hex
    owners = await _write(settings, f"t{marker[:10]}", marker)
    tenant_plain = await _write_tenant(settings, f"u{marker[:10]}", marker)
    redis = connect_redis(settings)
    try:
        await _persisted(redis)
    finally:
        await redis.aclose()
    needles = [*owners["user:a"], *owners["user:b"], *tenant_plain]
    in_nats = found_in_files(deployed.stack.data_dir / "nats", needles)
    in_redis = found_in_files(deployed.stack.data_dir / "redis", needles)
    assert set(in_nats) == set(needles)  # the command log alone holds every one
    assert set(owners["user:a"]) <= set(in_redis)


@pytest.mark.parametrize("deployed", [(True, WHOLE)], indirect=True)
async def test_forget_shreds_and_nothing_is_on_disk_in_clear(deployed: Deployment) -> None:
    settings = deployed.settings
    marker = uuid.uuid4().hex
    tenant, whole = f"t{marker[:10]}", WHOLE
    owners = await _write(settings, tenant, marker)
    tenant_plain = await _write_tenant(settings, whole, marker)
    redis = connect_redis(settings)
    nc = await connect_nats(settings, "encryption-test")
    try:
        a_keys, b_keys = RedisKeys(tenant).data_key("user:a"), RedisKeys(tenant).data_key("user:b")
        wrapped_a = await redis.hget(a_keys, DATA_KEY_FIELD)
        assert wrapped_a and await redis.hget(b_keys, DATA_KEY_FIELD)
        sealed_a = await redis.hget(RedisKeys(tenant).item("user:a:secret"), "d")
        assert is_sealed(sealed_a)
        # no term index for an encrypted memory: its words are nowhere in Redis's keys
        assert not [k async for k in redis.scan_iter(match=f"zm:{tenant}:*:w:*")]
        assert not [k async for k in redis.scan_iter(match=f"zm:{whole}:*:w:*")]

        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=tenant, agent="writer", shards=settings.shards
        ) as client:
            got = await client.get("user:a:secret")
            assert got is not None and got.value == {"api": owners["user:a"][0].decode()}
            assert (await client.forget("user:a")).status == "applied"
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=whole, agent="writer", shards=settings.shards
        ) as client:
            got = await client.get("task:t1:note")
            assert got is not None and got.content == tenant_plain[1].decode()
            # forgetting a tenant: every one of its owners
            for owner in ("task:t1", "task:t2"):
                assert (await client.forget(owner)).status == "applied"
            assert await client.get("task:t1:note") is None

        # crypto-shredding: the forgotten owners' data keys are gone, the other one's kept
        assert await redis.hget(a_keys, DATA_KEY_FIELD) is None
        assert await redis.hget(RedisKeys(whole).data_key("task:t1"), DATA_KEY_FIELD) is None
        assert await redis.hget(b_keys, DATA_KEY_FIELD)

        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=tenant, agent="reader", shards=settings.shards
        ) as client:
            assert await client.get("user:a:secret") is None
            kept = await client.get("user:b:secret")
            assert kept is not None and kept.value == {"api": owners["user:b"][0].decode()}
            recalled = await client.recall("", owners=["user:b"], tags=["vault"])
            assert owners["user:b"][1].decode() in recalled.context

            # an archived sensitive memory is sealed in the archive tier too, and comes back
            await client.put("user:c:old", {"pin": f"PIN-{marker}"}, sensitive=True, wait="applied")
            archived = await client.archive("user:c", older_than=time.time() + 1)
            assert archived.status == "applied"
            record = await redis.hget(RedisKeys(tenant).archive("user:c"), "user:c:old")
            assert is_sealed(record)
            tier = await client.archived("user:c")
            assert [i.value for i in tier.items] == [{"pin": f"PIN-{marker}"}]
            assert (await client.restore("user:c:old")).status == "applied"
            back = await client.get("user:c:old")
            assert back is not None and back.value == {"pin": f"PIN-{marker}"}

        # Redis's history keeps the wrapped key until the append-only file is rewritten
        # (an operator's BGREWRITEAOF, or Redis's own automatic rewrite); after it, the
        # forgotten owner's key is nowhere on disk, so its sealed copies cannot be opened.
        await redis.bgrewriteaof()
        await _rewritten(redis)
        await _persisted(redis)
        needles = [*owners["user:a"], *owners["user:b"], *tenant_plain, f"PIN-{marker}".encode()]
        assert found_in_files(deployed.stack.data_dir / "nats", needles) == {}
        assert found_in_files(deployed.stack.data_dir / "redis", needles) == {}
        assert found_in_files(deployed.stack.data_dir / "redis", [wrapped_a, sealed_a]) == {}

        # the rebuild replays the log (the forgotten owners' commands are sealed again,
        # then shredded again by their forgets) and ends where the workers are
        live = await snapshot(redis)
        await rebuild_now(settings, nc, redis)
        rebuilt = await snapshot(redis)
        assert differences(live, rebuilt) == []
        assert any(tenant in name for name in live)  # the comparison covered the tenant

        # A forgotten owner that writes again gets a new key. A rebuild replays its old
        # commands under the key current then, its forget destroys that one and its new
        # writes get another: the same memories, compared by what they hold.
        vault = vault_of(settings, redis)
        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=tenant, agent="writer", shards=settings.shards
        ) as client:
            await client.put("user:a:again", {"v": 1}, sensitive=True, wait="applied")
            live = await snapshot(redis, vault=vault)
            await rebuild_now(settings, nc, redis)
            assert differences(live, await snapshot(redis, vault=vault)) == []
            # the workers read their keys afresh after the rebuild: old and new readable
            await deployed.services.workers[0].wait_owned(timeout=30)
            await client.put("user:a:after", {"v": 2}, sensitive=True, wait="applied")
            for key, value in (("user:a:again", {"v": 1}), ("user:a:after", {"v": 2})):
                got = await client.get(key)
                assert got is not None and got.value == value

        # the keys were generated for the stack, owner-only; JetStream encrypts its store
        data_dir = deployed.stack.data_dir
        for secret in (data_dir / "master.key", data_dir / "nats" / "jetstream.key"):
            assert secret.stat().st_mode & 0o777 == 0o600
        assert "cipher: chachapoly" in (data_dir / "nats" / "nats.conf").read_text()
    finally:
        await nc.close()
        await redis.aclose()


async def _rewritten(redis: Redis) -> None:
    for _ in range(100):
        info = await redis.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the AOF rewrite did not finish")


async def rebuild_now(settings: Settings, nc: object, redis: Redis) -> None:
    from zeromem.worker.rebuild import rebuild

    report = await rebuild(settings, nc=nc, redis=redis)  # type: ignore[arg-type]
    assert report.commands > 0


@pytest.mark.parametrize("deployed", [(True, "")], indirect=True)
async def test_erasing_a_tenant_purges_its_commands_and_the_rebuild_accepts_it(
    deployed: Deployment,
) -> None:
    """A tenant's erasure reaches the command log itself (its commands are on subjects of
    their own); the rebuild of what remains, the other tenants whole, equals the live state,
    although the erased tenant's commands were the log's first."""
    from zeromem import naming
    from zeromem.lifecycle.erasure import erase_tenant

    settings = deployed.settings
    marker = uuid.uuid4().hex
    gone, kept = f"g{marker[:10]}", f"k{marker[:10]}"
    erased = await _write(settings, gone, marker)  # first in the log
    remaining = await _write(settings, kept, marker + "k")
    redis = connect_redis(settings)
    nc = await connect_nats(settings, "erasure-test")
    try:
        js = nc.jetstream()
        erasure = await erase_tenant(nc, redis, gone)
        assert erasure.commands == 2 and erasure.changes >= 2 and erasure.audit >= 1
        assert erasure.redis_keys > 0
        for stream, subject in (
            (naming.COMMAND_STREAM, naming.command_tenant_subject(gone)),
            (naming.CHANGE_STREAM, naming.change_tenant_subject(gone)),
            (naming.AUDIT_STREAM, naming.audit_tenant_subject(gone)),
        ):
            info = await js.stream_info(stream, subjects_filter=subject)
            assert not info.state.subjects, (stream, info.state.subjects)
        log = await js.stream_info(naming.COMMAND_STREAM)
        assert log.state.first_seq > 1  # the log no longer starts at 1: a rebuild used to refuse
        assert not [k async for k in redis.scan_iter(match=f"zm:{gone}:*")]
        assert not await redis.sismember("zm:tenants", gone)

        async with await MemoryClient.connect(
            settings.bus.nats_url, tenant=kept, agent="reader", shards=settings.shards
        ) as client:
            got = await client.get("user:b:secret")
            assert got is not None and got.value == {"api": remaining["user:b"][0].decode()}

        await _rewritten(redis)
        await _persisted(redis)
        needles = [*erased["user:a"], *erased["user:b"]]
        assert found_in_files(deployed.stack.data_dir / "redis", needles) == {}
        assert found_in_files(deployed.stack.data_dir / "nats", needles) == {}

        live = await snapshot(redis)
        await rebuild_now(settings, nc, redis)
        rebuilt = await snapshot(redis)
        # A shard's recorded position may end lower after the rebuild: its last commands
        # were the erased tenant's, which no longer exist to be replayed (harmless: a
        # worker resumes past nothing).
        live.pop("zm:shard-seq", None)
        rebuilt.pop("zm:shard-seq", None)
        assert differences(live, rebuilt) == []
        assert any(kept in name for name in live)
    finally:
        await nc.close()
        await redis.aclose()


@pytest.mark.parametrize("deployed", [(True, "")], indirect=True)
async def test_a_writer_with_another_master_key_or_none_is_refused(deployed: Deployment) -> None:
    """A worker or rebuild whose master key is not the deployment's would seal what no
    other process opens, and one without a key would store sensitive memories in clear."""
    from zeromem.lifecycle.crypto import new_master_key
    from zeromem.lifecycle.vault import MasterKeyMismatchError, check_master_key, vault_of

    settings = deployed.settings
    redis = connect_redis(settings)
    try:
        await check_master_key(redis, vault_of(settings, redis))  # the workers' own: fine
        stranger = settings.with_(lifecycle={"master_key": new_master_key()})
        with pytest.raises(MasterKeyMismatchError, match="is not the key"):
            await check_master_key(redis, vault_of(stranger, redis))
        with pytest.raises(MasterKeyMismatchError, match="no ZEROMEM_MASTER_KEY"):
            await check_master_key(
                redis, vault_of(settings.with_(lifecycle={"master_key": ""}), redis)
            )
    finally:
        await redis.aclose()
