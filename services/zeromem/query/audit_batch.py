"""Recall's read audit records, published a batch at a time.

Every recall is recorded in the audit stream (``lifecycle.audit.read_entry``: the reader
and the keys recalled, never values). One publish per recall cost the read service and
nats-server more than the recall's own NATS hops: a JetStream store per record. Measured
with ``bench/recall_latency.py --compare-serve`` against a read service that recorded
nothing after its replies (10k memories in scope): nats-server 0.59 against 0.39 ms of CPU
a recall, the read service 2.65 against 2.29.

So the records wait here, per tenant, and go out as one ``AuditBatch`` (the format the
workers already publish many entries in): at most ``max_delay_s`` after the first of a
batch, or at once when a tenant's batch holds ``max_entries``. A record is only delayed,
by ``max_delay_s`` at most while NATS takes publishes; ``flush`` (the read services call it
as they stop) sends whatever waits; a publish that fails is logged, as one record's was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from zeromem import naming
from zeromem.lifecycle.audit import read_entry
from zeromem.lifecycle.reads import Publish
from zeromem.schemas import AuditBatch, AuditEntry, encode

log = logging.getLogger(__name__)

MAX_ENTRIES = 64  # records per batch at most: about 100 KB with k=20 long keys each
MAX_DELAY_S = 0.05  # how long a record may wait for others to share its publish


class ReadAuditBatcher:
    def __init__(
        self,
        publish: Publish,
        op: str,
        *,
        max_entries: int = MAX_ENTRIES,
        max_delay_s: float = MAX_DELAY_S,
    ) -> None:
        self._publish = publish
        self.op = op
        self.max_entries = max_entries
        self.max_delay_s = max_delay_s
        self._pending: dict[str, list[AuditEntry]] = {}  # tenant -> records, oldest first
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Records waiting for their batch's publish."""
        return sum(len(entries) for entries in self._pending.values())

    def record(
        self, tenant: str, reader: str, keys: Iterable[str], detail: dict[str, object]
    ) -> None:
        """Queue the record of one read (never waits; call from the event loop)."""
        entries = self._pending.setdefault(tenant, [])
        entries.append(read_entry(tenant, reader, self.op, keys, detail))
        loop = asyncio.get_running_loop()
        if len(entries) >= self.max_entries:
            del self._pending[tenant]
            self._send(loop, tenant, entries)
        elif self._timer is None:
            self._timer = loop.call_later(self.max_delay_s, self._send_all)

    async def flush(self) -> None:
        """Send every waiting record, and wait for every publish under way."""
        self._send_all()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _send_all(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, {}
        loop = asyncio.get_running_loop()
        for tenant, entries in pending.items():
            self._send(loop, tenant, entries)

    def _send(
        self, loop: asyncio.AbstractEventLoop, tenant: str, entries: list[AuditEntry]
    ) -> None:
        task = loop.create_task(self._publish_batch(tenant, entries))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _publish_batch(self, tenant: str, entries: list[AuditEntry]) -> None:
        try:
            await self._publish(
                naming.audit_read_subject(tenant, self.op),
                encode(AuditBatch(entries=tuple(entries))),
                None,
            )
        except Exception:  # a read is answered whatever happens to its record
            log.exception("could not record %d reads of tenant %r", len(entries), tenant)
