"""Every memory tool through the dispatcher, against the real servers; plus the hooks and
shadow mode, which write on the side."""

from __future__ import annotations

import json
from typing import Any

from tests.eventually import eventually
from zeromem.integrations.shadow import ShadowMode
from zeromem.sdk import MemoryClient
from zeromem.sdk.hooks import AutoMemory
from zeromem.tools import ToolDispatcher


async def call(tools: ToolDispatcher, name: str, args: dict[str, Any] | str) -> dict[str, Any]:
    out = await tools.call(name, args)
    parsed = json.loads(out)
    assert out == json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)  # compact
    return parsed


async def test_every_tool_against_the_service(client: MemoryClient) -> None:
    tools = ToolDispatcher(client)
    key = {"namespace": "user", "owner": "u10086"}
    wrote = await call(
        tools,
        "memory_write",
        {
            **key,
            "name": "pref_lang",
            "value": {"lang": "zh"},
            "content": "prefers answers in Chinese",
            "type": "user_preference",
        },
    )
    assert wrote == {"ok": True, "key": "user:u10086:pref_lang", "version": 1}
    await call(
        tools,
        "memory_write",
        json.dumps({**key, "name": "city", "value": "Hangzhou", "tags": ["profile"]}),
    )  # a JSON string too
    appended = await call(tools, "memory_write", {**key, "value": "asked about trains to Shanghai"})
    assert appended["ok"] and appended["key"].startswith("user:u10086:")

    read = await call(tools, "memory_read", {**key, "name": "pref_lang"})
    assert read == {"found": True, "value": {"lang": "zh"}, "version": 1}

    updated = await call(
        tools,
        "memory_update",
        {**key, "name": "pref_lang", "patch": {"formal": True}, "expected_version": 1},
    )
    assert updated == {"ok": True, "key": "user:u10086:pref_lang", "version": 2}
    stale = await call(
        tools,
        "memory_update",
        {**key, "name": "pref_lang", "patch": {"formal": False}, "expected_version": 1},
    )
    assert stale["ok"] is False and stale["conflict"] and stale["current_version"] == 2
    assert (await call(tools, "memory_read", {**key, "name": "pref_lang"}))["value"] == {
        "lang": "zh",
        "formal": True,
    }

    listed = await call(tools, "memory_list", key)
    assert {i["key"] for i in listed["items"]} >= {"user:u10086:pref_lang", "user:u10086:city"}
    assert all(set(i) == {"key", "content"} for i in listed["items"])
    only_city = await call(tools, "memory_list", {**key, "prefix": "ci"})
    assert [i["key"] for i in only_city["items"]] == ["user:u10086:city"]

    found = await call(tools, "memory_search", {"query": "Chinese", **key})
    assert found["results"][0]["key"] == "user:u10086:pref_lang"

    recalled = await call(
        tools, "memory_recall", {"query": "which language should I answer in", **key, "budget": 200}
    )
    assert "user:u10086:pref_lang" in recalled["keys"]
    assert "Chinese" in recalled["context"] and 0 < recalled["tokens"] <= 200

    deleted = await call(tools, "memory_delete", {**key, "name": "city"})
    assert deleted["ok"] is True
    assert await call(tools, "memory_read", {**key, "name": "city"}) == {"found": False}
    again = await call(tools, "memory_delete", {**key, "name": "city"})
    assert again["ok"] is False and again["found"] is False


async def test_not_found_and_bad_input_never_raise(client: MemoryClient) -> None:
    tools = ToolDispatcher(client)
    key = {"namespace": "task", "owner": "t42", "name": "status"}
    assert await call(tools, "memory_read", key) == {"found": False}
    assert await call(tools, "memory_read", {**key, "default": "pending"}) == {
        "found": False,
        "value": "pending",
    }
    for name, args in [
        ("memory_read", "{not json"),
        ("memory_read", "[1, 2]"),
        ("memory_read", {"namespace": "planet", "owner": "t42", "name": "x"}),
        ("memory_read", {"namespace": "task", "owner": "t 42", "name": "x"}),
        ("memory_write", {"namespace": "task", "owner": "t42"}),
        ("memory_write", {**key, "value": 1, "content": "x" * 201}),
        ("memory_update", {**key, "patch": {"a": 1}, "surprise": True}),
        ("memory_recall", {"query": "q", "namespace": "task", "owner": "t42", "budget": 10}),
        ("memory_forget_everything", {}),
    ]:
        out = await call(tools, name, args)
        assert set(out) == {"error"} and out["error"], (name, args, out)
    missing = await call(tools, "memory_update", {**key, "patch": {"a": 1}})
    assert missing["ok"] is False and missing["found"] is False


