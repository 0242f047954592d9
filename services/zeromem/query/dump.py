"""What a read service holds right now, written to its log on SIGUSR1 (``kill -USR1``).

Reads that went unanswered for 10-60 s under load left an empty serve log: nothing told
a stalled turn from a lost subscription, a dead connection or a read stuck on Redis. The
dump says which: the gate's state, each NATS connection and subscription, and the
stacks of the running tasks, grouped (two thousand handlers waiting in one place are one
line with a count).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from zeromem.query.gate import TenantGate

STACK_FRAMES = 8  # innermost frames of a task's stack that name where it waits


def connection_state(name: str, nc: Any) -> str:
    if nc is None:
        return f"nats {name}: no connection"
    return (
        f"nats {name}: connected={nc.is_connected} reconnecting={nc.is_reconnecting} "
        f"closed={nc.is_closed} pending_bytes={nc.pending_data_size} "
        f"subscriptions={len(nc._subs)}"
    )


def subscriber_state(subscriber: Any) -> str:
    """A FastStream subscriber: whether its consume task still runs (its supervisor
    restarts a failed one) and how many of its ``max_workers`` are free."""
    tasks = getattr(subscriber, "tasks", [])
    limiter = getattr(subscriber, "limiter", None)
    return (
        f"subscriber {subscriber.subject}: running={subscriber.running} "
        f"subscribed={subscriber.subscription is not None} "
        f"consume_tasks_done={[t.done() for t in tasks]} "
        f"free_workers={None if limiter is None else limiter.value}"
    )


def task_stacks() -> list[str]:
    """Every task of the running loop by where it is, the most common places first."""
    places: Counter[str] = Counter()
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=STACK_FRAMES)
        where = " > ".join(
            f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_code.co_name}:{f.f_lineno}"
            for f in frames
        )
        places[where or "(no frames)"] += 1
    return [f"{count} task(s) at {where}" for where, count in places.most_common()]


def read_service_state(
    gate: TenantGate,
    connections: dict[str, Any],
    subscribers: list[Any],
    recall_tasks: int,
) -> str:
    lines = [f"gate: {gate.state()}"]
    lines += [connection_state(name, nc) for name, nc in connections.items()]
    lines += [subscriber_state(s) for s in subscribers]
    lines.append(f"recall requests being answered: {recall_tasks}")
    lines += task_stacks()
    return "\n".join(lines)
