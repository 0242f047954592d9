"""Tracking JetStream's acknowledgements of fire-and-forget publishes, cheaply.

nats-py's ``publish_async`` creates a future, a unique inbox and a parsed ``PubAck`` per
message. A fire-and-forget write needs none of that: only how many acks are outstanding
(for back-pressure and ``flush``) and whether any of them reported an error. All acks come
back on one wildcard subject and are counted; the last two tokens of each reply subject
are the shard and the number of commands the acknowledged message carried (a batch
carries several).

Read your writes: each acknowledgement's stream sequence is kept per shard
(``positions``), and ``settled(shard)`` waits until none of the shard's messages is still
unacknowledged, so a read can name the positions of every write issued before it
(``GetRequest.after``, ``query.consistency``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from zeromem import naming

log = logging.getLogger(__name__)


class AckCounter:
    def __init__(self, nc: NatsClient, inbox: str, max_pending: int = 8192) -> None:
        self.nc = nc
        self.subject = f"{inbox}.acks"
        self.max_pending = max_pending  # messages in flight at most
        self.pending = 0  # messages
        self.pending_commands = 0
        self.stored = 0  # commands
        self.failures = 0  # commands
        self.unknown = 0  # commands whose acknowledgement a reconnect swallowed
        self.last_error = ""
        self._room = asyncio.Event()
        self._room.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._sub: Any = None
        self.positions: dict[int, int] = {}  # shard -> newest acknowledged stream sequence
        # shard -> newest sequence of this client's whose result came back: a worker
        # applies a tenant's commands on a shard in their order, so every earlier write
        # of this client there is applied (or refused) too, and a read need not wait on
        # the shard's position for them (which another tenant's backlog may hold back).
        self.applied: dict[int, int] = {}
        self._unacked: dict[int, int] = {}  # shard -> messages sent, not yet acknowledged
        self._settled: dict[int, asyncio.Event] = {}

    async def ready(self) -> None:
        """Until one more message may go out. After this returns, ``send`` reaches the
        connection's buffer before yielding to the event loop, so messages sent one after
        another in a task go out in that order."""
        if self._sub is None:
            self._sub = await self.nc.subscribe(
                f"{self.subject}.*.*", cb=self._on_ack, pending_msgs_limit=4 * self.max_pending
            )
        while self.pending >= self.max_pending:  # back-pressure: JetStream is behind
            self._room.clear()
            await self._room.wait()

    async def send(
        self, subject: str, payload: bytes, headers: dict[str, str], commands: int = 1
    ) -> None:
        shard = naming.parse_command_subject(subject)[1]
        self.pending += 1
        self.pending_commands += commands
        self._drained.clear()
        self._unacked[shard] = self._unacked.get(shard, 0) + 1
        settled = self._settled.get(shard)
        if settled is not None:
            settled.clear()
        try:
            await self.nc.publish(
                subject, payload, reply=f"{self.subject}.{shard}.{commands}", headers=headers
            )
        except BaseException:
            self._settle(1, commands, shard)
            raise

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        await self.ready()
        await self.send(subject, payload, headers)

    async def _on_ack(self, msg: Msg) -> None:
        _, shard_token, count_token = msg.subject.rsplit(".", 2)
        shard, commands = int(shard_token), int(count_token)
        if msg.data.startswith(b'{"error"') or (msg.headers and msg.headers.get("Status")):
            self.failures += commands
            self.last_error = msg.data.decode(errors="replace")[:300]
            log.warning("%d fire-and-forget write(s) not stored: %s", commands, self.last_error)
        else:
            self.stored += commands
            self.note_position(shard, _stream_sequence(msg.data))
        self._settle(1, commands, shard)

    def note_position(self, shard: int, sequence: int) -> None:
        """A write of this client on ``shard`` was stored at ``sequence``."""
        if sequence > self.positions.get(shard, 0):
            self.positions[shard] = sequence

    def note_applied(self, shard: int, sequence: int) -> None:
        """A write of this client on ``shard``, stored at ``sequence``, has its result."""
        if sequence > self.applied.get(shard, 0):
            self.applied[shard] = sequence

    def unapplied(self, shard: int) -> int | None:
        """The position a read must wait for on ``shard`` (None: nothing to wait for)."""
        position = self.positions.get(shard)
        if position is None or position <= self.applied.get(shard, 0):
            return None
        return position

    def unacknowledged_shards(self) -> set[int]:
        return set(self._unacked)

    def unsettled(self, shard: int) -> bool:
        """Whether a message sent to ``shard`` is still unacknowledged."""
        return bool(self._unacked.get(shard))

    async def settled(self, shard: int) -> None:
        """Until every message sent to ``shard`` so far is acknowledged (or given up on)."""
        if not self._unacked.get(shard):
            return
        event = self._settled.get(shard)
        if event is None:
            event = self._settled[shard] = asyncio.Event()
        await event.wait()

    def _settle(self, messages: int, commands: int, shard: int) -> None:
        self.pending -= messages
        self.pending_commands -= commands
        left = self._unacked.get(shard, 0) - messages
        if left > 0:
            self._unacked[shard] = left
        else:
            self._unacked.pop(shard, None)
            self._release(shard)
        if self.pending < self.max_pending:
            self._room.set()
        if self.pending <= 0:
            self.pending = self.pending_commands = 0
            self._drained.set()

    def _release(self, shard: int) -> None:
        event = self._settled.get(shard)
        if event is not None:
            event.set()

    def forget_outstanding(self) -> None:
        """After a reconnect, acknowledgements in flight are gone for good: count those
        writes as unknown (they may or may not be stored) instead of waiting on them, so
        ``flush`` and back-pressure do not wait for ever."""
        if self.pending:
            self.unknown += self.pending_commands
            log.warning(
                "%d fire-and-forget writes lost their acknowledgement in a reconnect; "
                "they may or may not be stored",
                self.pending_commands,
            )
        self.pending = self.pending_commands = 0
        for shard in list(self._unacked):
            self._release(shard)
        self._unacked.clear()
        self._room.set()
        self._drained.set()

    async def drained(self) -> None:
        await self._drained.wait()

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None


def _stream_sequence(ack: bytes) -> int:
    """The ``seq`` of a JetStream publish acknowledgement (``{"stream":..,"seq":N,..}``),
    without parsing the whole JSON document; 0 if it has none."""
    at = ack.find(b'"seq":')
    if at < 0:
        return 0
    digits = ack[at + 6 : at + 32].lstrip()
    end = 0
    while end < len(digits) and 48 <= digits[end] <= 57:
        end += 1
    return int(digits[:end]) if end else 0
