"""The write path's decision rules, without servers."""

from __future__ import annotations

import json

import msgspec
import pytest

from zeromem.schemas import (
    Applied,
    Conflict,
    Delete,
    Expire,
    Feedback,
    FeedbackKind,
    MemoryType,
    Patch,
    Put,
    Rejected,
)
from zeromem.store.items import KeyState
from zeromem.store.keys import redis_keys, tenants_key
from zeromem.store.postings import posting_score, posting_tf
from zeromem.worker.engine import SADD, TOMBSTONE, ZADD, Analysis, Engine
from zeromem.worker.merge_patch import merge_patch


def analyse(item):  # a tiny stand-in analyser: one term per word
    terms: dict[str, int] = {}
    for word in item.content.lower().split():
        terms[word] = terms.get(word, 0) + 1
    return Analysis(terms, sum(terms.values()), len(item.content.split()))


@pytest.fixture
def engine() -> Engine:
    return Engine(analyse, lambda v: json.dumps(v)[:200], "cl100k_base")


def put(key: str = "user:u1:lang", value: object = "zh", **kw: object) -> Put:
    return Put(id=kw.pop("id", "c1"), tenant="acme", agent="a", ts=1.0, key=key, value=value, **kw)  # type: ignore[arg-type]


def test_put_creates_at_version_one_then_bumps(engine: Engine) -> None:
    state = KeyState()
    first = engine.decide(put(content="prefers zh"), "user:u1:lang", state, now=10.0)
    assert isinstance(first.result, Applied) and first.result.version == 1
    second = engine.decide(put(id="c2", value="en"), "user:u1:lang", state, now=11.0)
    assert second.result.version == 2 and second.base_version == 1 and second.base_command == "c1"
    assert (
        state.item is not None and state.item.created_at == 10.0 and state.item.updated_at == 11.0
    )


def test_expected_version_semantics(engine: Engine) -> None:
    state = KeyState()
    assert isinstance(
        engine.decide(put(expected_version=0), "user:u1:lang", state, 1.0).result, Applied
    )
    conflict = engine.decide(put(id="c2", expected_version=0), "user:u1:lang", state, 2.0).result
    assert isinstance(conflict, Conflict) and conflict.current_version == 1
    assert isinstance(
        engine.decide(put(id="c3", expected_version=1), "user:u1:lang", state, 3.0).result, Applied
    )
    stale = engine.decide(put(id="c4", expected_version=1), "user:u1:lang", state, 4.0).result
    assert isinstance(stale, Conflict) and stale.current_version == 2


def test_delete_leaves_a_versioned_tombstone(engine: Engine) -> None:
    state = KeyState()
    engine.decide(put(), "user:u1:lang", state, 1.0)
    gone = engine.decide(
        Delete(id="d", tenant="acme", agent="a", ts=2, key="user:u1:lang"),
        "user:u1:lang",
        state,
        2.0,
    )
    assert gone.action == TOMBSTONE and gone.new_version == 2 and state.item is None
    # an old compare-and-set can never match a newer memory of the same key
    again = engine.decide(put(id="c9", expected_version=1), "user:u1:lang", state, 3.0).result
    assert isinstance(again, Conflict) and again.current_version == 0
    recreated = engine.decide(put(id="c10", expected_version=0), "user:u1:lang", state, 4.0).result
    assert isinstance(recreated, Applied) and recreated.version == 3


def test_patch_merges_and_missing_keys_are_rejected(engine: Engine) -> None:
    state = KeyState()
    missing = engine.decide(
        Patch(id="p0", tenant="acme", agent="a", ts=1, key="user:u1:p", patch={"a": 1}),
        "user:u1:p",
        state,
        1.0,
    ).result
    assert isinstance(missing, Rejected) and missing.reason.startswith("not_found")
    engine.decide(put(key="user:u1:p", value={"a": 1, "b": {"c": 2}}), "user:u1:p", state, 1.0)
    patch = Patch(
        id="p1",
        tenant="acme",
        agent="a",
        ts=2,
        key="user:u1:p",
        patch={"b": {"c": None, "d": 3}, "e": [1]},
    )
    patched = engine.decide(patch, "user:u1:p", state, 2.0)
    assert patched.item is not None and patched.item.value == {"a": 1, "b": {"d": 3}, "e": [1]}
    assert patched.item.content == json.dumps(patched.item.value)[:200]  # derived content follows


def test_expiry_and_reaping(engine: Engine) -> None:
    state = KeyState()
    engine.decide(put(ttl_s=5.0), "user:u1:lang", state, 100.0)
    assert state.item is not None and state.item.expires_at == 105.0
    assert engine.reap("acme", "user:u1:lang", state, 104.0) is None
    assert state.live(105.0) is None  # expired memories are invisible before the reaper runs
    patch = Patch(id="p", tenant="acme", agent="a", ts=1, key="user:u1:lang", patch={})
    assert isinstance(engine.decide(patch, "user:u1:lang", state, 106.0).result, Rejected)
    reaped = engine.reap("acme", "user:u1:lang", state, 106.0)
    assert reaped is not None and reaped.result.op == "expired"
    assert any(op[0] == "zr" and op[1].endswith(":exp") for op in reaped.ops)


