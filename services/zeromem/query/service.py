"""``zeromem query``: answers get and list requests for every tenant (a NATS queue group,
so any number of replicas share the load).

Every request is admitted first (``query.admission``: a refusal is a ``bad_request``
naming the limit) and then waits for its tenant's turn (``query.gate``). The handlers run
concurrently (FastStream's ``max_workers``), so a request waiting for its turn never holds
up another tenant's behind it in the subscription.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from faststream.nats import NatsBroker, NatsMessage, NatsResponse
from redis.asyncio import Redis

from zeromem import naming
from zeromem.lifecycle.reads import ReadRecorder
from zeromem.lifecycle.redact import Redactor, install_log_redaction
from zeromem.lifecycle.settings import LifecycleSettings
from zeromem.limits import Limits, refusal
from zeromem.logs import BoundedLog
from zeromem.query.admission import (
    Refused,
    admit_request,
    error_response,
    reader_from_subject,  # noqa: F401 - part of this module's API (tests import it here)
    stats_window,
    tenant_of_query_subject,
)
from zeromem.query.browse import register_browse_handlers
from zeromem.query.gate import TenantGate
from zeromem.query.info import register_info_handler
from zeromem.query.reads import get_items, list_keys
from zeromem.recall.service import RecallService
from zeromem.schemas import (
    GetReply,
    GetRequest,
    ListRequest,
    RecallReply,
    RecallRequest,
    StatsReply,
    StatsRequest,
    encode,
)
from zeromem.settings import Settings
from zeromem.store.usage import TooManyRows, read_usage
from zeromem.telemetry import Telemetry

log = logging.getLogger(__name__)
_log = BoundedLog(log, Limits().log_interval_s)
T = TypeVar("T")


def handlers(limits: Limits) -> int:
    """Handlers running at once per subscription: every request the gate lets wait or run
    (``reads_queued`` + ``reads_in_flight``), whoever's. FastStream's concurrent subscriber
    takes a worker for a message before it hands it over, in the subscription's one
    callback: with a fixed 2048 (enough for one tenant's ``tenant_in_flight`` +
    ``tenant_queued``, not for the 4096 the gate lets wait), a few flooding tenants took
    every worker and every other tenant's request on that subject waited unanswered
    behind them."""
    return limits.reads_queued + limits.reads_in_flight


async def _served(
    msg: NatsMessage,
    type_: type[T],
    gate: TenantGate,
    answer: Callable[[T], Awaitable[NatsResponse]],
) -> NatsResponse:
    """Admit the request, wait for its tenant's turn, answer it."""
    subject = msg.raw_message.subject
    tenant = tenant_of_query_subject(subject)
    refused = gate.admit(tenant)
    if refused is not None:
        return error_response(*refused)
    try:
        request = admit_request(subject, msg.body, type_, gate.limits)
    except Refused as exc:
        return error_response("bad_request", str(exc))
    async with gate.slot(tenant):
        try:
            return await answer(request)
        except Exception as exc:  # every request gets an answer, even a bug's
            _log.error(
                ("read", type_.__name__, type(exc)), "%s failed", type_.__name__, exc_info=exc
            )
            return error_response("internal", f"{type_.__name__} failed; see the service log")


