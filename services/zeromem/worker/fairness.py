"""Fair turns between tenants within one shard.

A shard's commands arrive in one stream, every tenant's interleaved. Applied strictly in
stream order, one tenant's backlog holds every other tenant's commands behind it: 60,000
writes from one tenant once delayed another tenant's single write on the same shards by
4.6 s. Order only matters within an owner, and an owner belongs to one tenant, so the
shard may serve tenants in turns, as long as each tenant's own commands keep their order.

``ShardWindow`` holds the messages a shard has fetched and not yet acknowledged, up to
``Limits.shard_window`` commands read ahead. Each round takes, per tenant, its oldest
messages up to ``Limits.tenant_round_share`` commands (whole messages, at least one)
while other tenants have messages waiting; a tenant alone takes whole rounds. Another
tenant's command therefore waits for at most one small round, whatever the backlog ahead
of it within the window; within a round the lightest turns are applied first.

Acknowledgements and the shard's recorded position stay cumulative: they only ever cover
the window's done prefix (``finish``, ``positions``), never a message applied ahead of an
older one still waiting, so a restart never skips a message that was passed over. (One
applied ahead of the prefix comes again after a restart and is recognised by its command
id, like any redelivery.)
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from nats.aio.msg import Msg

# How long a tenant counts as present after its last message: while two tenants share a
# shard, rounds stay small even at the instant one of them has nothing waiting, so that
# its next command does not arrive in the middle of a full round of the other's.
PRESENCE_S = 1.0


@dataclass(slots=True)
class Held:
    msg: Msg
    sequence: int
    tenant: str
    commands: int  # as the message says (Zm-Batch); admission checks it
    size: int
    since: float  # when it arrived, or was last reported in progress to the server
    done: bool = False


class ShardWindow:
    def __init__(self) -> None:
        self.held: deque[Held] = deque()  # in stream order, the done prefix already removed
        self.commands = 0  # commands held, not yet applied
        self.bytes = 0
        self.newest = 0  # highest stream sequence seen this tenure
        self.acknowledged = 0  # highest stream sequence acknowledged
        self._present: dict[str, float] = {}  # tenant -> when its last message arrived

    def __len__(self) -> int:
        return len(self.held)

    def add(self, msg: Msg, sequence: int, tenant: str, commands: int, done: bool = False) -> bool:
        """Hold a fetched message (``done``: already dealt with, held only until the done
        prefix reaches it); False for a redelivery of one already held or done."""
        if sequence <= self.newest:
            return False
        self.newest = sequence
        now = time.monotonic()
        self.held.append(Held(msg, sequence, tenant, commands, len(msg.data), now, done))
        self.bytes += len(msg.data)
        if not done:
            self.commands += commands
            self._present[tenant] = now
        return True

    def waiting_since(self, before: float) -> list[Held]:
        """Messages still waiting that arrived (or were last renewed) before ``before``:
        the server would deliver them again at its ack wait unless told they are in hand.
        Their clock restarts."""
        now = time.monotonic()
        out = []
        for held in self.held:
            if not held.done and held.since < before:
                held.since = now
                out.append(held)
        return out

    def select(self, batch_size: int, share: int) -> list[Held]:
        """The next round: whole messages, each tenant's in stream order."""
        waiting: dict[str, list[Held]] = {}
        for held in self.held:
            if not held.done:
                waiting.setdefault(held.tenant, []).append(held)
        if not waiting:
            return []
        if len(waiting) == 1 and not self._shared():
            share = batch_size
        turns: list[tuple[int, list[Held]]] = []
        total = 0
        # Tenants by their oldest waiting message: the one waiting longest is served first.
        for messages in waiting.values():
            taken = 0
            turn: list[Held] = []
            for held in messages:
                if taken and taken + held.commands > share:
                    break
                turn.append(held)
                taken += held.commands
            turns.append((taken, turn))
            total += taken
            if total >= batch_size:
                break
        # Applied lightest turn first (ties: in that order): a round is committed in calls
        # of bounded cost (worker/commit_cost.py), so a tenant with a command or two is not
        # held behind every call of a backlogged tenant's share.
        turns.sort(key=lambda taken_turn: taken_turn[0])
        return [held for _, turn in turns for held in turn]

    def positions(self, chosen: list[Held]) -> dict[int, int]:
        """For each chosen message, the stream position the shard may record once it and
        every chosen message before it are applied: the end of the done prefix then."""
        out: dict[int, int] = {}
        prefix = self.acknowledged
        ahead = iter(self.held)
        next_held = next(ahead, None)
        finished: set[int] = set()
        for held in chosen:
            finished.add(held.sequence)
            while next_held is not None and (next_held.done or next_held.sequence in finished):
                prefix = next_held.sequence
                next_held = next(ahead, None)
            out[held.sequence] = prefix
        return out

    def finish(self, chosen: list[Held]) -> Held | None:
        """Mark ``chosen`` applied; drop the done prefix and return its last message (the
        one to acknowledge: the consumer's acknowledgements are cumulative), if any."""
        for held in chosen:
            if not held.done:
                held.done = True
                self.commands -= held.commands
        last = None
        while self.held and self.held[0].done:
            last = self.held.popleft()
            self.bytes -= last.size
        if last is not None:
            self.acknowledged = last.sequence
        return last

    def _shared(self) -> bool:
        now = time.monotonic()
        recent = [t for t, at in self._present.items() if now - at < PRESENCE_S]
        if len(recent) != len(self._present):
            self._present = {t: self._present[t] for t in recent}
        return len(recent) > 1