def test_expire_sets_and_clears_ttl(engine: Engine) -> None:
    state = KeyState()
    engine.decide(put(), "user:u1:lang", state, 100.0)
    expire = Expire(id="e1", tenant="acme", agent="a", ts=1, key="user:u1:lang", ttl_s=60)
    ttl = engine.decide(expire, "user:u1:lang", state, 101.0)
    assert ttl.item is not None and ttl.item.expires_at == 161.0
    cleared = engine.decide(
        Expire(id="e2", tenant="acme", agent="a", ts=1, key="user:u1:lang"),
        "user:u1:lang",
        state,
        102.0,
    )
    assert cleared.item is not None and cleared.item.expires_at is None
    assert any(op[0] == "zr" and op[1].endswith(":exp") for op in cleared.ops)


def test_feedback_counts_without_a_version_bump(engine: Engine) -> None:
    state = KeyState()
    engine.decide(put(), "user:u1:lang", state, 1.0)
    liked = engine.decide(
        Feedback(
            id="f", tenant="acme", agent="b", ts=1, key="user:u1:lang", kind=FeedbackKind.LIKED
        ),
        "user:u1:lang",
        state,
        2.0,
    )
    assert liked.guarded is False and liked.feedback_field == "fl" and state.version == 1
    assert state.feedback.liked == 1


def test_index_ops_follow_tag_type_and_term_changes(engine: Engine) -> None:
    state = KeyState()
    first = engine.decide(put(content="alpha beta", tags=("x", "y")), "user:u1:lang", state, 1.0)
    assert ("sa", "zm:acme:o:{user:u1}:tg:x", "user:u1:lang", "") in first.ops
    second = engine.decide(
        put(id="c2", content="beta gamma", tags=("y", "z"), type=MemoryType.DECISION),
        "user:u1:lang",
        state,
        2.0,
    )
    ops = set(second.ops)
    assert ("sr", "zm:acme:o:{user:u1}:tg:x", "user:u1:lang", "") in ops
    assert ("sa", "zm:acme:o:{user:u1}:tg:z", "user:u1:lang", "") in ops
    assert ("sr", "zm:acme:o:{user:u1}:ty:fact", "user:u1:lang", "") in ops
    assert ("zr", "zm:acme:o:{user:u1}:w:alpha", "user:u1:lang", "") in ops
    assert ("za", "zm:acme:o:{user:u1}:w:gamma", posting_score(1, 1.0), "user:u1:lang") in ops
    assert not any(op[1].endswith(":w:beta") for op in ops)  # a kept term is not touched
    deltas = {op[2]: op[3] for op in ops if op[0] == "hi"}
    assert deltas["n:fact"] == -1 and deltas["n:decision"] == 1 and "n" not in deltas


def test_a_rewrite_with_the_same_content_only_moves_the_time_index(engine: Engine) -> None:
    # Same content, and a value whose indexed text (its strings) is the same: a counter.
    state = KeyState()
    engine.decide(
        put(value={"n": 1}, content="alpha beta", tags=("x",)), "user:u1:lang", state, 1.0
    )
    again = engine.decide(
        put(id="c2", value={"n": 2}, content="alpha beta", tags=("x",)), "user:u1:lang", state, 2.0
    )
    assert again.ops == [("za", "zm:acme:o:{user:u1}:t", 2.0, "user:u1:lang")]


def test_posting_score_keeps_tf_and_time() -> None:
    score = posting_score(7, 1_795_000_000.923)
    # whole seconds: an integer score, which Redis's small sorted sets store as one
    assert type(score) is int and score == 7 * 10**10 + 1_795_000_000
    assert posting_tf(score) == 7 and posting_tf(float(score)) == 7


def test_merge_patch_rfc7396_examples() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": ["b"]}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "c"}, ["b"]) == ["b"]
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert merge_patch([1, 2], {"a": "b", "c": None}) == {"a": "b"}
    assert merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}


@pytest.mark.parametrize(
    ("tags", "ttl_s"),
    [((), None), (("billing",), 60.0), (("a", "b", "a", "c", "b"), None), (("x", "y"), 3600.0)],
)
def test_a_new_memorys_operations_add_every_entry_in_order(
    engine: Engine, tags: tuple[str, ...], ttl_s: float | None
) -> None:
    # The new-memory path builds its operations without ``_entries``'s mapping: they must
    # be the adds of that mapping's entries, in its order, a repeated tag added once.
    key = "user:u1:note"
    new = engine.decide(
        put(key, "v", content="the cat sat on the mat mat", type=MemoryType.DECISION, ttl_s=ttl_s),
        key,
        KeyState(),
        now=10.0,
    ).item
    assert new is not None
    item = msgspec.structs.replace(new, tags=tags)  # repeated ones too: a put never keeps them
    doc = analyse(item)
    entries = engine._entries("acme", key, item, doc)
    expected = [(SADD, tenants_key(redis_keys("acme").shard_of("user:u1")), "acme", "")] + [
        (SADD, rkey, key, "") if kind == "s" else (ZADD, rkey, score, key)
        for (rkey, kind), score in entries.items()
    ]
    assert engine._new_entry_ops("acme", key, "user:u1", item, doc) == expected
    ops = engine._write_ops("acme", key, None, item, "c1")
    assert ops[: len(expected)] == expected
