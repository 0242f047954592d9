"""Fault containment on the write path: one bad command never stalls its shard.

Each test publishes a message that once stalled a shard for every tenant (issue 12), then
requires a canary, another tenant's put on the same shard, to be applied within 2 s, and
the bad message to be dead-lettered with a reason that names what was wrong.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
import pytest

from tests.harness import ServiceSet
from tests.reliability.history import dead_letters as read_dead_letters
from zeromem import naming
from zeromem.bus import connect_nats
from zeromem.schemas import DeadLetter, encode_batch
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings

CANARY_LIMIT_S = 2.0


def owner_on_shard(tenant: str, shard: int, shards: int, stem: str = "c") -> str:
    """An owner of ``tenant`` whose commands go to ``shard``."""
    for i in range(10_000):
        owner = f"user:{stem}{i}"
        if naming.shard_for(tenant, owner, shards) == shard:
            return owner
    raise AssertionError("no owner found")


def raw_command(tenant: str, key: str, **fields: object) -> bytes:
    base: dict[object, object] = {
        "op": "put",
        "id": f"h{time.time_ns()}",
        "tenant": tenant,
        "agent": "hostile",
        "ts": time.time(),
        "key": key,
    }
    base.update(fields)
    return msgspec.msgpack.encode(base)


async def canary_delay(settings: Settings, shard: int, tenant: str = "canary") -> float:
    """Seconds until another tenant's put on ``shard`` is applied (inf: not in time)."""
    owner = owner_on_shard(tenant, shard, settings.shards)
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant=tenant, shards=settings.shards, timeout=CANARY_LIMIT_S
    ) as client:
        started = time.monotonic()
        try:
            receipt = await client.put(f"{owner}:alive", time.time(), wait="applied")
        except Exception:
            return float("inf")
        assert receipt.status == "applied", receipt
        return time.monotonic() - started


async def dead_letters(settings: Settings) -> list[DeadLetter]:
    nc = await connect_nats(settings, "containment-test")
    try:
        return await read_dead_letters(nc)
    finally:
        await nc.close()


async def publish(
    settings: Settings, subject: str, data: bytes, headers: dict[str, str] | None = None
) -> None:
    nc = await connect_nats(settings, "containment-publisher")
    try:
        await nc.jetstream().publish(subject, data, headers=headers)
    finally:
        await nc.close()


@pytest.fixture
async def stack(isolated: Settings):  # type: ignore[no-untyped-def]
    services = await ServiceSet.start(isolated)
    try:
        yield isolated, services
    finally:
        await services.stop()


async def test_a_patch_with_mixed_map_keys_is_refused_and_its_shard_goes_on(stack) -> None:
    settings, _ = stack
    shard = naming.shard_for("acme", "user:u1", settings.shards)
    await publish(
        settings,
        naming.command_subject("acme", shard, "hostile"),
        raw_command("acme", "user:u1:nowhere", op="patch", patch={"a": 1, 2: 3}),
    )
    assert await canary_delay(settings, shard) < CANARY_LIMIT_S
    (letter,) = await dead_letters(settings)
    assert "map_keys" in letter.reason, letter.reason


async def test_a_batch_of_50000_nils_is_refused_whole_without_a_flood_of_logs(
    stack, caplog: pytest.LogCaptureFixture
) -> None:
    settings, _ = stack
    shard = naming.shard_for("acme", "user:u1", settings.shards)
    caplog.set_level(logging.INFO, logger="zeromem")
    await publish(
        settings,
        naming.command_subject("acme", shard, "hostile"),
        encode_batch([b"\xc0"] * 50_000),
        headers={naming.BATCH_HEADER: "50000"},
    )
    assert await canary_delay(settings, shard) < CANARY_LIMIT_S
    letters = await dead_letters(settings)
    assert len(letters) == 1 and "batch_commands" in letters[0].reason, letters[:2]
    assert len(letters[0].raw) > 50_000  # kept whole
    worker_lines = [r for r in caplog.records if r.name.startswith("zeromem.worker")]
    assert len(worker_lines) < 20, len(worker_lines)


