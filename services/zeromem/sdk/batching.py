"""Coalescing fire-and-forget commands into batch messages.

A fire-and-forget write costs the agent nothing to wait for, but each JetStream message
costs CPU everywhere it goes: the client's publish, the server's store and ack, the
worker's receive. Commands bound for the same subject (one tenant's shard) that an agent
issues without yielding to the event loop in between travel as one message, a msgpack
array of commands (``Zm-Batch: <count>``); the worker applies each command on its own,
exactly as if it had come alone, and refuses a bad one without its neighbours.

Nothing waits for a batch to fill: what is buffered goes out at the event loop's next
turn, so an agent that writes once and then awaits anything else sends at once. Order is
kept: a buffered subject is sent before any later command to it (a write that waits, or
the next batch), and a shard's commands stay in publish order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from zeromem import naming
from zeromem.schemas import chunks, encode_batch
from zeromem.sdk.acks import AckCounter
from zeromem.sdk.pacing import ShardPacer

log = logging.getLogger(__name__)

MAX_COMMANDS = 128  # per batch message
MAX_BYTES = 256 * 1024  # per batch message, well under NATS's default 1 MiB payload


class _Buffer:
    __slots__ = ("first_id", "parts", "size")

    def __init__(self, first_id: str) -> None:
        self.first_id = first_id
        self.parts: list[bytes] = []
        self.size = 0


class CommandBatcher:
    def __init__(
        self,
        acks: AckCounter,
        max_commands: int = MAX_COMMANDS,
        max_bytes: int = MAX_BYTES,
        dedupe_id: Callable[[str], str] = lambda command_id: command_id,
        pacer: ShardPacer | None = None,
    ) -> None:
        self.acks = acks
        # A shard held back (sdk.pacing) holds its subject's buffer: commands issued
        # meanwhile join it, and it then goes as several messages.
        self.pacer = pacer
        self.dedupe_id = dedupe_id  # a message's Nats-Msg-Id from its (first) command id
        self.max_commands = max_commands
        self.max_bytes = max_bytes
        self.unsent = 0  # commands a failed send dropped (each failure is logged)
        self._buffers: dict[str, _Buffer] = {}
        self._flush_scheduled = False
        self._flushes: set[asyncio.Task[None]] = set()

    async def add(self, subject: str, command_id: str, encoded: bytes) -> None:
        buffer = self._buffers.get(subject)
        if buffer is None:
            buffer = self._buffers[subject] = _Buffer(command_id)
        buffer.parts.append(encoded)
        buffer.size += len(encoded)
        if len(buffer.parts) >= self.max_commands or buffer.size >= self.max_bytes:
            await self.send(subject)
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_soon)

    async def send(self, subject: str) -> None:
        """Send what is buffered for ``subject`` now (before a write to it that waits)."""
        pacer = self.pacer
        shard = naming.parse_command_subject(subject)[1] if pacer is not None else 0
        while (waiting := self._buffers.get(subject)) is not None:
            if pacer is not None:
                await pacer.wait(shard, len(waiting.parts))
            await self.acks.ready()
            # From here to the connection's buffer nothing yields (see AckCounter.ready):
            # a write waiting on this one cannot overtake it.
            buffer = self._buffers.pop(subject, None)
            if buffer is None:
                return  # sent by someone else meanwhile
            if pacer is not None:
                going = pacer.affordable(shard, len(buffer.parts))
                if going < len(buffer.parts):
                    # The quota has room for these now: the rest stays first in line.
                    rest = _Buffer(f"{buffer.first_id}/{going}")
                    rest.parts = buffer.parts[going:]
                    rest.size = sum(map(len, rest.parts))
                    buffer.parts = buffer.parts[:going]
                    self._buffers = {subject: rest, **self._buffers}
                pacer.spent(shard, len(buffer.parts))
            if len(buffer.parts) > self.max_commands or buffer.size > self.max_bytes:
                # It grew while the shard was held back: several messages, in order,
                # each one's dedupe id naming its place.
                parts = chunks(buffer.parts, self.max_bytes, self.max_commands)
                for n, part in enumerate(parts):
                    await self._send_one(subject, f"{buffer.first_id}/{n}", part)
            else:
                await self._send_one(subject, buffer.first_id, buffer.parts)
            if pacer is None:
                return

    async def _send_one(self, subject: str, first_id: str, parts: list[bytes]) -> None:
        count = len(parts)
        try:
            if count == 1:  # alone: a plain command message, as any publisher sends it
                once = self.dedupe_id(first_id)
                await self.acks.send(subject, parts[0], {naming.MSG_ID_HEADER: once})
                return
            headers = {
                naming.MSG_ID_HEADER: self.dedupe_id(f"{first_id}+{count}"),
                naming.BATCH_HEADER: str(count),
            }
            await self.acks.send(subject, encode_batch(parts), headers, commands=count)
        except Exception:
            self.unsent += count
            raise

    async def send_all(self) -> None:
        """Send everything buffered, and wait for sends already under way."""
        await self._send_buffered()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    async def _send_buffered(self) -> None:
        for subject in list(self._buffers):
            await self.send(subject)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        if self._buffers:
            task = asyncio.ensure_future(self._send_all_logged())
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _send_all_logged(self) -> None:
        try:
            await self._send_buffered()
        except Exception as exc:  # no caller to raise to: a fire-and-forget write is lost
            self.unsent += sum(len(b.parts) for b in self._buffers.values())
            self._buffers.clear()
            log.warning(
                "could not send buffered fire-and-forget writes (%d so far): %s", self.unsent, exc
            )
