"""What a read does besides answering: the audit record (reader and keys, never values)
and the slide of a sliding expiry.

Both are publishes without waiting for an acknowledgement, so a read pays microseconds
for them. A slide is a ``touch`` command on the command stream (so the log still holds
every change and a rebuild reproduces it), sent only once a tenth of the memory's time
to live has passed since the last slide: a hot memory read a thousand times a second
costs a handful of touches, not a thousand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

from zeromem import naming
from zeromem.ids import new_command_id
from zeromem.lifecycle.audit import read_entry
from zeromem.schemas import AuditBatch, MemoryItem, Touch, encode, owner_of

log = logging.getLogger(__name__)

Publish = Callable[[str, bytes, dict[str, str] | None], Awaitable[None]]

SLIDE_AFTER = 0.1  # fraction of the time to live that must pass before a read slides it


class ReadRecorder:
    def __init__(self, publish: Publish, shards: int, *, audit: bool = True) -> None:
        self._publish = publish
        self.shards = shards
        self.audit = audit

    async def after_read(
        self,
        tenant: str,
        reader: str,
        op: str,
        keys: Iterable[str],
        items: Sequence[MemoryItem | None] = (),
        detail: dict[str, object] | None = None,
    ) -> None:
        try:
            if self.audit:
                entry = read_entry(tenant, reader, op, keys, detail)
                await self._publish(
                    naming.audit_read_subject(tenant, op),
                    encode(AuditBatch(entries=(entry,))),
                    None,
                )
            now = time.time()
            for item in items:
                if (
                    item is not None
                    and item.refresh_on_read
                    and item.ttl_s
                    and item.expires_at
                    and item.expires_at - now < (1.0 - SLIDE_AFTER) * item.ttl_s
                ):
                    await self._touch(tenant, reader, item.key, now)
        except Exception:  # a read is answered whatever happens to its side effects
            log.exception("could not record a read")

    async def _touch(self, tenant: str, reader: str, key: str, now: float) -> None:
        # On behalf of the reader, whom the query's subject named (the server vouched).
        agent = reader or "reader"
        command = Touch(id=new_command_id(), tenant=tenant, agent=agent, ts=now, key=key)
        shard = naming.shard_for(tenant, owner_of(key), self.shards)
        await self._publish(
            naming.command_subject(tenant, shard, agent),
            encode(command),
            {naming.MSG_ID_HEADER: naming.command_dedupe_id(tenant, agent, command.id)},
        )
