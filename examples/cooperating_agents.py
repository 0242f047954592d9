"""Two agents cooperating on one task's status, with compare-and-set and a change feed.

    zeromem up                                 # in one shell (or: make run)
    python examples/cooperating_agents.py      # in another, same directory (venv active)
    python examples/cooperating_agents.py --nats-url nats://host:4222 --tenant acme

Alice and Bob both work on task t42. Each step is a read-modify-write of
``task:t42:status``: read it (with its version), append the step, write it back with
``expected_version``. On the first step they race on purpose: both read version 1, both
write; exactly one wins, the other gets a ``conflict`` carrying the current version,
re-reads and retries on top of the winner's change. Nothing is lost, nothing is applied
twice. A planner watches ``task:t42:*`` through the change feed; halfway through it
disconnects, and resumes from the position of the last event it saw: it misses nothing
and sees nothing twice.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from zeromem.sdk import MemoryClient, ZeromemError

KEY = "task:t42:status"
STEPS = 5
# A step retried this many times has lost to the other agent every time: with two agents
# that means something else is wrong (a third writer), so say so rather than loop.
MAX_ATTEMPTS = 20


@dataclass
class DemoReport:
    final: dict[str, object] = field(default_factory=dict)
    version: int = 0
    conflicts: dict[str, int] = field(default_factory=dict)
    planner_events: list[tuple[int, str, str, int]] = field(default_factory=list)
    resumed_at: int = 0


async def _agent(
    memory: MemoryClient, race: asyncio.Barrier, report: DemoReport, say: Callable[[str], None]
) -> None:
    name = memory.agent
    report.conflicts[name] = 0
    for step in range(STEPS):
        for _attempt in range(MAX_ATTEMPTS):
            current = await memory.get(KEY)
            if step == 0 and report.conflicts[name] == 0:
                await race.wait()  # both hold version 1 now: one of the writes must lose
            status = dict(current.value)
            status["steps_done"] = [*status["steps_done"], f"{name}:{step}"]
            receipt = await memory.put(
                KEY,
                status,
                content=f"t42: {len(status['steps_done'])} steps done",
                type="task_state",
                expected_version=current.version,
                wait="applied",
            )
            if receipt.status == "applied":
                say(f"{name:>5}: step {step} applied at version {receipt.version}")
                break
            report.conflicts[name] += 1
            say(
                f"{name:>5}: conflict (expected {current.version}, now "
                f"{receipt.current_version}); re-reading and retrying"
            )
        else:
            raise RuntimeError(f"{name}: step {step} lost {MAX_ATTEMPTS} races in a row")


async def run_demo(
    nats_url: str | None = None,
    *,
    tenant: str | None = None,
    shards: int | None = None,
    say: Callable[[str], None] = print,
) -> DemoReport:
    tenant = tenant or f"demo-{uuid.uuid4().hex[:8]}"
    report = DemoReport()
    async with await MemoryClient.connect(
        nats_url, tenant=tenant, agent="planner", shards=shards
    ) as planner:
        feed = await planner.watch("task:t42:*")
        created = await planner.put(
            KEY,
            {"state": "open", "steps_done": []},
            expected_version=0,
            type="task_state",
            wait="applied",
        )
        say(f"planner: created {KEY} at version {created.version}")
        # each agent connects with a credential of its own (here from the local stack's
        # authority; elsewhere `zeromem auth issue TENANT alice` and ZEROMEM_CREDS)
        alice = await MemoryClient.connect(nats_url, tenant=tenant, agent="alice", shards=shards)
        bob = await MemoryClient.connect(nats_url, tenant=tenant, agent="bob", shards=shards)
        race = asyncio.Barrier(2)
        agents = asyncio.gather(_agent(alice, race, report, say), _agent(bob, race, report, say))

        expected_events = 1 + 2 * STEPS  # the creation and every applied step
        seen: list[tuple[int, str, str, int]] = []

        async def watch(feed, until: int) -> None:  # type: ignore[no-untyped-def]
            while sum(status == "applied" for _, _, status, _ in seen) < until:
                event = await feed.next(timeout=10)
                seen.append((event.position, event.result.agent, event.status, event.version))
                say(
                    f"planner sees #{event.position}: {event.result.agent} {event.op} "
                    f"{event.status} v{event.version}"
                )

        await watch(feed, 4)
        report.resumed_at = feed.position
        await feed.close()  # the planner goes away; the agents carry on
        say(f"planner: disconnected after position {report.resumed_at}")
        await asyncio.sleep(0.2)
        feed = await planner.watch("task:t42:*", since_position=report.resumed_at)
        say("planner: resumed")
        await watch(feed, expected_events)
        await agents
        await feed.close()
        await alice.close()
        await bob.close()
        final = await planner.get(KEY)
        report.final, report.version = final.value, final.version
        report.planner_events = seen
    say(
        f"final version {report.version}: {len(report.final['steps_done'])} steps, "  # type: ignore[arg-type]
        f"conflicts {report.conflicts}"
    )
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nats-url",
        help="NATS to use (default: ZEROMEM_NATS_URL, else the stack `zeromem up` runs here)",
    )
    parser.add_argument("--tenant", help="tenant (default: a new demo-... tenant per run)")
    parser.add_argument("--shards", type=int, help="shard count (default: ZEROMEM_SHARDS or 16)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    try:
        asyncio.run(run_demo(args.nats_url, tenant=args.tenant, shards=args.shards))
    except (ZeromemError, RuntimeError) as exc:
        sys.exit(f"error: {exc}")
    except KeyboardInterrupt:
        sys.exit(130)
