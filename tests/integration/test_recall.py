"""Recall through the real stack: filters, strategies, decay, feedback, budget, references,
deletes and expiry, tenants."""

from __future__ import annotations

import asyncio

import pytest

from zeromem.schemas import StrategyError
from zeromem.sdk import MemoryClient, RequestRejectedError
from zeromem.store.tokens import count_tokens


async def seed(client: MemoryClient) -> None:
    puts = [
        ("user:u1:pref_lang", "User prefers answers in Chinese", "user_preference", ("lang",), ()),
        (
            "user:u1:pref_style",
            "User likes concise answers with code samples",
            "user_preference",
            ("style",),
            ("user:u1:pref_lang",),
        ),
        ("user:u1:order_a1", "Order A12345 shipped on 2026-11-20 via DHL", "fact", ("orders",), ()),
        (
            "user:u1:invoice",
            "Invoice INV-77 for order A12345 is paid",
            "tool_result",
            ("billing",),
            ("user:u1:order_a1",),
        ),
        (
            "task:t42:status",
            "Task t42 is blocked waiting for the invoice API",
            "task_state",
            (),
            (),
        ),
        ("user:u2:pref_lang", "User prefers answers in French", "user_preference", ("lang",), ()),
    ]
    for key, content, type_, tags, refs in puts:
        await client.put(
            key,
            {"k": key},
            content=content,
            type=type_,
            tags=tags,
            references=refs,
            wait="applied" if key.startswith(("task:", "user:u2")) else "none",
        )
    for i in range(30):
        # an owner's commands apply in order: once the last is applied, all of them are
        await client.put(
            "user:u1",
            f"turn {i}",
            content=f"small talk about the weather, turn {i}",
            type="message",
            wait="applied" if i == 29 else "none",
        )


async def test_relevant_memories_come_first_and_fit_the_budget(client: MemoryClient) -> None:
    await seed(client)
    reply = await client.recall(
        "which language should answers be in?", owners=["user:u1"], k=3, budget=120
    )
    assert reply.memories[0].key == "user:u1:pref_lang"
    assert reply.tokens <= 120
    assert reply.tokens == count_tokens(reply.context)
    assert (
        reply.baseline_tokens > reply.tokens
        and reply.saved_tokens == reply.baseline_tokens - reply.tokens
    )
    assert "user:u2" not in reply.context  # another owner's preference is out of scope


async def test_budget_is_never_exceeded(client: MemoryClient) -> None:
    await seed(client)
    for budget in (1, 10, 25, 40, 80, 200, 1500):
        reply = await client.recall(
            "answers order invoice weather", owners=["user:u1", "task:t42"], k=10, budget=budget
        )
        assert reply.tokens <= budget
        assert count_tokens(reply.context) == reply.tokens


async def test_references_are_pulled_in_after_their_memory(client: MemoryClient) -> None:
    await seed(client)
    reply = await client.recall("invoice INV-77 paid", owners=["user:u1"], k=1, budget=500)
    keys = [m.key for m in reply.memories]
    assert keys[:2] == ["user:u1:invoice", "user:u1:order_a1"]
    assert reply.memories[1].via == "user:u1:invoice"
    tight = await client.recall(
        "invoice INV-77 paid", owners=["user:u1"], k=1, budget=reply.memories[0].tokens
    )
    assert [m.key for m in tight.memories] == ["user:u1:invoice"]  # no room for the reference


async def test_filters_by_type_tag_prefix_and_time(client: MemoryClient) -> None:
    await seed(client)
    by_type = await client.recall("answers", owners=["user:u1"], types=["user_preference"], k=10)
    assert {m.key for m in by_type.memories} == {"user:u1:pref_lang", "user:u1:pref_style"}
    by_tag = await client.recall("", owners=["user:u1"], tags=["billing"], k=10)
    assert [m.key for m in by_tag.memories if not m.via] == ["user:u1:invoice"]
    by_prefix = await client.recall("order", prefix="user:u1:order", k=10)
    assert [m.key for m in by_prefix.memories] == ["user:u1:order_a1"]
    future = await client.recall("answers", owners=["user:u1"], since=4_000_000_000.0)
    assert future.memories == () and future.baseline_tokens == 0
    # the baseline counts exactly the filtered memories
    prefs = await client.recall(
        "", owners=["user:u1"], types=["user_preference"], k=10, budget=10_000
    )
    assert prefs.baseline_tokens == sum(
        count_tokens(c)
        for c in ("User prefers answers in Chinese", "User likes concise answers with code samples")
    )


