"""The Redis key layouts (issue 17): on a Redis Cluster everything one commit call names
hashes to one slot; on one Redis the names are the ones before clusters existed."""

from __future__ import annotations

import json

from redis.crc import key_slot

from zeromem.naming import shard_for
from zeromem.schemas import Forget, Put
from zeromem.store.items import KeyState
from zeromem.store.keys import (
    SLOTS,
    Layout,
    RedisKeys,
    expiring_tenants_key,
    layout_scope,
    shard_lease_key,
    shard_sequence_key,
    tenants_key,
)
from zeromem.worker.engine import Analysis, Engine
from zeromem.worker.store import Store

SHARDS = 16


def _analyse(item):  # type: ignore[no-untyped-def]
    terms: dict[str, int] = {}
    for word in str(item.content).lower().split():
        terms[word] = terms.get(word, 0) + 1
    return Analysis(terms, sum(terms.values()), len(terms))


def _decision_keys(decision: tuple[object, ...]) -> set[str]:
    """Every Redis key a decision (``Store.decision``) names, as commit.lua reads it."""
    names = {str(decision[0]), str(decision[16])}
    names |= {str(k) for k in (decision[1], decision[17], decision[18]) if k}
    ops = list(decision[13])  # type: ignore[call-overload]
    names |= {str(ops[i + 1]) for i in range(0, len(ops), 4)}
    followers = list(decision[15])  # type: ignore[call-overload]
    names |= {str(followers[i]) for i in range(0, len(followers), 3)}
    return names


def _decisions(tenant: str, owner: str, shard: int) -> list[tuple[object, ...]]:
    engine = Engine(_analyse, lambda v: json.dumps(v)[:200], "cl100k_base")
    store = Store(None, result_ttl_s=60, tombstone_ttl_s=60, result_records=10)  # type: ignore[arg-type]
    state = KeyState()
    put = Put(
        id="c1",
        tenant=tenant,
        agent="a",
        ts=1.0,
        key=f"{owner}:k",
        value="v",
        content="the blue heron waits",
        tags=("bird",),
        ttl_s=60.0,
    )
    outcomes = [engine.decide(put, put.key, state, now=1.0)]
    rewrite = Put(id="c2", tenant=tenant, agent="a", ts=2.0, key=put.key, value="w", content="x")
    outcomes.append(engine.decide(rewrite, put.key, state, now=2.0))
    forget = Forget(id="c3", tenant=tenant, agent="a", ts=3.0, key=owner)
    outcomes += engine.decide_owner(forget, {put.key: state}, {}, 3.0)
    return [store.decision(o, 7, shard) for o in outcomes]


def test_on_a_cluster_every_key_of_a_commit_call_shares_its_shards_slot() -> None:
    with layout_scope(Layout(cluster=True, shards=SHARDS)):
        slots_by_shard: dict[int, set[int]] = {}
        for tenant in ("acme", "globex"):  # one call covers a shard's tenants together
            for n in range(40):
                owner = f"user:u{n}"
                shard = shard_for(tenant, owner, SHARDS)
                names = {shard_lease_key(shard), shard_sequence_key(shard)}
                names |= {tenants_key(shard), expiring_tenants_key(shard)}
                for decision in _decisions(tenant, owner, shard):
                    names |= _decision_keys(decision)
                slots_by_shard.setdefault(shard, set()).update(key_slot(n.encode()) for n in names)
        assert all(len(slots) == 1 for slots in slots_by_shard.values()), slots_by_shard
        # ... and different shards are different slots, so they spread over the masters
        assert len({next(iter(s)) for s in slots_by_shard.values()}) == len(slots_by_shard)


def test_one_redis_keeps_the_names_it_always_had() -> None:
    with layout_scope(Layout()):
        keys = RedisKeys("acme")
        assert keys.item("user:u1:k") == "zm:acme:m:user:u1:k"
        assert keys.keys(5) == keys.keys(0) == "zm:acme:keys"
        assert keys.expiring(3) == "zm:acme:exp"
        assert keys.stored(9) == "zm:acme:stored"
        assert keys.command("c1", 4) == "zm:acme:c:c1"
        assert keys.results(4) == "zm:acme:r:4"
        assert keys.by_term("user:u1", "heron") == "zm:acme:o:{user:u1}:w:heron"
        assert tenants_key(3) == "zm:tenants" and expiring_tenants_key(3) == "zm:exp-tenants"
        assert shard_sequence_key(3) == "zm:shard-seq" and shard_lease_key(3) == "zm:lease:3"
        assert list(keys.layout.pieces) == [0]


def test_a_cluster_layout_tags_each_piece_with_its_shard() -> None:
    with layout_scope(Layout(cluster=True, shards=SHARDS)):
        keys = RedisKeys("acme")
        shard = shard_for("acme", "user:u1", SHARDS)
        tag = keys.layout.tag(shard)
        assert tag.startswith(f"{{zs{shard}.") and tag.endswith("}:")
        assert keys.item("user:u1:k") == f"zm:acme:{tag}m:user:u1:k"
        assert keys.keys(2) == f"zm:acme:{keys.layout.tag(2)}keys"
        assert shard_lease_key(2) == f"zm:lease:{keys.layout.tag(2)[:-1]}"
        assert list(keys.layout.pieces) == list(range(SHARDS))
        # the tenant's pattern still finds every key of the tenant
        assert keys.item("user:u1:k").startswith(keys.tenant_pattern()[:-1])


def test_the_shards_spread_evenly_over_masters_that_split_the_slots_evenly() -> None:
    for shards, masters in ((16, 2), (16, 3), (128, 3), (8, 3), (256, 5)):
        with layout_scope(Layout(cluster=True, shards=shards)) as cluster:
            per = SLOTS // masters
            counts = [0] * masters
            for shard in range(shards):
                slot = key_slot(cluster.tag(shard).encode())
                counts[min(slot // per, masters - 1)] += 1
            assert max(counts) - min(counts) <= 1, (shards, masters, counts)


def test_a_cluster_is_named_by_the_setting_or_by_the_urls_scheme() -> None:
    from zeromem.settings import StoreSettings

    assert not StoreSettings(redis_url="redis://h:6379/0").cluster
    assert StoreSettings(redis_url="redis://h:6379/0", redis_cluster=True).cluster
    tls = StoreSettings(redis_url="rediss+cluster://u:p@h:6379/0")
    assert tls.cluster and tls.server_url == "rediss://u:p@h:6379/0"
