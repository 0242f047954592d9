"""``zeromem query``: answers get and list requests for every tenant (a NATS queue group,
so any number of replicas share the load)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TypeVar

import msgspec
from faststream.nats import NatsBroker, NatsMessage, NatsResponse
from redis.asyncio import Redis

from zeromem import naming
from zeromem.lifecycle.reads import ReadRecorder
from zeromem.lifecycle.redact import Redactor, install_log_redaction
from zeromem.lifecycle.settings import LifecycleSettings
from zeromem.query.reads import get_items, list_keys
from zeromem.recall.service import RecallService
from zeromem.recall.usage import read_usage
from zeromem.schemas import (
    ErrorReply,
    GetReply,
    GetRequest,
    ListRequest,
    RecallReply,
    RecallRequest,
    StatsReply,
    StatsRequest,
    decode,
    encode,
)
from zeromem.settings import Settings
from zeromem.telemetry import Telemetry

log = logging.getLogger(__name__)
T = TypeVar("T")



def error_response(code: str, message: str) -> NatsResponse:
    return NatsResponse(
        encode(ErrorReply(error=message, code=code)), headers={naming.ERROR_HEADER: code}
    )


def _admit(msg: NatsMessage, type_: type[T]) -> T | NatsResponse:
    """The decoded request, or the error reply: bad bytes, or a tenant or reader in the
    payload that is not the subject's. The subject's are what the server let this caller
    use, so the reader recorded with the read is the subject's agent."""
    try:
        request = decode(msg.body, type_)
    except msgspec.DecodeError as exc:
        return error_response("bad_request", str(exc))
    checked = reader_from_subject(request, msg.raw_message.subject)  # type: ignore[attr-defined]
    if isinstance(checked, str):
        return error_response("bad_request", checked)
    return checked


def reader_from_subject(request: T, subject: str) -> T | str:
    """``request`` with its reader set from the query subject, or why it is refused (a
    tenant or a reader in the payload that the subject does not name)."""
    try:
        tenant, agent, _ = naming.parse_query_subject(subject)
    except ValueError as exc:
        return str(exc)
    if request.tenant != tenant:  # type: ignore[attr-defined]
        return "tenant does not match the subject"
    reader = request.reader  # type: ignore[attr-defined]
    if reader and reader != agent:
        return f"reader {reader!r} does not match the subject's agent {agent!r}"
    return request if reader else msgspec.structs.replace(request, reader=agent)  # type: ignore[type-var]


def broker_publisher(broker: NatsBroker):  # type: ignore[no-untyped-def]
    """A plain NATS publish on the broker's connection (FastStream's own publish adds
    headers and per-message work a side-effect record does not need)."""

    async def publish(subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        await broker.connection.publish(subject, data, headers=headers)  # type: ignore[union-attr]

    return publish


def register_query_handlers(broker: NatsBroker, redis: Redis, shards: int | None = None) -> None:
    """Subscribe the get and list handlers on ``broker``. ``shards`` (the deployment's
    shard count) is where a read sends the touch of a sliding expiry."""
    if shards is None:
        shards = Settings.from_env().shards
    lifecycle = LifecycleSettings.from_env()
    install_log_redaction(Redactor(lifecycle.sensitive_pattern))
    recorder = ReadRecorder(broker_publisher(broker), shards)

    @broker.subscriber(naming.query_subject_all("get"), queue=naming.QUERY_QUEUE_GROUP)
    async def handle_get(msg: NatsMessage) -> NatsResponse:
        request = _admit(msg, GetRequest)
        if isinstance(request, NatsResponse):
            return request
        (item,) = await get_items(redis, request.tenant, [request.key])
        await recorder.after_read(request.tenant, request.reader, "get", (request.key,), (item,))
        return NatsResponse(encode(GetReply(found=item is not None, item=item)))

    @broker.subscriber(naming.query_subject_all("list"), queue=naming.QUERY_QUEUE_GROUP)
    async def handle_list(msg: NatsMessage) -> NatsResponse:
        request = _admit(msg, ListRequest)
        if isinstance(request, NatsResponse):
            return request
        reply = await list_keys(
            redis, request.tenant, request.prefix, request.cursor, request.limit,
            request.with_items,
        )  # fmt: skip
        await recorder.after_read(request.tenant, request.reader, "list", reply.keys, reply.items,
                                  {"prefix": request.prefix})  # fmt: skip
        return NatsResponse(encode(reply))


def register_stats_handler(
    broker: NatsBroker, redis: Redis, telemetry: Telemetry | None = None
) -> RecallService:
    """The stats query; returns the recall service whose usage ledger it reads (the recall
    subject itself is answered by ``recall.responder``, off FastStream, for latency)."""
    service = RecallService(redis, telemetry=telemetry)
    shards = Settings.from_env().shards  # recall never slides an expiry: not used
    recorder = ReadRecorder(broker_publisher(broker), shards)
    pending: set[asyncio.Task[None]] = set()

    def on_read(request: RecallRequest, reply: RecallReply) -> None:
        # After the reply is built, off the recall's path: the audit record of the read.
        task = asyncio.get_running_loop().create_task(recorder.after_read(
            request.tenant, request.reader, "recall", (m.key for m in reply.memories),
            detail={"query_terms": len(request.query.split())}))  # fmt: skip
        pending.add(task)
        task.add_done_callback(pending.discard)

    service.on_read = on_read

    @broker.subscriber(naming.query_subject_all("stats"), queue=naming.QUERY_QUEUE_GROUP)
    async def handle_stats(msg: NatsMessage) -> NatsResponse:
        request = _admit(msg, StatsRequest)
        if isinstance(request, NatsResponse):
            return request
        until = request.until or time.time()
        await service.usage.flush()  # this replica's latest figures first
        rows = await read_usage(redis, request.tenant, request.since, until)
        return NatsResponse(encode(StatsReply(rows=tuple(rows))))

    return service
