"""What the read services answer, kind by kind: get and list (here), owners and archived
(``query.browse``), info (``query.info``), stats and recall (here), each a route of the
one ``query.responder`` (admission, the tenant's turn, tracing and error replies are
its)."""

from __future__ import annotations

import time
from dataclasses import replace

from nats.aio.client import Client as NatsClient
from opentelemetry import trace
from redis.asyncio import Redis

from zeromem import naming
from zeromem.lifecycle.reads import Publish, ReadRecorder
from zeromem.lifecycle.redact import Redactor, install_log_redaction
from zeromem.limits import Limits, refusal
from zeromem.query.admission import (
    Refused,
    reader_from_subject,  # noqa: F401 - part of this module's API (tests import it here)
    stats_window,
)
from zeromem.query.audit_batch import ReadAuditBatcher
from zeromem.query.browse import register_browse_handlers
from zeromem.query.consistency import wait_applied
from zeromem.query.info import register_info_handler
from zeromem.query.reads import get_items, list_keys
from zeromem.query.responder import Answer, Responder
from zeromem.recall.service import RecallError, RecallService
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


def nats_publisher(nc: NatsClient) -> Publish:
    """A plain publish on the responder's connection: a read's side-effect record."""

    async def publish(subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        await nc.publish(subject, data, headers=headers)

    return publish


async def _see_writes(
    redis: Redis, after: tuple[tuple[int, int], ...], limits: Limits, shards: int, tenant: str
) -> None:
    """Read your writes (``query.consistency``): the positions the request names applied
    first, within ``Limits.read_after_wait_s``; a wait that ran out is marked on the span."""
    if after and not await wait_applied(redis, after, limits.read_after_wait_s, shards, tenant):
        trace.get_current_span().set_attribute("zeromem.read_after.waited_out", True)


def register_query_handlers(responder: Responder, redis: Redis, settings: Settings) -> None:
    """Route get, list, owners, archived and info on ``responder``. ``settings.shards`` (the
    deployment's shard count) is where a read sends the touch of a sliding expiry."""
    shards = settings.shards
    limits = responder.gate.limits
    install_log_redaction(Redactor(settings.lifecycle.sensitive_pattern))
    recorder = ReadRecorder(nats_publisher(responder.nc), shards)

    async def get(request: GetRequest) -> Answer:
        await _see_writes(redis, request.after, limits, shards, request.tenant)
        (item,) = await get_items(redis, request.tenant, [request.key])
        slid = (item,) if request.slide else ()  # an inspector's look slides nothing
        await recorder.after_read(request.tenant, request.reader, "get", (request.key,), slid)
        return Answer(encode(GetReply(found=item is not None, item=item)))

    async def list_(request: ListRequest) -> Answer:
        await _see_writes(redis, request.after, limits, shards, request.tenant)
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
        return Answer(encode(reply))

    responder.route("get", GetRequest, get)
    responder.route("list", ListRequest, list_)
    register_browse_handlers(responder, redis, recorder)
    register_info_handler(responder, settings, shards)


def register_recall_and_stats(
    responder: Responder, redis: Redis, settings: Settings, telemetry: Telemetry | None = None
) -> RecallService:
    """Route recall and stats (the usage ledger recall writes) on ``responder``; returns
    the recall service."""
    limits = responder.gate.limits
    service = RecallService(redis, telemetry=telemetry, limits=limits)
    service.shared = responder.gate.shared
    if not settings.recall_expansion:
        service.config = replace(service.config, expansion_weight=0.0)
    # Recall slides no expiry: its side effect is the audit record alone, sent in batches.
    audit = ReadAuditBatcher(nats_publisher(responder.nc), "recall")
    service.audit = audit

    def on_read(request: RecallRequest, reply: RecallReply) -> None:
        # After the reply is sent, off the recall's path: the audit record of the read.
        audit.record(
            request.tenant,
            request.reader,
            (m.key for m in reply.memories),
            {"query_terms": len(request.query.split())},
        )

    service.on_read = on_read

    async def recall(request: RecallRequest) -> Answer:
        started = time.perf_counter()
        await _see_writes(redis, request.after, limits, settings.shards, request.tenant)
        try:
            reply = await service.answer(request)
        except RecallError as exc:
            raise Refused(str(exc)) from exc
        elapsed = time.perf_counter() - started
        trace.get_current_span().set_attribute("zeromem.recall.tokens", reply.tokens)
        # The metrics, the usage ledger and the audit record, once the reply is sent.
        return Answer(encode(reply), lambda: service.answered(request, reply, elapsed))

    async def stats(request: StatsRequest) -> Answer:
        since, until = stats_window(request, limits)
        await service.usage.flush()  # this replica's latest figures first
        try:
            rows = await read_usage(redis, request.tenant, since, until, max_rows=limits.stats_rows)
        except TooManyRows:
            raise Refused(
                refusal(
                    "stats_rows", f"the range holds more than {limits.stats_rows} rows: narrow it"
                )
            ) from None
        return Answer(encode(StatsReply(rows=tuple(rows))))

    responder.route("recall", RecallRequest, recall, queue=naming.RECALL_QUEUE_GROUP)
    responder.route("stats", StatsRequest, stats)
    return service
