"""The inspector's routes against real servers, authentication on: each view's JSON twin,
its HTML page, and the figures both show checked against what the service itself says."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests.inspect.conftest import PAGE_SIZE, Inspector
from zeromem import naming
from zeromem.bus import connect_nats
from zeromem.inspect.app import PAGES

SECRET = "hunter2-do-not-show"


async def test_every_page_needs_a_token(inspector: Inspector) -> None:
    for path, *_ in PAGES:
        path = path.replace("{tenant}", inspector.a)
        assert (await inspector.get("/api" + path, who="")).status_code == 401, path
        html = await inspector.get(path, who="")
        assert html.status_code == 303 and html.headers["location"] == "/login", path
    refused = await inspector.get("/login?token=not-a-token", who="")
    assert refused.status_code == 401
    accepted = await inspector.get(f"/login?token={inspector.tokens['a']}", who="")
    assert accepted.status_code == 303
    cookie = accepted.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    session = {"cookie": f"zm_inspect={accepted.cookies['zm_inspect']}"}
    home = await inspector.http.get(inspector.base + "/", headers=session)
    assert home.headers["location"] == f"/t/{inspector.a}/memories"
    page = await inspector.http.get(inspector.base + home.headers["location"], headers=session)
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]


async def _fill(inspector: Inspector) -> Any:
    writer = await inspector.agent(inspector.a)
    await writer.put(
        "user:u1:pref_lang",
        {"lang": "zh"},
        content="prefers answers in Chinese",
        type="user_preference",
        tags=["lang"],
        references=["user:u1:city"],
    )
    await writer.put("user:u1:city", "Lisbon", content="lives in Lisbon", ttl=3600)
    await writer.put(
        "user:u1:login", {"user": "ana", "password": SECRET}, content="login for the billing portal"
    )  # a sensitive field
    await writer.put("user:u1:note", SECRET, content=f"note {SECRET}", sensitive=True)
    await writer.put("user:u1:api_token", SECRET, content=f"token {SECRET}")  # sensitive name
    for owner in ("user:u2", "task:t1", "task:t2"):
        await writer.put(f"{owner}:status", "open", content=f"status of {owner}")
    await writer.put("user:u2:done", 1, content="done", wait="applied")
    return writer


async def test_memories_by_owner_and_prefix_paged_and_masked(inspector: Inspector) -> None:
    await _fill(inspector)
    t = f"/t/{inspector.a}"
    # owners, a page at a time
    owners: list[tuple[str, int]] = []
    cursor = ""
    while True:
        page = await inspector.api(f"{t}/owners?owners_cursor={cursor}")
        owners += [(o["owner"], o["memories"]) for o in page["owners"]["owners"]]
        assert len(page["owners"]["owners"]) <= PAGE_SIZE
        cursor = page["owners"]["next_cursor"]
        if not cursor:
            break
    assert owners == [("task:t1", 1), ("task:t2", 1), ("user:u1", 5), ("user:u2", 2)]
    # an owner's memories, a page at a time
    keys: list[str] = []
    items: dict[str, Any] = {}
    cursor = ""
    while True:
        page = await inspector.api(f"{t}/memories?prefix=user:u1:&cursor={cursor}")
        assert len(page["items"]) <= PAGE_SIZE
        keys += [i["key"] for i in page["items"]]
        items.update({i["key"]: i for i in page["items"]})
        cursor = page["next_cursor"]
        if not cursor:
            break
    names = ("pref_lang", "city", "login", "note", "api_token")
    assert keys == sorted(f"user:u1:{n}" for n in names)
    assert items["user:u1:note"]["value"] == items["user:u1:note"]["content"] == "[redacted]"
    assert items["user:u1:api_token"]["masked"]
    assert items["user:u1:api_token"]["value"] == "[redacted]"
    assert items["user:u1:login"]["value"] == {"user": "ana", "password": "[redacted]"}
    assert items["user:u1:city"]["state"]["tier"] == "live"
    assert 3500 < items["user:u1:city"]["state"]["expires_in_s"] <= 3600
    # the pages show the same, and never a sensitive value
    for path in (
        f"{t}/memories?prefix=user:u1:",
        f"{t}/memory?key=user:u1:note",
        f"{t}/memory?key=user:u1:login",
        f"{t}/memory?key=user:u1:api_token",
    ):
        html = await inspector.get(path)
        assert html.status_code == 200 and SECRET not in html.text, path
    one = await inspector.api(f"{t}/memory?key=user:u1:pref_lang")
    assert one["item"]["references"] == [{"key": "user:u1:city", "valid": True}]
    assert one["item"]["tags"] == ["lang"] and one["item"]["type"] == "user_preference"
    html = (await inspector.get(f"{t}/memory?key=user:u1:pref_lang")).text
    assert f'href="{t}/memory?key=user%3Au1%3Acity"' in html  # a clickable reference
    assert (await inspector.get(f"/api{t}/memory?key=user:u1:none")).status_code == 404
    assert (await inspector.get(f"/api{t}/memory?key=not a key")).status_code == 400


async def test_version_history_from_the_audit_trail(inspector: Inspector) -> None:
    writer = await inspector.agent(inspector.a)
    await writer.put("task:t9:status", "open", content="opened", wait="applied")
    await writer.patch("task:t9:status", {"by": "ana"}, content="taken by ana", wait="applied")
    await writer.put("task:t9:status", "done", content="closed", wait="applied")
    await writer.put("task:t9:status", "x", expected_version=1, wait="applied")  # a conflict
    t = f"/t/{inspector.a}"
    history = (await inspector.api(f"{t}/history?key=task:t9:status"))["history"]
    applied = [
        (e["op"], e["version_before"], e["version_after"])
        for e in history["entries"]
        if e["status"] == "applied"
    ]
    assert applied == [("put", 0, 1), ("patch", 1, 2), ("put", 2, 3)]
    assert [e["status"] for e in history["entries"]][-1] == "conflict"
    assert history["complete"] and history["entries"][1]["agent"] == "writer"
    # a credential issued without --audit: told so, once it has been refused
    plain = (await inspector.api(f"{t}/history?key=task:t9:status", who="a_plain"))["history"]
    assert "audit" in plain["error"] and not plain["entries"]
    started = time.monotonic()
    again = (await inspector.api(f"{t}/history?key=task:t9:status", who="a_plain"))["history"]
    assert again["error"] and time.monotonic() - started < 1.0


async def test_archived_memories(inspector: Inspector) -> None:
    writer = await inspector.agent(inspector.a)
    await writer.put("user:old:trip", {"city": "Porto"}, content="trip to Porto", wait="applied")
    await asyncio.sleep(0.02)
    assert (await writer.archive("user:old", older_than=time.time())).status == "applied"
    t = f"/t/{inspector.a}"
    owners = (await inspector.api(f"{t}/owners?prefix=user:old"))["owners"]["owners"]
    assert owners == []  # no live memory left: not an owner in the key index
    page = await inspector.api(f"{t}/archived?owner=user:old")
    assert [i["key"] for i in page["items"]] == ["user:old:trip"]
    one = await inspector.api(f"{t}/memory?key=user:old:trip")
    assert one["item"]["state"]["tier"] == "archived" and one["item"]["value"] == {"city": "Porto"}


def _recall_query(**extra: str) -> str:
    params = {
        "q": "what language should I answer in",
        "owners": "user:u1",
        "budget": "40",
        "k": "2",
        **extra,
    }
    return "&".join(f"{k}={httpx.QueryParams({k: v})[k]}" for k, v in params.items())


async def test_recall_playground_is_the_explain_reply(inspector: Inspector) -> None:
    writer = await _fill(inspector)
    for i in range(4):
        await writer.put(f"user:u1:lang_note{i}", i, content=f"answer language note {i} " * 3)
    await writer.put("user:u1:flag", 0, content="language flag", wait="applied")
    t = f"/t/{inspector.a}"
    query = _recall_query(strategy="no_decay")
    shown = await inspector.api(f"{t}/recall?{query}")
    direct = await writer.recall(
        "what language should I answer in",
        owners=["user:u1"],
        budget=40,
        k=2,
        strategy={"name": "no_decay"},
        explain=True,
    )
    reply = shown["explain"]["reply"]
    pairs = [
        (c["key"], c["decision"], c["relevance"], c["feedback"], c["tokens"])
        for c in reply["candidates"]
    ]
    assert pairs == [
        (c.key, c.decision, c.relevance, c.feedback, c.tokens) for c in direct.candidates
    ]
    assert reply["tokens"] == direct.tokens and reply["baseline_tokens"] == direct.baseline_tokens
    decisions = {c["decision"] for c in reply["candidates"]}
    assert "kept" in decisions and any(d.startswith("cut") for d in decisions)
    rows = shown["explain"]["rows"]
    top = max(r["relevance"] for r in rows)
    width = rows[0]["width"]["relevance"]
    assert width == pytest.approx(100 * rows[0]["relevance"] / top, abs=0.01)
    # the page draws the same figures
    html = (await inspector.get(f"{t}/recall?{query}")).text
    for c in reply["candidates"]:
        assert f'data-key="{c["key"]}"' in html and f'data-decision="{c["decision"]}"' in html
        assert f'data-factor="relevance" data-value="{c["relevance"]}"' in html
    assert SECRET not in html and SECRET not in json.dumps(shown)
    # bad input is refused with a reason
    for fields, reason in (
        ({"k": "0"}, "between 1 and 100"),
        ({"strategy": "custom", "strategy_json": "{"}, "not JSON"),
        ({"strategy": "custom", "strategy_json": '{"name": "nope"}'}, "unknown strategy"),
    ):
        bad = await inspector.get(f"/api{t}/recall?{_recall_query(**fields)}")
        assert bad.status_code == 400 and reason in bad.json()["error"], fields
    assert "explain" not in await inspector.api(f"{t}/recall")  # no owner named: a form only


async def test_savings_from_the_usage_ledger(inspector: Inspector) -> None:
    writer = await _fill(inspector)
    planner = await inspector.agent(inspector.a, "planner")
    for _ in range(3):
        await planner.recall("what language", owners=["user:u1"], history_tokens=500)
    await writer.recall("status", owners=["user:u2"])
    t = f"/t/{inspector.a}"
    shown = (await inspector.api(f"{t}/savings?period=1h"))["savings"]
    rows = (await planner.stats(since=time.time() - 3600)).rows
    by_agent = {r["agent"]: r for r in shown["totals"]}
    assert by_agent["planner"]["recalls"] == 3 and by_agent["writer"]["recalls"] == 1
    assert by_agent["planner"]["history"] == 1500
    assert by_agent["all"]["injected"] == sum(r.injected for r in rows)
    assert by_agent["all"]["baseline"] == sum(r.baseline for r in rows)
    assert sum(shown["agents"]["planner"]["injected"]) == by_agent["planner"]["injected"]
    assert len(shown["times"]) >= 60 and shown["bucket_s"] == 60
    html = (await inspector.get(f"{t}/savings?period=1h")).text
    assert 'id="savings-data"' in html and 'data-agent="planner"' in html
    assert (await inspector.get(f"/api{t}/savings?period=1y")).status_code == 400


async def _events(response: httpx.Response, queue: asyncio.Queue[tuple[str, Any, float]]) -> None:
    event = ""
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            await queue.put((event, json.loads(line[5:]), time.monotonic()))


async def _next(
    queue: asyncio.Queue[tuple[str, Any, float]], kind: str, wait_s: float = 10.0
) -> tuple[Any, float]:
    while True:
        event, data, at = await asyncio.wait_for(queue.get(), wait_s)
        if event == kind:
            return data, at


async def test_a_change_arrives_live(inspector: Inspector) -> None:
    writer = await inspector.agent(inspector.a)
    url = f"{inspector.base}/t/{inspector.a}/live/changes?scope=task:t42:*"
    queue: asyncio.Queue[tuple[str, Any, float]] = asyncio.Queue()
    async with inspector.http.stream("GET", url, headers=inspector.headers("a")) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = asyncio.create_task(_events(response, queue))
        try:
            await _next(queue, "ready")
            await writer.put("task:t99:status", "elsewhere")  # outside the scope
            sent = time.monotonic()
            await writer.put("task:t42:status", "running", content="export running")
            change, arrived = await _next(queue, "change")
            seen = tuple(change[f] for f in ("key", "op", "status", "version", "agent"))
            assert seen == ("task:t42:status", "put", "applied", 1, "writer")
            assert arrived - sent < 1.0, f"the change took {arrived - sent:.2f}s"
        finally:
            reader.cancel()
    streams = inspector.app.state.inspector.streams
    for _ in range(100):  # the server notices the browser left, closes the feed's consumer
        if not streams.open:
            break
        await asyncio.sleep(0.05)
    assert streams.open == 0


async def test_dead_letters_for_the_operator_and_the_tenant_auditor(inspector: Inspector) -> None:
    queues: dict[str, asyncio.Queue[tuple[str, Any, float]]] = {
        "operator": asyncio.Queue(),
        "a": asyncio.Queue(),
    }
    urls = {
        "operator": f"{inspector.base}/ops/live/dead?tenant={inspector.a}",
        "a": f"{inspector.base}/t/{inspector.a}/live/dead",
    }
    admin = await connect_nats(inspector.settings, name="test-bad-command")
    stream = inspector.http.stream
    async with (
        stream("GET", urls["operator"], headers=inspector.headers("operator")) as ops,
        stream("GET", urls["a"], headers=inspector.headers("a")) as own,
    ):
        readers = [
            asyncio.create_task(_events(ops, queues["operator"])),
            asyncio.create_task(_events(own, queues["a"])),
        ]
        try:
            for queue in queues.values():
                await _next(queue, "ready")
            shard = naming.shard_for(inspector.a, "user:u1", inspector.settings.shards)
            await admin.jetstream().publish(
                naming.command_subject(inspector.a, shard, "writer"), b"\x93 not a command"
            )
            live, _ = await _next(queues["operator"], "dead")
            assert live["tenant"] == inspector.a and live["reason"].startswith("invalid")
            audited, _ = await _next(queues["a"], "dead")
            assert audited["reason"].startswith("invalid") and audited["tenant"] == inspector.a
        finally:
            for reader in readers:
                reader.cancel()
            await admin.close()
    listed = await inspector.api(f"/ops?tenant={inspector.a}", who="operator")
    assert [d["reason"][:7] for d in listed["dead"]["letters"]] == ["invalid"]
    assert listed["dead"]["letters"][0]["agent"] == "writer"
    # the tenant's own view of the dead-letter stream is refused by the server
    refused = await inspector.get(f"/t/{inspector.a}/live/dead", who="a_plain")
    assert refused.status_code == 403


async def test_shards_lag_and_lease_holders(inspector: Inspector) -> None:
    shards = await inspector.api("/ops/shards", who="operator")
    assert [s["shard"] for s in shards["shards"]] == list(range(inspector.settings.shards))
    assert shards["redis"] and all(s["holder"] for s in shards["shards"])
    assert all(isinstance(s["backlog"], int) for s in shards["shards"])
    assert len(shards["holders"]) == 1  # the session's one worker holds every shard
    assert (await inspector.get("/api/ops/shards", who="a")).status_code == 403
    tenants = await inspector.api("/tenants", who="operator")
    assert "tenants" in tenants
    assert (await inspector.api("/tenants", who="a"))["tenants"] == [inspector.a]
