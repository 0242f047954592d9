"""ZeromemStore must answer like LangGraph's own InMemoryStore, operation by operation.

One scenario runs against both stores and every result is recorded; the records must be
equal (values, namespaces, search filtering and paging, batch semantics, deletes, TTL).
InMemoryStore has no TTL, so on its side the scenario removes an item when its TTL has
passed, which is what LangGraph documents a TTL to mean.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from zeromem.integrations.langgraph_store import ZeromemStore
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings

TTL_MINUTES = 0.02  # 1.2 s


def items(found: Any) -> Any:
    if found is None:
        return None
    if isinstance(found, list):
        return [items(i) for i in found]
    return (tuple(found.namespace), found.key, found.value)


async def scenario(store: BaseStore) -> list[Any]:
    reference = isinstance(store, InMemoryStore)
    out: list[Any] = []
    rec = out.append
    await store.aput(("users", "u1"), "prefs", {"theme": "dark", "n": 3, "meta": {"lang": "zh"}})
    await store.aput(("users", "u1", "notes"), "n1", {"text": "likes green tea", "n": 5})
    await store.aput(("users", "u1", "notes"), "n2", {"text": "flies to Osaka on May 3", "n": 1})
    await store.aput(("users", "u2"), "prefs", {"theme": "light", "n": 1, "meta": {"lang": "en"}})
    await store.aput(("docs",), "d1", {"text": "python tutorial", "tags": ["py", "intro"]})
    await store.aput(("文档", "中 文"), "a b/c.d", {"text": "键里有空格和斜杠", "n": 2})
    await store.aput(("users", "u1"), "prefs", {"theme": "dark", "n": 4, "meta": {"lang": "zh"}})

    rec(items(await store.aget(("users", "u1"), "prefs")))
    rec(items(await store.aget(("users", "u1"), "missing")))
    rec(items(await store.aget(("文档", "中 文"), "a b/c.d")))
    rec(items(await store.asearch(("users",))))
    rec(items(await store.asearch(())))
    rec(items(await store.asearch(("users",), filter={"n": {"$gt": 2}})))
    rec(items(await store.asearch(("users",), filter={"theme": "dark"})))
    rec(items(await store.asearch(("users",), filter={"meta": {"lang": "en"}})))
    rec(items(await store.asearch(("users",), filter={"n": {"$gte": 1, "$lt": 4}})))
    rec(items(await store.asearch(("users",), filter={"n": {"$ne": 1}})))
    rec(items(await store.asearch(("docs",), filter={"tags": ["py", "intro"]})))
    rec(items(await store.asearch(("users", "u1"), limit=2, offset=1)))
    rec(items(await store.asearch(("nothing",))))
    # A query ranks differently (InMemoryStore without an index ignores it), same items.
    rec(sorted(items(await store.asearch(("users",), query="green tea", limit=10))))

    rec(await store.alist_namespaces())
    rec(await store.alist_namespaces(prefix=("users",)))
    rec(await store.alist_namespaces(prefix=("users", "*")))
    rec(await store.alist_namespaces(suffix=("notes",)))
    rec(await store.alist_namespaces(max_depth=1))
    rec(await store.alist_namespaces(limit=2, offset=1))

    # Batch: reads see the state before the batch's writes; the last write to a key wins.
    rec(
        items(
            await store.abatch(
                [
                    PutOp(("users", "u3"), "prefs", {"theme": "blue"}),
                    GetOp(("users", "u3"), "prefs"),
                    PutOp(("users", "u3"), "prefs", {"theme": "green"}),
                    SearchOp(("users", "u3")),
                ]
            )
        )
    )
    rec(items(await store.aget(("users", "u3"), "prefs")))

    await store.adelete(("users", "u1", "notes"), "n1")
    await store.adelete(("users", "u1", "notes"), "never-there")
    rec(items(await store.aget(("users", "u1", "notes"), "n1")))
    rec(items(await store.asearch(("users", "u1"))))
    rec(await store.alist_namespaces())

    # TTL: present before it passes, gone from get and search after.
    if reference:
        await store.aput(("users", "u1", "notes"), "short", {"text": "temp", "n": 9})
    else:
        await store.aput(
            ("users", "u1", "notes"), "short", {"text": "temp", "n": 9}, ttl=TTL_MINUTES
        )
    await store.aput(("users", "u1", "notes"), "long", {"text": "stays", "n": 8})
    rec(items(await store.aget(("users", "u1", "notes"), "short", refresh_ttl=False)))
    rec(items(await store.asearch(("users", "u1", "notes"), refresh_ttl=False)))
    if reference:  # the TTL's meaning, applied by hand
        await store.adelete(("users", "u1", "notes"), "short")
    else:
        await asyncio.sleep(TTL_MINUTES * 60 + 0.4)
    rec(items(await store.aget(("users", "u1", "notes"), "short")))
    rec(items(await store.asearch(("users", "u1", "notes"))))
    return out


async def test_same_results_as_in_memory_store(client: MemoryClient) -> None:
    expected = await scenario(InMemoryStore())
    got = await scenario(ZeromemStore(client))
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, f"step {i}"


async def test_the_mapping_onto_keys(client: MemoryClient) -> None:
    store = ZeromemStore(client)
    assert store.key_for(("users", "u1", "prefs"), "theme") == "lg:users:u1/prefs/theme"
    assert store.key_for(("文档",), "a b") == "lg:_E6_96_87_E6_A1_A3:a_20b"
    for ns, key in [(("users", "u_1", "x"), "k/1"), (("a",), ""), (("用户", "笔记"), "要点")]:
        assert store.parse_key(store.key_for(ns, key)) == (ns, key)
    with pytest.raises(ValueError, match="too long"):
        store.key_for(("users",), "长" * 20)
    with pytest.raises(InvalidNamespaceError):
        await store.aput(("a.b",), "k", {"v": 1})
    await store.aput(("users", "u9"), "theme", {"v": 1})
    item = await client.get("lg:users:u9/theme")
    assert item is not None and item.value == {"v": 1} and item.content  # recallable content


async def test_ttl_refresh_on_read(client: MemoryClient) -> None:
    store = ZeromemStore(client)
    await store.aput(("s",), "k", {"v": 1}, ttl=TTL_MINUTES)
    first = await client.get("lg:s:k")
    await asyncio.sleep(0.6)
    assert await store.aget(("s",), "k") is not None  # refreshes
    await asyncio.sleep(0.2)
    refreshed = await client.get("lg:s:k")
    assert refreshed.expires_at > first.expires_at + 0.5


async def test_emptied_namespaces_are_not_listed(client: MemoryClient) -> None:
    """The one documented difference: InMemoryStore keeps listing an emptied namespace."""
    store = ZeromemStore(client)
    await store.aput(("gone",), "k", {"v": 1})
    await store.adelete(("gone",), "k")
    assert await store.alist_namespaces(prefix=("gone",)) == []


async def test_sync_api_through_connect_sync(running: Settings, tenant: str) -> None:
    # The in-process workers run on this test's loop, so the blocking calls go to a thread.
    def body() -> None:
        store = ZeromemStore.connect_sync(
            running.bus.nats_url, tenant=tenant, shards=running.shards
        )
        try:
            store.put(("users", "u1"), "prefs", {"theme": "dark"})
            assert store.get(("users", "u1"), "prefs").value == {"theme": "dark"}
            assert [i.key for i in store.search(("users",))] == ["prefs"]
            assert store.list_namespaces() == [("users", "u1")]
            store.delete(("users", "u1"), "prefs")
            assert store.get(("users", "u1"), "prefs") is None
        finally:
            store.close()

    await asyncio.to_thread(body)


async def test_a_thousand_concurrent_reads_each_answer(client: MemoryClient) -> None:
    """As LangGraph's own large-batch tests: 200 items, then a thousand listings, a
    thousand searches and a thousand gets at once. Each a request of its own, they queued
    past the read service's per-tenant limits and a fifth to a third failed."""
    store = ZeromemStore(client)
    await asyncio.gather(
        *(store.aput(("bulk", f"n{i % 10}"), f"k{i}", {"i": i}) for i in range(200))
    )
    namespaces = [("bulk", f"n{j}") for j in range(10)]
    started = asyncio.get_running_loop().time()
    listed, searched, got = await asyncio.gather(
        asyncio.gather(*(store.alist_namespaces(prefix=("bulk",)) for _ in range(1000))),
        asyncio.gather(*(store.asearch(("bulk",), limit=500) for _ in range(1000))),
        asyncio.gather(*(store.aget(("bulk", f"n{i % 10}"), f"k{i % 200}") for i in range(1000))),
    )
    elapsed = asyncio.get_running_loop().time() - started
    assert all(found == namespaces for found in listed)
    assert all(len(found) == 200 for found in searched)
    assert [item.value["i"] for item in got] == [i % 200 for i in range(1000)]
    assert elapsed < 10, f"{elapsed:.1f} s"


