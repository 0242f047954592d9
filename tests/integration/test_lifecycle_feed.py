"""Issue 4: the change feed. A subscriber that disconnects and resumes (from a position
or a time) misses nothing and sees nothing twice; the cooperating-agents demo."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path

from zeromem.sdk import MemoryClient
from zeromem.sdk.feed import parse_scope


def test_scopes() -> None:
    assert parse_scope("task:t42:*") == ("task", "t42", "task:t42:")
    assert parse_scope("task:t42") == ("task", "t42", "task:t42")
    assert parse_scope("task:*") == ("task", "*", "task:")
    assert parse_scope("task:t42:step*") == ("task", "t42", "task:t42:step")


async def _collect(feed, n: int, timeout: float = 10.0) -> list:  # type: ignore[no-untyped-def]
    out = []
    while len(out) < n:
        out.append(await feed.next(timeout=timeout))
    return out


async def test_a_subscriber_that_disconnects_and_resumes_misses_nothing(
    client: MemoryClient,
) -> None:
    feed = await client.watch("task:t42:*")
    ids: list[str] = []

    async def write(n: int) -> None:
        for i in range(n):
            key = f"task:t42:step{i % 7}"
            receipt = await client.put(key, i)
            ids.append(receipt.command_id)
            await client.put(f"task:t43:step{i % 7}", i)  # out of scope
            if i % 10 == 0:  # conflicts and rejections are changes too
                ids.append((await client.put(key, "x", expected_version=10_000)).command_id)
        await client.flush()

    await write(40)
    first = await _collect(feed, 20)
    resume_at = feed.position
    await feed.close()
    await write(60)  # while nobody listens
    resumed = await client.watch("task:t42:*", since_position=resume_at)
    rest = await _collect(resumed, len(ids) - 20)
    seen = [e.result.command_id for e in first + rest]
    assert seen == ids  # everything, once, in order
    assert all(e.key.startswith("task:t42:") for e in first + rest)
    assert {e.status for e in rest} == {"applied", "conflict"}
    try:
        extra = await resumed.next(timeout=0.5)
    except TimeoutError:
        extra = None
    assert extra is None  # and nothing twice
    await resumed.close()

    # resuming from a time: everything from then on, from the retained feed
    later = time.time()
    await asyncio.sleep(0.05)
    tail_ids = [(await client.put("task:t42:final", i)).command_id for i in range(5)]
    await client.flush()
    by_time = await client.watch("task:t42:*", since_time=later)
    assert [e.result.command_id for e in await _collect(by_time, 5)] == tail_ids
    await by_time.close()


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cooperating_agents.py"


async def test_cooperating_agents_demo(running, tenant: str) -> None:
    spec = importlib.util.spec_from_file_location("cooperating_agents", EXAMPLE)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  # its dataclasses look it up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    lines: list[str] = []
    report = await module.run_demo(
        running.bus.nats_url, tenant=tenant, shards=running.shards, say=lines.append
    )
    steps = report.final["steps_done"]
    assert sorted(steps) == sorted([f"{a}:{i}" for a in ("alice", "bob") for i in range(5)])
    assert report.version == 11  # created, then exactly one version per step
    assert sum(report.conflicts.values()) >= 1  # one of them lost the race and retried
    positions = [p for p, *_ in report.planner_events]
    assert positions == sorted(set(positions))  # the planner saw each change once, in order
    applied = [e for e in report.planner_events if e[2] == "applied"]
    assert [v for *_, v in applied] == list(range(1, 12))
    assert sum(e[2] == "conflict" for e in report.planner_events) == sum(report.conflicts.values())
