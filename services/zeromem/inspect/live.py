"""Live streams for the page, as server-sent events: a scope's change feed (through the
viewer's own feed consumer, ``MemoryClient.watch``), and dead letters as they arrive
(the operator's, from the dead-letter stream; a tenant auditor's, from its audit trail,
where the workers record each refusal of its commands).

Each event carries an ``id``: the browser's EventSource sends the last one back when it
reconnects (``Last-Event-ID``), and the change feed resumes right after it. How many
streams may be open at once is a named limit; one more is refused, never queued.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeoutError

from zeromem import naming
from zeromem.inspect.memories import Masker
from zeromem.inspect.operations import dead_letter_filter, dead_letter_row
from zeromem.inspect.tail import StreamTail
from zeromem.lifecycle.redact import Redactor
from zeromem.schemas import Applied, AuditBatch, Conflict, Rejected, decode
from zeromem.sdk.client import MemoryClient
from zeromem.sdk.feed import ChangeEvent

_WAIT_S = 5.0  # one pull's longest wait; a disconnected browser is noticed between pulls


class StreamLimit(RuntimeError):
    """One more live stream than ``InspectSettings.max_streams`` allows."""


class StreamSlots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def take(self) -> None:
        if self.open >= self.limit:
            raise StreamLimit(
                f"{self.open} live streams are open, the limit is {self.limit} "
                "(ZEROMEM_INSPECT_MAX_STREAMS): close one"
            )
        self.open += 1

    def give_back(self) -> None:
        self.open -= 1


def change_row(event: ChangeEvent, masker: Masker) -> dict[str, Any]:
    result = event.result
    row: dict[str, Any] = {
        "position": event.position,
        "time": event.time,
        "key": result.key,
        "op": result.op,
        "status": event.status,
        "agent": result.agent,
        "version": event.version,
    }
    if isinstance(result, Applied):
        row["keys"] = list(result.keys)
        if result.item is not None:
            hidden = masker.hidden(result.key, result.item.sensitive)
            row["content"] = "[redacted]" if hidden else result.item.content
            row["type"] = result.item.type.value
    elif isinstance(result, Conflict):
        row["reason"] = (
            f"expected version {result.expected_version}, current {result.current_version}"
        )
    elif isinstance(result, Rejected):
        row["reason"] = masker.redactor.text(result.reason)
    return row


def _sse(event: str, data: dict[str, Any], ident: int | str | None = None) -> dict[str, Any]:
    out = {"event": event, "data": json.dumps(data, ensure_ascii=False)}
    if ident is not None:
        out["id"] = str(ident)
    return out


async def change_events(
    client: MemoryClient, scope: str, masker: Masker, after: int | None
) -> AsyncIterator[dict[str, Any]]:
    """The scope's changes from now on (or after position ``after``: a reconnect). The
    feed's consumer is opened before this returns, so a refusal is an HTTP error."""
    feed = await client.watch(scope, since_position=after)

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            yield _sse("ready", {"scope": scope})
            while True:
                try:
                    event = await feed.next(timeout=_WAIT_S)
                except TimeoutError:
                    continue
                yield _sse("change", change_row(event, masker), event.position)
        finally:
            await feed.close()

    return events()


async def dead_letter_events(
    nc: NatsClient, redactor: Redactor, tenant: str, after: int | None
) -> AsyncIterator[dict[str, Any]]:
    """Dead letters of every tenant (or of ``tenant``) from now on: the operator's."""
    tail = await StreamTail(
        nc,
        naming.DEAD_LETTER_STREAM,
        dead_letter_filter(tenant),
        start_seq=after + 1 if after else None,
    ).open()

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            yield _sse("ready", {"tenant": tenant})
            while True:
                for msg in await tail.fetch(_WAIT_S):
                    row = dead_letter_row(msg, redactor)
                    yield _sse("dead", row, row["seq"])
        finally:
            await tail.close()

    return events()


async def audited_dead_letter_events(
    client: MemoryClient, after: int | None
) -> AsyncIterator[dict[str, Any]]:
    """A tenant's own dead letters, from its audit trail (an auditor's credential): the
    reason (redacted by the worker) and the subject, without the raw bytes."""
    subject = naming.audit_write_subject(client.tenant, "*")  # type: ignore[arg-type]
    try:
        tail = await StreamTail(
            client.nc, naming.AUDIT_STREAM, subject, start_seq=after + 1 if after else None
        ).open()
    except NatsTimeoutError:  # the server refused to create it: no answer comes
        raise PermissionError(
            "this credential may not read its tenant's audit trail, where "
            "its dead letters are recorded (issue one with --audit)"
        ) from None

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            yield _sse("ready", {"tenant": client.tenant})
            while True:
                for msg in await tail.fetch(_WAIT_S):
                    for entry in decode(msg.data, AuditBatch).entries:
                        if entry.kind == "dead_letter":
                            row = {
                                "tenant": entry.tenant,
                                "reason": entry.reason,
                                "subject": str(entry.detail.get("subject", "")),
                                "received_at": entry.at,
                                "command_seq": entry.seq,
                                "seq": msg.metadata.sequence.stream,
                            }
                            yield _sse("dead", row, row["seq"])
        finally:
            await tail.close()

    return events()
