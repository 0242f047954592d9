"""The ``info`` query: what a client in any language needs before its first command.

A command's subject carries its shard, crc32(tenant NUL owner) mod the shard count, and a
command published to the wrong shard is dead-lettered (``wrong_shard``): a client must
not guess the count. The read services answer with the deployment's settings (the same
environment configures the workers), through the same admission and tenant turns as any
read, on ``zm.q.<tenant>.<agent>.info``, which every agent's permissions already allow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from faststream.nats import NatsBroker, NatsMessage, NatsResponse

from zeromem import naming
from zeromem.schemas import WIRE_VERSION, InfoReply, InfoRequest, encode
from zeromem.settings import Settings


def contract_info(settings: Settings, shards: int, max_payload: int) -> InfoReply:
    return InfoReply(
        version=WIRE_VERSION,
        shards=shards,
        dedupe_window_s=settings.bus.dedupe_window_s,
        batch_commands=settings.limits.batch_commands,
        value_bytes=settings.limits.value_bytes,
        max_clock_skew_s=settings.worker.max_clock_skew_s,
        max_payload=max_payload,
    )


def register_info_handler(
    broker: NatsBroker,
    settings: Settings,
    shards: int,
    served: Callable[[NatsMessage, type[Any], Callable[[Any], Awaitable[NatsResponse]]], Any],
    handlers: int,
) -> None:
    async def info(request: InfoRequest) -> NatsResponse:
        max_payload = broker.connection.max_payload if broker.connection else 0
        return NatsResponse(encode(contract_info(settings, shards, max_payload)))

    @broker.subscriber(
        naming.query_subject_all("info"), queue=naming.QUERY_QUEUE_GROUP, max_workers=handlers
    )
    async def handle_info(msg: NatsMessage) -> NatsResponse:
        return await served(msg, InfoRequest, info)  # type: ignore[no-any-return]
