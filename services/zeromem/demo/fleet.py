"""A scripted multi-agent session on the embedded stack, measured by its own metrics.

A planner and two workers cooperate on tasks for several users over hundreds of turns:
users state preferences, tools return long results, the planner decides, the workers
report status with compare-and-set (and sometimes race each other for it). Every agent
turn recalls what it needs within a token budget instead of carrying its history; each
agent also reports how many tokens its history has grown to, so the metrics can set the
two side by side. The closing figures are read from the OpenTelemetry metrics.

    python -m zeromem.demo [--turns 300] [--budget 400]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from zeromem.embedded import EmbeddedStack
from zeromem.embedded.inprocess import InProcessServices
from zeromem.encoding import default_encoder
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.tokens import count_tokens
from zeromem.telemetry import Telemetry
from zeromem.telemetry.reading import metric_points

USERS = {
    "u1": ("answers in Chinese", "prefers concise answers", "timezone UTC+8"),
    "u2": ("answers in English", "wants step-by-step explanations", "timezone UTC-5"),
    "u3": ("answers in French", "likes tables over prose", "timezone UTC+1"),
    "u4": ("answers in German", "prefers code samples in Python", "timezone UTC+2"),
    "u5": ("answers in Spanish", "wants the cost first", "timezone UTC-3"),
}
TOOLS = ("search_flights", "lookup_invoice", "check_inventory", "query_crm", "run_report")
STATES = ("planned", "running", "waiting_on_user", "blocked", "done")


@dataclass
class Agent:
    name: str
    client: MemoryClient
    history: list[str] = field(default_factory=list)
    history_tokens: int = 0
    conflicts_seen: int = 0

    def hear(self, text: str) -> None:
        self.history.append(text)
        self.history_tokens += count_tokens(text + "\n")


def tool_output(rng: random.Random, tool: str, task: str) -> str:
    """A long, noisy tool result, as real tools return."""
    rows = [
        f"row {i}: id={rng.randrange(10**6)} "
        f"amount={rng.randrange(50, 5000)}.{rng.randrange(100):02d} "
        f"status={rng.choice(('ok', 'pending', 'late'))} "
        f"updated=2026-11-{rng.randrange(1, 29):02d}"
        for i in range(rng.randrange(8, 20))
    ]
    return f"{tool} for {task} returned {len(rows)} rows. " + " ".join(rows)


async def set_status(agent: Agent, task: str, state: str) -> None:
    """Compare-and-set on the task's status: on a conflict, read again and retry."""
    key = f"task:{task}:status"
    for _ in range(10):
        current = await agent.client.get(key)
        expected = current.version if current is not None else 0
        receipt = await agent.client.put(
            key,
            {"state": state, "by": agent.name},
            content=f"{task} is {state} ({agent.name})",
            type="task_state",
            expected_version=expected,
            wait="applied",
        )
        if receipt.status != "conflict":
            return
        agent.conflicts_seen += 1


async def agent_turn(agent: Agent, rng: random.Random, budget: int, encoder) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    user = rng.choice(list(USERS))
    task = f"t{rng.randrange(1, 11)}"
    owners = [f"user:{user}", f"task:{task}"]
    event = rng.random()
    if event < 0.15:
        said = rng.choice(USERS[user])
        message = f"{user} says: from now on, {said}, please."
    elif event < 0.55:
        tool = rng.choice(TOOLS)
        message = tool_output(rng, tool, task)
    else:
        message = f"{user} asks about {task}: what is the status, and what did we decide?"
    agent.hear(message)

    # The turn: recall within the budget instead of sending the history.
    reply = await agent.client.recall(
        message[:300], owners=owners, k=6, budget=budget, history_tokens=agent.history_tokens
    )

    # The program records what it learned, without asking a model (zero LLM tokens).
    if event < 0.15:
        await agent.client.put(
            f"user:{user}:pref_{zlib.crc32(said.encode()) % 1000}",
            said,
            content=f"{user} {said}",
            type="user_preference",
            tags=("pref",),
        )
    elif event < 0.55:
        await agent.client.put(
            f"task:{task}",
            message,
            content=encoder.encode(message),
            type="tool_result",
            source=agent.name,
        )
        if agent.name == "planner":
            await agent.client.put(
                f"task:{task}:plan",
                {"next": "review results"},
                content=f"decided: review {task} results with {user} next",
                type="decision",
            )
    else:
        await set_status(agent, task, rng.choice(STATES))
    answer = f"{agent.name} answers {user} using {len(reply.memories)} memories."
    agent.hear(answer)
    return reply.tokens, agent.history_tokens