def broker_publisher(broker: NatsBroker):  # type: ignore[no-untyped-def]
    """A plain NATS publish on the broker's connection (FastStream's own publish adds
    headers and per-message work a side-effect record does not need)."""

    async def publish(subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        await broker.connection.publish(subject, data, headers=headers)

    return publish


def register_query_handlers(
    broker: NatsBroker, redis: Redis, shards: int | None = None, gate: TenantGate | None = None
) -> None:
    """Subscribe the get and list handlers on ``broker``. ``shards`` (the deployment's
    shard count) is where a read sends the touch of a sliding expiry; ``gate``, the turns
    between tenants this service's requests take (shared with the other handlers)."""
    settings = Settings.from_env()
    if shards is None:
        shards = settings.shards
    gate = gate or TenantGate(settings.limits)
    workers = handlers(gate.limits)
    lifecycle = LifecycleSettings.from_env()
    install_log_redaction(Redactor(lifecycle.sensitive_pattern))
    recorder = ReadRecorder(broker_publisher(broker), shards)

    async def get(request: GetRequest) -> NatsResponse:
        (item,) = await get_items(redis, request.tenant, [request.key])
        slid = (item,) if request.slide else ()  # an inspector's look slides nothing
        await recorder.after_read(request.tenant, request.reader, "get", (request.key,), slid)
        return NatsResponse(encode(GetReply(found=item is not None, item=item)))

    async def list_(request: ListRequest) -> NatsResponse:
        reply = await list_keys(
            redis,
            request.tenant,
            request.prefix,
            request.cursor,
            request.limit,
            request.with_items,
        )
        await recorder.after_read(
            request.tenant,
            request.reader,
            "list",
            reply.keys,
            reply.items if request.slide else (),
            {"prefix": request.prefix},
        )
        return NatsResponse(encode(reply))

    @broker.subscriber(
        naming.query_subject_all("get"), queue=naming.QUERY_QUEUE_GROUP, max_workers=workers
    )
    async def handle_get(msg: NatsMessage) -> NatsResponse:
        return await _served(msg, GetRequest, gate, get)

    @broker.subscriber(
        naming.query_subject_all("list"), queue=naming.QUERY_QUEUE_GROUP, max_workers=workers
    )
    async def handle_list(msg: NatsMessage) -> NatsResponse:
        return await _served(msg, ListRequest, gate, list_)

    def served(msg: NatsMessage, type_: type[T], answer: Callable[[T], Awaitable[NatsResponse]]):  # type: ignore[no-untyped-def]
        return _served(msg, type_, gate, answer)

    register_browse_handlers(broker, redis, recorder, served, workers)
    register_info_handler(broker, settings, shards, served, workers)


def register_stats_handler(
    broker: NatsBroker,
    redis: Redis,
    telemetry: Telemetry | None = None,
    gate: TenantGate | None = None,
) -> RecallService:
    """The stats query; returns the recall service whose usage ledger it reads (the recall
    subject itself is answered by ``query.recall_responder``, off FastStream, for latency)."""
    settings = Settings.from_env()
    limits = gate.limits if gate is not None else settings.limits
    gate = gate or TenantGate(limits)
    service = RecallService(redis, telemetry=telemetry, limits=limits)
    shards = settings.shards  # recall never slides an expiry: not used
    recorder = ReadRecorder(broker_publisher(broker), shards)
    pending: set[asyncio.Task[None]] = set()

    def on_read(request: RecallRequest, reply: RecallReply) -> None:
        # After the reply is built, off the recall's path: the audit record of the read.
        task = asyncio.get_running_loop().create_task(
            recorder.after_read(
                request.tenant,
                request.reader,
                "recall",
                (m.key for m in reply.memories),
                detail={"query_terms": len(request.query.split())},
            )
        )
        pending.add(task)
        task.add_done_callback(pending.discard)

    service.on_read = on_read

    async def stats(request: StatsRequest) -> NatsResponse:
        try:
            since, until = stats_window(request, limits)
        except Refused as exc:
            return error_response("bad_request", str(exc))
        await service.usage.flush()  # this replica's latest figures first
        try:
            rows = await read_usage(redis, request.tenant, since, until, max_rows=limits.stats_rows)
        except TooManyRows:
            return error_response(
                "bad_request",
                refusal(
                    "stats_rows", f"the range holds more than {limits.stats_rows} rows: narrow it"
                ),
            )
        return NatsResponse(encode(StatsReply(rows=tuple(rows))))

    @broker.subscriber(
        naming.query_subject_all("stats"),
        queue=naming.QUERY_QUEUE_GROUP,
        max_workers=handlers(limits),
    )
    async def handle_stats(msg: NatsMessage) -> NatsResponse:
        return await _served(msg, StatsRequest, gate, stats)

    return service