async def test_shared_reads_still_see_every_write_before_them(client: MemoryClient) -> None:
    """A read asked for after a write finished never gets an answer from before it, even
    when it shares a scan with others."""
    store = ZeromemStore(client)
    for i in range(30):
        pending = [asyncio.ensure_future(store.asearch(("rw",), limit=100)) for _ in range(5)]
        await store.aput(("rw",), f"k{i}", {"i": i})
        after = await asyncio.gather(*(store.asearch(("rw",), limit=100) for _ in range(5)))
        assert [len(found) for found in after] == [i + 1] * 5, i
        await asyncio.gather(*pending)


async def test_a_connect_sync_store_works_from_another_event_loop(
    running: Settings, tenant: str
) -> None:
    """The store's client lives on its own loop thread; awaited from this loop, each
    batch runs there (every aput used to time out although it was applied)."""
    store = await asyncio.to_thread(
        ZeromemStore.connect_sync, running.bus.nats_url, tenant=tenant, shards=running.shards
    )
    try:
        await asyncio.gather(*(store.aput(("loop",), f"k{i}", {"i": i}) for i in range(50)))
        assert (await store.aget(("loop",), "k7")).value == {"i": 7}
        assert len(await store.asearch(("loop",), limit=100)) == 50
        store_loop_answer = await asyncio.to_thread(store.get, ("loop",), "k8")
        assert store_loop_answer.value == {"i": 8}
    finally:
        await asyncio.to_thread(store.close)
