"""Query expansion through the real stack: a question in other words than the memory
finds it, and ZEROMEM_RECALL_EXPANSION=0 (settings.recall_expansion) turns that off."""

from __future__ import annotations

from zeromem.auth.authority import Authority
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings

MEMORIES = {
    "user:u9:race": "signed up for the Berlin race in May",
    "user:u9:weather": "grey skies and drizzle all week",
}


async def seed(client: MemoryClient) -> None:
    for i, (key, content) in enumerate(MEMORIES.items()):
        await client.put(
            key, content, type="fact", wait="applied" if i == len(MEMORIES) - 1 else "none"
        )


async def test_a_paraphrase_finds_the_memory(client: MemoryClient) -> None:
    await seed(client)
    reply = await client.recall("footrace", owners=["user:u9"], k=5)
    assert [m.key for m in reply.memories] == ["user:u9:race"]


async def test_with_expansion_off_only_the_words_typed_match(
    isolated: Settings, authority: Authority, tenant: str
) -> None:
    from tests.harness import ServiceSet

    off = isolated.with_(recall_expansion=False)
    services = await ServiceSet.start(off, authority=authority)
    try:
        async with await MemoryClient.connect(
            off.bus.nats_url, tenant=tenant, agent="tester", shards=off.shards
        ) as client:
            await seed(client)
            assert (await client.recall("footrace", owners=["user:u9"], k=5)).memories == ()
            typed = await client.recall("race", owners=["user:u9"], k=5)
            assert [m.key for m in typed.memories] == ["user:u9:race"]
    finally:
        await services.stop()
