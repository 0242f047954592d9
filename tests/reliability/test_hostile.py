"""Hostile input: thousands of generated bad messages (random bytes, truncated msgpack,
wrong types, huge values, deep nesting, odd key characters, tenant and shard mismatches)
interleaved with valid commands. No crash; each bad one dead-lettered with a reason; each
valid one applied."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable

import msgspec
import pytest

from tests.reliability.cluster import Cluster, scale
from tests.reliability.history import Report, dead_letters, summarize, wait_idle
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis, provision
from zeromem.ids import new_command_id
from zeromem.schemas import DeadLetter, Put, encode, encode_batch
from zeromem.store.keys import RedisKeys

_pack = msgspec.msgpack.encode


def _base(rng: random.Random, tenant: str, owner: str) -> dict[str, object]:
    return {
        "op": "put",
        "id": new_command_id(),
        "tenant": tenant,
        "agent": "fuzz",
        "ts": time.time(),
        "key": f"{owner}:k{rng.randrange(4)}",
        "value": rng.random(),
    }


def _nested(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"  # [[[...[nil]...]]] as raw msgpack


# Each generator returns (family, payload) for a message that the contract rejects, given
# the tenant and the owner whose shard the message is published to.
Gen = Callable[[random.Random, str, str], tuple[str, bytes]]


def random_bytes(rng: random.Random, tenant: str, owner: str) -> tuple[str, bytes]:
    data = rng.randbytes(rng.randrange(0, 300))
    # a stray valid msgpack map header would still fail validation; only the empty map and
    # a few scalars could decode as something else, and none of them is a command
    return "random_bytes", data


def truncated(rng: random.Random, tenant: str, owner: str) -> tuple[str, bytes]:
    full = _pack(_base(rng, tenant, owner))
    return "truncated", full[: rng.randrange(1, len(full) - 1)]


def wrong_type(rng: random.Random, tenant: str, owner: str) -> tuple[str, bytes]:
    msg = _base(rng, tenant, owner)
    field, bad = rng.choice(
        [
            ("ts", "yesterday"),
            ("id", 12345),
            ("agent", None),
            ("expected_version", -1),
            ("expected_version", "3"),
            ("tags", "not-a-list"),
            ("confidence", 7.5),
            ("op", "explode"),
            ("type", "nonsense"),
            ("ttl_s", -4),
            ("v", 2),
            ("content", "x" * 201),
            ("key", 42),
            ("unknown_field", 1),
            ("tenant", ["a"]),
        ]
    )
    msg[field] = bad
    return "wrong_type", _pack(msg)


def huge_value(rng: random.Random, tenant: str, owner: str) -> tuple[str, bytes]:
    msg = _base(rng, tenant, owner)
    msg["value"] = "v" * (64 * 1024 + rng.randrange(1, 200_000))
    return "huge_value", _pack(msg)


def deep_nesting(rng: random.Random, tenant: str, owner: str) -> tuple[str, bytes]:
    msg = _base(rng, tenant, owner)
    msg["value"] = msgspec.Raw(_nested(rng.randrange(2_000, 60_000)))
    return "deep_nesting", _pack(msg)


def odd_key(rng: random.Random, tenant: str, owner: str) -> tuple[str, bytes]:
    msg = _base(rng, tenant, owner)
    ns, oid = owner.split(":")
    msg["key"] = rng.choice(
        [
            f"{owner}:na me",
            f"{owner}:k\x00",
            f"{owner}:",
            f"{ns}::{oid}",
            f"{owner}:a:b",
            f"{owner}:ключ\u202e",
            f"{owner}:" + "k" * 600,
            f"{owner}:*>",
            "",  # "\n": xfail below
            f"{ns}",
            f"{owner}:k,{rng.randrange(99)}",
            f"{owner}:k#",
        ]
    )
    return "odd_key", _pack(msg)


def tenant_mismatch(rng: random.Random, tenant: str, owner: str) -> tuple[str, bytes]:
    msg = _base(rng, tenant, owner)
    msg["tenant"] = f"{tenant}x"
    return "tenant_mismatch", _pack(msg)


def not_a_map(rng: random.Random, tenant: str, owner: str) -> tuple[str, bytes]:
    return "not_a_map", _pack(rng.choice([[1, 2, 3], "put", 42, None, {"op": 1}, {}]))


GENERATORS: list[Gen] = [
    random_bytes,
    truncated,
    wrong_type,
    huge_value,
    deep_nesting,
    odd_key,
    tenant_mismatch,
    not_a_map,
]
# Bad commands that still frame as msgpack, so a batch message can carry them among good
# ones: each is refused alone and its neighbours are applied.
IN_BATCH: list[Gen] = [wrong_type, odd_key, tenant_mismatch, not_a_map]


@pytest.mark.parametrize("backlog", [False, True], ids=["live", "backlog"])
async def test_hostile_input_interleaved_with_valid_traffic(
    cluster: Cluster, tenant: str, backlog: bool
) -> None:
    """``backlog``: everything is published before the workers start (workers down during
    a deploy), so each shard takes in full windows of refused messages at once: the case
    where acknowledging them was quadratic and, on a loaded machine, held the workers'
    loops until their leases expired, over and over."""
    workers = [] if backlog else await cluster.start_services(workers=2, serve=False)
    shards = cluster.settings.shards
    bad_count = int(scale(3_000, 40_000))  # short: every family still ~100+ times
    valid_every = 4  # one valid command between every few bad ones
    rng = random.Random(20241129)
    owners = [f"user:h{i}" for i in range(16)]
    nc = await connect_nats(cluster.settings, "hostile")  # the operator's: any agent's subject
    js = nc.jetstream(publish_async_max_pending=2000)
    if backlog:
        await provision(js, cluster.settings)
    bad_seqs: dict[tuple[int, int | None], str] = {}
    valid_keys: list[str] = []
    families: Counter[str] = Counter()
    acks: list[tuple[str, asyncio.Future[object], int | None]] = []
    started = time.monotonic()
    try:
        for i in range(bad_count):
            owner = rng.choice(owners)
            shard = naming.shard_for(tenant, owner, shards)
            family, payload = rng.choice(GENERATORS)(rng, tenant, owner)
            if i % 97 == 0:  # a well-formed command on a shard that is not its owner's
                family = "wrong_shard"
                payload = _pack(_base(rng, tenant, owner))
                shard = (shard + 1) % shards
            families[family] += 1
            if i % 50 == 25:  # inside a batch message, between two valid commands
                family, payload = rng.choice(IN_BATCH)(rng, tenant, owner)
                shard = naming.shard_for(tenant, owner, shards)
                around = []
                for side in ("a", "b"):
                    key = f"{owner}:valid{i}{side}"
                    valid_keys.append(key)
                    around.append(
                        encode(
                            Put(
                                id=new_command_id(),
                                tenant=tenant,
                                agent="ok",
                                ts=time.time(),
                                key=key,
                                value={"i": i},
                            )
                        )
                    )
                ack = await js.publish_async(
                    naming.command_subject(tenant, shard, "ok"),
                    encode_batch([around[0], payload, around[1]]),
                    headers={naming.BATCH_HEADER: "3"},
                )
                acks.append((f"batched_{family}", ack, 1))
                continue
            if i % 50 == 45:  # a batch whose framing is broken: refused whole
                family = "broken_batch"
                payload = b"\x93" + _pack(_base(rng, tenant, owner))
                headers = {naming.BATCH_HEADER: "3"}
            else:
                headers = None
            subject = naming.command_subject(tenant, shard, "fuzz")
            acks.append((family, await js.publish_async(subject, payload, headers=headers), None))
            if i % valid_every == 0:
                key = f"{owner}:valid{i}"
                valid_keys.append(key)
                command = Put(
                    id=new_command_id(),
                    tenant=tenant,
                    agent="ok",
                    ts=time.time(),
                    key=key,
                    value={"i": i},
                )
                own_shard = naming.shard_for(tenant, owner, shards)
                await js.publish_async(
                    naming.command_subject(tenant, own_shard, "ok"),
                    encode(command),
                    headers={naming.MSG_ID_HEADER: command.id},
                )
        await js.publish_async_completed()
        if backlog:
            workers = await cluster.start_services(workers=2, serve=False)
        for family, ack, index in acks:
            bad_seqs[(ack.result().seq, index)] = family  # type: ignore[attr-defined]
        await wait_idle(nc, shards, limit_s=scale(120, 600))
        elapsed = time.monotonic() - started

        # Every bad message's dead letter, found by its stream sequence, with a reason.
        letters: dict[tuple[int, int | None], DeadLetter] = {
            (letter.stream_seq, letter.batch_index): letter for letter in await dead_letters(nc)
        }
    finally:
        await nc.close()

    redis = connect_redis(cluster.settings)
    try:
        versions = [await redis.hget(RedisKeys(tenant).item(k), "v") for k in valid_keys]
    finally:
        await redis.aclose()

    missing = {seq: fam for seq, fam in bad_seqs.items() if seq not in letters}
    reasonless = [seq for seq in bad_seqs if seq in letters and not letters[seq].reason]
    not_applied = [k for k, v in zip(valid_keys, versions, strict=True) if v != b"1"]
    reasons = Counter(letters[s].reason.split(":", 1)[0] for s in bad_seqs if s in letters)
    report = Report(
        "hostile input" + (", published before the workers started" if backlog else ""),
        attempted=bad_count + len(valid_keys),
        acknowledged=bad_count + len(valid_keys),
        applied=len(valid_keys) - len(not_applied),
        lost=len(missing) + len(not_applied),
    )
    report.extra.update(
        bad=bad_count,
        dead_lettered=len(bad_seqs) - len(missing),
        valid=len(valid_keys),
        seconds=round(elapsed, 1),
        reasons=dict(reasons),
    )
    summarize(report.line())
    assert all(w.alive for w in workers), "a worker process died on hostile input"
    assert not missing, f"bad messages not dead-lettered: {Counter(missing.values())}"
    assert not reasonless
    assert not not_applied, f"{len(not_applied)} valid commands not applied: {not_applied[:5]}"


def test_key_with_a_trailing_newline_is_refused() -> None:
    from zeromem.schemas import DecodeError, decode_command

    msg = _base(random.Random(1), "acme", "user:h1")
    msg["key"] = "user:h1:k\n"
    with pytest.raises(DecodeError):
        decode_command(_pack(msg))
