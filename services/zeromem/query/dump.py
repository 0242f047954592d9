"""What a read service holds right now, written to its log on SIGUSR1 (``kill -USR1``).

Reads that went unanswered for 10-60 s under load left an empty serve log: nothing told
a stalled turn from a lost subscription, a dead connection or a read stuck on Redis. The
dump says which: the gate's state, the NATS connection and each subscription, and the
stacks of the running tasks, grouped (two thousand handlers waiting in one place are one
line with a count).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from zeromem.query.responder import Responder

STACK_FRAMES = 8  # innermost frames of a task's stack that name where it waits


def connection_state(name: str, nc: Any) -> str:
    if nc is None:
        return f"nats {name}: no connection"
    return (
        f"nats {name}: connected={nc.is_connected} reconnecting={nc.is_reconnecting} "
        f"closed={nc.is_closed} pending_bytes={nc.pending_data_size} "
        f"subscriptions={len(nc._subs)}"
    )


def subscription_state(kind: str, sub: Any) -> str:
    """A responder's subscription: the requests NATS delivered to it and those still
    waiting for its callback (which never waits, so a growing backlog means a stalled
    loop)."""
    return (
        f"subscription {kind} ({sub.subject}, queue {sub.queue!r}): "
        f"delivered={sub.delivered} pending_msgs={sub.pending_msgs}"
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


def read_service_state(responder: Responder, connection_name: str) -> str:
    lines = [f"gate: {responder.gate.state()}"]
    lines.append(connection_state(connection_name, responder.nc))
    lines += [subscription_state(k, s) for k, s in responder.subscriptions.items()]
    lines.append(f"requests being answered: {responder.in_hand}")
    lines += task_stacks()
    return "\n".join(lines)
