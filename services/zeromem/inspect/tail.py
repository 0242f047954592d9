"""Reading a retained stream through a short-lived pull consumer of one's own: the dead
letters (a window of the latest, or new ones as they come) and a tenant's audit trail.

The consumer is named (random, unguessable) with its filter in the create subject, as the
SDK's change feed and audit reads do: that is the form the server checks against a
credential's permissions (docs/security.md). It keeps no acknowledgement state, lives in
memory, and is deleted on close (or dropped by the server after ``IDLE_S``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

IDLE_S = 60.0
_FETCH = 256


class StreamTail:
    def __init__(
        self, nc: NatsClient, stream: str, filter_subject: str, *, start_seq: int | None = None
    ) -> None:
        """From stream sequence ``start_seq`` on, or (None) only what arrives from now."""
        self.nc = nc
        self.stream = stream
        self.filter_subject = filter_subject
        self.start_seq = start_seq
        self.pending = 0  # messages left when it opened (from start_seq)
        self._name = ""
        self._sub: Any = None

    async def open(self) -> StreamTail:
        if self.start_seq is None:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
        else:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(1, self.start_seq)
            )
        config.name = self._name = self.nc._nuid.next().decode()
        config.filter_subject = self.filter_subject
        config.ack_policy = AckPolicy.NONE
        config.inactive_threshold = IDLE_S
        config.mem_storage = True
        config.num_replicas = 1
        js = self.nc.jetstream()
        info = await js.add_consumer(self.stream, config)
        self.pending = info.num_pending or 0
        self._sub = await js.pull_subscribe_bind(consumer=self._name, stream=self.stream)
        return self

    async def fetch(self, wait_s: float) -> list[Any]:
        """The next messages, waiting up to ``wait_s`` for the first (none: [])."""
        try:
            return list(await self._sub.fetch(_FETCH, timeout=wait_s))
        except (NatsTimeoutError, TimeoutError):
            return []

    async def read_all(self, wait_s: float = 2.0) -> list[Any]:
        """Every message that was there when it opened (and a few more that came since)."""
        out: list[Any] = []
        while len(out) < self.pending:
            batch = await self.fetch(wait_s)
            if not batch:
                break
            out += batch
        return out

    async def close(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            with contextlib.suppress(Exception):
                await self.nc.jetstream().delete_consumer(self.stream, self._name)

    async def __aenter__(self) -> StreamTail:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
