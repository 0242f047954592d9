"""The browsing queries the inspector walks: owners (a skip-scan of the key index) and an
owner's archive tier, answered by the read services through the caller's credential."""

from __future__ import annotations

import asyncio
import time

import pytest

from zeromem.sdk import MemoryClient
from zeromem.sdk.errors import RequestRejectedError


async def test_owners_pages_count_live_and_archived(client: MemoryClient) -> None:
    # Owner ids that sort around the ':' separator: '-' and digits come before ':', so in
    # key order user:u1-x and user:u10 come before user:u1 (whose keys are "user:u1:...").
    layout = {"user:u1": 3, "user:u1-x": 1, "user:u10": 2, "user:u2": 1, "task:t1": 2}
    for owner, count in layout.items():
        for i in range(count):
            await client.put(f"{owner}:k{i}", i, content=f"memory {i} of {owner}")
    await client.put("user:u2:old", 0, content="old one", wait="applied")
    await asyncio.sleep(0.02)
    await client.archive("user:u2", older_than=time.time())
    await client.put("user:u2:new", 1, content="new one", wait="applied")

    everyone = await client.owners()
    assert [(o.owner, o.memories, o.archived) for o in everyone.owners] == [
        ("task:t1", 2, 0),
        ("user:u1-x", 1, 0),
        ("user:u10", 2, 0),
        ("user:u1", 3, 0),
        ("user:u2", 1, 2),
    ]
    assert everyone.next_cursor == ""

    users = await client.owners("user:", limit=2)
    assert [o.owner for o in users.owners] == ["user:u1-x", "user:u10"]
    rest = await client.owners("user:", cursor=users.next_cursor, limit=2)
    assert [o.owner for o in rest.owners] == ["user:u1", "user:u2"]
    assert rest.next_cursor == ""  # nothing after: no empty page to fetch
    assert [o.owner for o in (await client.owners("user:u1")).owners] == [
        "user:u1-x",
        "user:u10",
        "user:u1",
    ]


async def test_archived_pages_and_one_key(client: MemoryClient) -> None:
    for i in range(5):
        await client.put(f"user:a1:m{i}", {"i": i}, content=f"archived memory {i}")
    await client.put("user:a1:last", 9, content="the last", wait="applied")
    await asyncio.sleep(0.02)
    assert (await client.archive("user:a1", older_than=time.time())).status == "applied"

    seen: list[str] = []
    cursor = ""
    for _ in range(10):
        page = await client.archived("user:a1", cursor=cursor, limit=2)
        seen += [item.key for item in page.items]
        assert all(item.archived_at for item in page.items)
        cursor = page.next_cursor
        if not cursor:
            break
    assert sorted(seen) == sorted([f"user:a1:m{i}" for i in range(5)] + ["user:a1:last"])

    one = await client.archived("user:a1", key="user:a1:m3")
    assert [(i.key, i.value) for i in one.items] == [("user:a1:m3", {"i": 3})]
    assert (await client.archived("user:a1", key="user:a1:none")).items == ()
    with pytest.raises(RequestRejectedError):
        await client.archived("user:a1", key="user:other:m3")
    with pytest.raises(RequestRejectedError):
        await client.archived("user:a1:m3")


async def test_browsing_is_admitted_like_any_read(client: MemoryClient) -> None:
    """Bounded inputs, refused with the limit's name before any work (query.admission)."""
    with pytest.raises(RequestRejectedError, match="key_chars"):
        await client.owners("user:" + "x" * 300)
    with pytest.raises(RequestRejectedError, match="key_chars"):
        await client.archived("user:a1", key="user:a1:" + "y" * 300)
