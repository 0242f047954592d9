"""Tracking JetStream's acknowledgements of fire-and-forget publishes, cheaply.

nats-py's ``publish_async`` creates a future, a unique inbox and a parsed ``PubAck`` per
message. A fire-and-forget write needs none of that: only how many acks are outstanding
(for back-pressure and ``flush``) and whether any of them reported an error. All acks come
back on one wildcard subject and are counted; the last token of each reply subject is the
number of commands the acknowledged message carried (a batch carries several).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

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

    async def ready(self) -> None:
        """Until one more message may go out. After this returns, ``send`` reaches the
        connection's buffer before yielding to the event loop, so messages sent one after
        another in a task go out in that order."""
        if self._sub is None:
            self._sub = await self.nc.subscribe(
                f"{self.subject}.*", cb=self._on_ack, pending_msgs_limit=4 * self.max_pending
            )
        while self.pending >= self.max_pending:  # back-pressure: JetStream is behind
            self._room.clear()
            await self._room.wait()

    async def send(
        self, subject: str, payload: bytes, headers: dict[str, str], commands: int = 1
    ) -> None:
        self.pending += 1
        self.pending_commands += commands
        self._drained.clear()
        try:
            await self.nc.publish(
                subject, payload, reply=f"{self.subject}.{commands}", headers=headers
            )
        except BaseException:
            self._settle(1, commands)
            raise

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        await self.ready()
        await self.send(subject, payload, headers)

    async def _on_ack(self, msg: Msg) -> None:
        commands = int(msg.subject.rsplit(".", 1)[1])
        if msg.data.startswith(b'{"error"') or (msg.headers and msg.headers.get("Status")):
            self.failures += commands
            self.last_error = msg.data.decode(errors="replace")[:300]
            log.warning("%d fire-and-forget write(s) not stored: %s", commands, self.last_error)
        else:
            self.stored += commands
        self._settle(1, commands)

    def _settle(self, messages: int, commands: int) -> None:
        self.pending -= messages
        self.pending_commands -= commands
        if self.pending < self.max_pending:
            self._room.set()
        if self.pending <= 0:
            self.pending = self.pending_commands = 0
            self._drained.set()

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
        self._room.set()
        self._drained.set()

    async def drained(self) -> None:
        await self._drained.wait()

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