async def test_large_values_come_back_as_content(client: MemoryClient) -> None:
    tools = ToolDispatcher(client, max_value_chars=100)
    key = {"namespace": "task", "owner": "t9", "name": "log"}
    value = {"lines": [f"step {i} ok for order INV-{1000 + i}" for i in range(30)]}
    await call(tools, "memory_write", {**key, "value": value})
    read = await call(tools, "memory_read", key)
    assert read["value"] is None and read["value_omitted"] is True
    assert "INV-1000" in read["content"] and len(read["content"]) <= 200


async def test_fire_and_forget_tools(client: MemoryClient) -> None:
    tools = ToolDispatcher(client, wait="none")
    out = await call(
        tools, "memory_write", {"namespace": "agent", "owner": "a1", "name": "n", "value": 1}
    )
    assert out == {"ok": True, "key": "agent:a1:n", "status": "published"}
    assert await eventually(lambda: client.get("agent:a1:n"))


async def test_hooks_record_without_the_model(client: MemoryClient) -> None:
    auto = AutoMemory(client, owner="session:s1")
    result = {
        "flight": "NH 9401",
        "date": "2025-05-03",
        "price": "¥23,400",
        "legs": [{"from": "HND", "to": "KIX", "note": "x" * 300}],
    }
    receipt = await auto.tool_succeeded("book_flight", {"date": "2025-05-03"}, result)
    assert receipt is not None and receipt.status == "published"
    await auto.task_transition("t42", "running", previous="queued", detail="picked by worker-3")
    prefs = await auto.user_message(
        "请用中文回答。I don't like spicy food. Nice weather.", user="u10086"
    )
    assert len(prefs) == 2 and auto.errors == []

    page = await eventually(lambda: _items(client, "session:s1:"))
    (tool_item,) = page
    assert tool_item.type.value == "tool_result" and "tool:book_flight" in tool_item.tags
    assert tool_item.content.startswith("book_flight:") and len(tool_item.content) <= 200
    for token in ("NH 9401", "2025-05-03"):
        assert token in tool_item.content
    status = await eventually(lambda: client.get("task:t42:status"))
    assert status.value["state"] == "running" and status.type.value == "task_state"
    assert "queued -> running" in status.content
    history = await eventually(lambda: _items(client, "task:t42:0"))
    assert len(history) == 1
    lang = await eventually(lambda: client.get("user:u10086:pref.lang"))
    assert lang.value["object"] == "zh" and lang.type.value == "user_preference"
    both = await eventually(lambda: _items(client, "user:u10086:pref.", at_least=2))
    assert sorted(i.value["polarity"] for i in both) == ["dislike", "set"]


async def _items(client: MemoryClient, prefix: str, at_least: int = 1) -> list[Any]:
    items = list((await client.list(prefix)).items)
    return items if len(items) >= at_least else []


async def test_shadow_mode_reports_each_turn(client: MemoryClient) -> None:
    shadow = ShadowMode(client, owner="session:shadow1", budget=120, wait="applied")
    replies = iter(["Sure, dark mode it is.", "Your order INV-7731 ships Friday.", "Done."])
    agent = shadow.wrap(lambda messages: next(replies))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for text in [
        "I prefer dark mode in every app.",
        "Where is my order INV-7731? " + "It was a gift for my sister. " * 20,
        "What was my order number again?",
    ]:
        messages.append({"role": "user", "content": text})
        messages.append({"role": "assistant", "content": await agent(messages)})
    first, _, third = shadow.reports
    assert first.recalled == 0  # nothing recorded before the first turn
    assert third.sent_tokens > third.zeromem_tokens and third.recalled >= 1
    assert third.saved_tokens == third.sent_tokens - third.zeromem_tokens
    assert all(r.zeromem_tokens <= r.sent_tokens for r in shadow.reports)
    assert "saved" in shadow.summary() and "turn 3" in third.line()
    recorded = await _items(client, "session:shadow1")
    assert len(recorded) == 5  # turns 1-2 and the user message of turn 3; no system prompt
