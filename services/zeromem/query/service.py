"""``zeromem query``: answers get and list requests for every tenant (a NATS queue group,
so any number of replicas share the load)."""

from __future__ import annotations

import logging
import time

import msgspec
from faststream.nats import NatsBroker, NatsMessage, NatsResponse
from redis.asyncio import Redis

from zeromem import naming
from zeromem.query.reads import get_items, list_keys
from zeromem.recall.service import RecallService
from zeromem.recall.usage import read_usage
from zeromem.schemas import (
    ErrorReply,
    GetReply,
    GetRequest,
    ListRequest,
    StatsReply,
    StatsRequest,
    decode,
    encode,
)
from zeromem.telemetry import Telemetry

log = logging.getLogger(__name__)

ERROR_HEADER = "Zm-Error"


def error_response(code: str, message: str) -> NatsResponse:
    return NatsResponse(encode(ErrorReply(error=message, code=code)), headers={ERROR_HEADER: code})


def _tenant_of(subject: str) -> str:
    return subject.split(".")[2]


def register_query_handlers(broker: NatsBroker, redis: Redis) -> None:
    """Subscribe the get and list handlers on ``broker``."""

    @broker.subscriber(naming.query_subject_all("get"), queue=naming.QUERY_QUEUE_GROUP)
    async def handle_get(msg: NatsMessage) -> NatsResponse:
        try:
            request = decode(msg.body, GetRequest)
        except msgspec.DecodeError as exc:
            return error_response("bad_request", str(exc))
        if request.tenant != _tenant_of(msg.raw_message.subject):
            return error_response("bad_request", "tenant does not match the subject")
        (item,) = await get_items(redis, request.tenant, [request.key])
        return NatsResponse(encode(GetReply(found=item is not None, item=item)))

    @broker.subscriber(naming.query_subject_all("list"), queue=naming.QUERY_QUEUE_GROUP)
    async def handle_list(msg: NatsMessage) -> NatsResponse:
        try:
            request = decode(msg.body, ListRequest)
        except msgspec.DecodeError as exc:
            return error_response("bad_request", str(exc))
        if request.tenant != _tenant_of(msg.raw_message.subject):
            return error_response("bad_request", "tenant does not match the subject")
        reply = await list_keys(
            redis, request.tenant, request.prefix, request.cursor, request.limit,
            request.with_items,
        )  # fmt: skip
        return NatsResponse(encode(reply))


def register_stats_handler(
    broker: NatsBroker, redis: Redis, telemetry: Telemetry | None = None
) -> RecallService:
    """The stats query; returns the recall service whose usage ledger it reads (the recall
    subject itself is answered by ``recall.responder``, off FastStream, for latency)."""
    service = RecallService(redis, telemetry=telemetry)

    @broker.subscriber(naming.query_subject_all("stats"), queue=naming.QUERY_QUEUE_GROUP)
    async def handle_stats(msg: NatsMessage) -> NatsResponse:
        try:
            request = decode(msg.body, StatsRequest)
        except msgspec.DecodeError as exc:
            return error_response("bad_request", str(exc))
        until = request.until or time.time()
        await service.usage.flush()  # this replica's latest figures first
        rows = await read_usage(redis, request.tenant, request.since, until)
        return NatsResponse(encode(StatsReply(rows=tuple(rows))))

    return service
