"""Issue 4: feedback at fleet scale, coalesced per batch by the worker, counted exactly."""

from __future__ import annotations

import asyncio

from zeromem.schemas import Applied, Feedback, FeedbackKind, Put
from zeromem.sdk import MemoryClient
from zeromem.worker.applier import coalesce_feedback
from zeromem.worker.engine import COUNT_FEEDBACK, WRITE, Outcome


async def test_50_agents_times_100_feedback_count_exactly_5000(running, tenant: str) -> None:
    key = "team:core:playbook"
    nc_clients = [
        await MemoryClient.connect(
            running.bus.nats_url, tenant=tenant, agent="conn", shards=running.shards
        )
        for _ in range(5)
    ]
    try:
        await nc_clients[0].put(key, "ship on Fridays", wait="applied")
        # 50 agents at once, each on its connection (a credential is for one agent)
        agents = [
            await MemoryClient.connect(
                running.bus.nats_url, tenant=tenant, agent=f"agent-{i}", shards=running.shards
            )
            for i in range(50)
        ]
        nc_clients += agents
        kinds = ("liked", "liked", "important", "disliked")

        async def send(agent: MemoryClient, a: int) -> None:
            for i in range(100):
                await agent.feedback(key, kinds[(a + i) % 4])
            await agent.flush()

        await asyncio.gather(*(send(agent, a) for a, agent in enumerate(agents)))
        expected = {"liked": 0, "important": 0, "disliked": 0}
        for a in range(50):
            for i in range(100):
                expected[kinds[(a + i) % 4]] += 1
        for _ in range(200):
            item = await nc_clients[0].get(key)
            fb = item.feedback
            if fb.liked + fb.important + fb.disliked >= 5000:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # nothing more arrives: the count stays exact
        fb = (await nc_clients[0].get(key)).feedback
        assert fb.liked + fb.important + fb.disliked == 5000
        assert {"liked": fb.liked, "important": fb.important, "disliked": fb.disliked} == expected
        assert (await nc_clients[0].get(key)).version == 1
    finally:
        for c in nc_clients:
            await c.close()


def _outcome(i: int, action: str, key: str = "team:x:k", field: str = "fl") -> Outcome:
    command = (
        Feedback(id=f"f{i}", tenant="t", agent="a", ts=1.0, key=key, kind=FeedbackKind.LIKED)
        if action == COUNT_FEEDBACK
        else Put(id=f"p{i}", tenant="t", agent="a", ts=1.0, key=key)
    )
    result = Applied(command_id=command.id, tenant="t", key=key, op="feedback")
    return Outcome(command, key, result, action=action, feedback_field=field)


def test_coalescing_folds_runs_and_never_crosses_a_write() -> None:
    outcomes = [
        _outcome(0, COUNT_FEEDBACK),
        _outcome(1, COUNT_FEEDBACK),
        _outcome(2, COUNT_FEEDBACK, field="fi"),
        _outcome(3, WRITE),
        _outcome(4, COUNT_FEEDBACK),
        _outcome(5, COUNT_FEEDBACK, key="team:x:other"),
        _outcome(6, COUNT_FEEDBACK),
    ]
    kept, at, followed = coalesce_feedback(outcomes, list(range(7)))
    assert at == [0, 2, 3, 4, 5]
    assert followed == {0: [1], 4: [6]}
    assert [f.command.id for f in kept[0].followers] == ["f1"]