def read_totals(reader: InMemoryMetricReader) -> dict[str, float]:
    """Each metric summed over its points; commands also per outcome (``name.outcome``)."""
    totals: dict[str, float] = {}
    for name, points in metric_points(reader).items():
        for attrs, value in points:
            outcome = attrs.get("zeromem.outcome")
            key = f"{name}.{outcome}" if outcome else name
            totals[key] = totals.get(key, 0) + value
    return totals


async def run(turns: int, budget: int, seed: int, console: Console) -> dict[str, float]:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp)) as stack:
        assert stack.authority is not None  # an embedded stack is secured by default
        settings = stack.settings_for(
            Settings(shards=8, auth_dir=str(stack.authority.directory)), "admin"
        )
        services = await InProcessServices.start(settings, telemetry=telemetry)
        agents = [
            Agent(
                name,
                await MemoryClient.connect(
                    stack.nats_url,
                    tenant="demo",
                    agent=name,
                    shards=settings.shards,
                    telemetry=telemetry,
                    settings=settings,
                ),
            )
            for name in ("planner", "worker-a", "worker-b")
        ]
        encoder = default_encoder()
        try:
            with Progress(console=console, transient=True) as progress:
                bar = progress.add_task("agents working", total=turns)

                async def work(agent: Agent, share: int, agent_seed: int) -> None:
                    rng = random.Random(agent_seed)
                    for _ in range(share):
                        await agent_turn(agent, rng, budget, encoder)
                        progress.advance(bar)

                shares = [turns // 3 + (1 if i < turns % 3 else 0) for i in range(3)]
                await asyncio.gather(
                    *(
                        work(a, n, seed + i)
                        for i, (a, n) in enumerate(zip(agents, shares, strict=True))
                    )
                )
            for agent in agents:
                await agent.client.flush()
        finally:
            for agent in agents:
                await agent.client.close()
            await services.stop()
    totals = read_totals(reader)
    totals["cas_retries"] = sum(a.conflicts_seen for a in agents)
    return totals


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A multi-agent session with zero-token memory.")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--budget", type=int, default=400, help="recall budget per turn (tokens)")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    console = Console()
    console.print(
        f"[bold]zeromem demo[/]: planner + 2 workers, {len(USERS)} users, "
        f"{args.turns} turns, recall budget {args.budget} tokens per turn"
    )
    t = await run(args.turns, args.budget, args.seed, console)

    history = int(t.get("zeromem.agent.history.tokens", 0))
    injected = int(t.get("zeromem.recall.tokens.injected", 0))
    baseline = int(t.get("zeromem.recall.tokens.baseline", 0))
    table = Table(title="from the metrics", show_header=False)
    table.add_row("agent turns (recalls)", str(int(t.get("zeromem.recall.requests", 0))))
    table.add_row("commands published", str(int(t.get("zeromem.commands.published", 0))))
    table.add_row("LLM tokens spent writing memory", str(int(t.get("zeromem.write.llm_tokens", 0))))
    table.add_row("tokens if each turn carried its history", f"{history:,}")
    table.add_row("tokens if each turn injected every memory in scope", f"{baseline:,}")
    table.add_row("tokens recall injected", f"{injected:,}")
    if history:
        table.add_row(
            "saved against history",
            f"{history - injected:,} ({100 * (history - injected) / history:.1f}%)",
        )
    table.add_row(
        "compare-and-set conflicts (workers' count; agents retried each)",
        f"{int(t.get('zeromem.commands.conflict', 0))} ({int(t.get('cas_retries', 0))})",
    )
    console.print(table)
    return 0