async def test_a_600_deep_nested_patch_is_refused_at_admission(stack) -> None:
    settings, _ = stack
    shard = naming.shard_for("acme", "user:u1", settings.shards)
    deep = msgspec.Raw(b"\x91" * 600 + b"\xc0")
    await publish(
        settings,
        naming.command_subject("acme", shard, "hostile"),
        raw_command("acme", "user:u1:k", op="patch", patch={"a": deep}),
    )
    assert await canary_delay(settings, shard) < CANARY_LIMIT_S
    (letter,) = await dead_letters(settings)
    assert "nesting_depth" in letter.reason, letter.reason


async def test_a_forget_with_a_non_finite_bound_is_refused(stack) -> None:
    # NaN reached Redis as a sorted-set bound, whose error was taken for an outage and
    # retried for ever.
    settings, _ = stack
    shard = naming.shard_for("acme", "user:u1", settings.shards)
    await publish(
        settings,
        naming.command_subject("acme", shard, "hostile"),
        raw_command("acme", "user:u1", op="forget", since=float("nan")),
    )
    assert await canary_delay(settings, shard) < CANARY_LIMIT_S
    (letter,) = await dead_letters(settings)
    assert "non_finite" in letter.reason, letter.reason


async def test_a_command_the_engine_cannot_handle_is_rejected_and_dead_lettered(stack) -> None:
    """Whatever fails inside the worker for one command (here: deciding it) becomes that
    command's rejected result and a dead letter naming the exception class; its
    neighbours in the batch are applied."""
    settings, services = stack
    worker = services.workers[0]
    original = worker.engine.decide

    def decide(command, key, state, now, importing=False):  # type: ignore[no-untyped-def]
        if key.endswith(":boom"):
            raise ZeroDivisionError("boom")
        return original(command, key, state, now, importing)

    worker.engine.decide = decide
    shard = naming.shard_for("acme", "user:u1", settings.shards)
    parts = [
        raw_command("acme", f"user:u1:{name}", value=i)
        for i, name in enumerate(("before", "boom", "after"))
    ]
    await publish(
        settings,
        naming.command_subject("acme", shard, "hostile"),
        encode_batch(parts),
        headers={naming.BATCH_HEADER: "3"},
    )
    assert await canary_delay(settings, shard) < CANARY_LIMIT_S
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant="acme", shards=settings.shards
    ) as client:
        assert (await client.get("user:u1:before")) is not None
        assert (await client.get("user:u1:after")) is not None
        assert (await client.get("user:u1:boom")) is None
    (letter,) = await dead_letters(settings)
    assert "ZeroDivisionError" in letter.reason and letter.batch_index == 1, letter


async def test_a_failure_that_keeps_recurring_is_dead_lettered_after_bounded_attempts(
    stack,
) -> None:
    """A fault outside any one command's stage (here: the audit publish of the batch)
    that keeps recurring is no outage: the message is retried a bounded number of times,
    then dead-lettered whole, and the shard goes on."""
    settings, services = stack
    worker = services.workers[0]
    original = worker.outbox.publish_audit
    poisoned: set[int] = set()

    async def publish_audit(shard, batch, results):  # type: ignore[no-untyped-def]
        if any(item.key.endswith(":poison") for item in batch):
            poisoned.add(len(poisoned))
            raise ValueError("cannot audit this")
        return await original(shard, batch, results)

    worker.outbox.publish_audit = publish_audit
    shard = naming.shard_for("acme", "user:u1", settings.shards)
    await publish(
        settings,
        naming.command_subject("acme", shard, "hostile"),
        raw_command("acme", "user:u1:poison", value=1),
    )
    assert await canary_delay(settings, shard) < CANARY_LIMIT_S + 3.0  # the attempts' backoff
    letters = await dead_letters(settings)
    assert any("ValueError" in letter.reason for letter in letters), letters
    assert 1 < len(poisoned) <= worker.limits.message_attempts + 1
    await asyncio.sleep(0.5)
    attempts = len(poisoned)
    await asyncio.sleep(1.0)
    assert len(poisoned) == attempts  # not retried any more