async def test_strategies_by_tag_by_type_and_compose(client: MemoryClient) -> None:
    await seed(client)
    plain = await client.recall("order invoice", owners=["user:u1"], k=2, budget=1000)
    boosted = await client.recall(
        "order invoice",
        owners=["user:u1"],
        k=2,
        budget=1000,
        strategy={"name": "by_tag", "tags": ["orders"], "boost": 50},
    )
    # the invoice (both query terms) leads on relevance alone; the boost puts the order first
    assert plain.memories[0].key == "user:u1:invoice"
    assert boosted.memories[0].key == "user:u1:order_a1"
    only_facts = await client.recall(
        "order invoice",
        owners=["user:u1"],
        k=5,
        strategy={
            "name": "compose",
            "steps": [{"name": "by_type", "types": ["fact"], "only": True}, {"name": "no_decay"}],
        },
    )
    assert [m.key for m in only_facts.memories if not m.via] == ["user:u1:order_a1"]
    with pytest.raises(StrategyError, match="unknown strategy 'psychic'"):  # before sending
        await client.recall("x", owners=["user:u1"], strategy={"name": "psychic"})


async def test_time_window_and_decay(client: MemoryClient) -> None:
    await client.put("user:u3:old", 1, content="the parking code is 4411", wait="applied")
    await asyncio.sleep(1.2)
    await client.put("user:u3:new", 2, content="the parking code is 9922", wait="applied")
    window = await client.recall(
        "parking code", owners=["user:u3"], k=5, strategy={"name": "time_window", "seconds": 1.0}
    )
    assert [m.key for m in window.memories] == ["user:u3:new"]
    steep = await client.recall(
        "parking code",
        owners=["user:u3"],
        k=2,
        explain=True,
        strategy={"name": "recency", "half_life_s": 0.5, "floor": 0.0},
    )
    assert [m.key for m in steep.memories] == ["user:u3:new", "user:u3:old"]
    decays = {c.key: c.decay for c in steep.candidates}
    assert decays["user:u3:old"] < decays["user:u3:new"] < 1.0 + 1e-9


async def test_a_liked_memory_outranks_an_otherwise_equal_one(client: MemoryClient) -> None:
    await client.put("user:u4:a", 1, content="deploy with the blue pipeline", wait="applied")
    await client.put("user:u4:b", 2, content="deploy with the blue pipeline", wait="applied")
    before = await client.recall("blue pipeline deploy", owners=["user:u4"], k=2)
    loser = before.memories[1].key
    await client.feedback(loser, "liked", wait="applied")
    after = await client.recall("blue pipeline deploy", owners=["user:u4"], k=2, explain=True)
    assert after.memories[0].key == loser
    assert {c.key: c.feedback for c in after.candidates}[loser] == pytest.approx(5.0)
    await client.feedback(loser, "disliked", wait="applied")
    await client.feedback(loser, "disliked", wait="applied")
    assert (await client.recall("blue pipeline deploy", owners=["user:u4"], k=2)).memories[
        1
    ].key == loser


async def test_deleted_expired_and_rewritten_memories_are_never_returned(
    client: MemoryClient,
) -> None:
    await client.put("user:u5:gone", 1, content="zebra crossing password", wait="applied")
    await client.put(
        "user:u5:brief", 1, content="zebra crossing temporary", ttl=0.5, wait="applied"
    )
    await client.put("user:u5:changed", 1, content="zebra crossing first", wait="applied")
    await client.delete("user:u5:gone", wait="applied")
    await client.put("user:u5:changed", 2, content="a different topic entirely", wait="applied")
    await asyncio.sleep(0.6)
    reply = await client.recall("zebra crossing", owners=["user:u5"], k=10, explain=True)
    assert reply.memories == ()  # nothing left matches, and nothing unrelated is offered
    assert {c.key for c in reply.candidates} <= {"user:u5:changed"}
    assert (await client.search("zebra", owners=["user:u5"])) == []
    assert [m.key for m in await client.search("different topic", owners=["user:u5"])] == [
        "user:u5:changed"
    ]


async def test_a_tenant_never_sees_another_tenants_memories(running, tenant: str) -> None:
    async with (
        await MemoryClient.connect(running.bus.nats_url, tenant=tenant, shards=running.shards) as a,
        await MemoryClient.connect(
            running.bus.nats_url, tenant=tenant + "b", shards=running.shards
        ) as b,
    ):
        await a.put("user:u1:secret", 1, content="launch code is 0000", wait="applied")
        reply = await b.recall("launch code", owners=["user:u1"], k=5)
        assert reply.memories == () and reply.baseline_tokens == 0


async def test_explain_lists_every_candidate_with_a_reason(client: MemoryClient) -> None:
    await seed(client)
    reply = await client.recall("weather", owners=["user:u1"], k=2, budget=1500, explain=True)
    decisions = [c.decision for c in reply.candidates]
    assert decisions.count("kept") == 2
    assert any(d == "cut: below top k" for d in decisions)
    assert len(reply.candidates) >= 30


async def test_bad_requests_get_clear_errors(client: MemoryClient) -> None:
    with pytest.raises(RequestRejectedError, match="at least one owner"):
        await client.recall("anything")
    with pytest.raises(RequestRejectedError, match=r"o200k_base|encoding"):
        await client.recall("anything", owners=["user:u1"], encoding="no_such_encoding")
