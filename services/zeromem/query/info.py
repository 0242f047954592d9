"""The ``info`` query: what a client in any language needs before its first command.

A command's subject carries its shard, crc32(tenant NUL owner) mod the shard count, and a
command published to the wrong shard is dead-lettered (``wrong_shard``): a client must
not guess the count. The read services answer with the deployment's settings (the same
environment configures the workers), through the same admission and tenant turns as any
read, on ``zm.q.<tenant>.<agent>.info``, which every agent's permissions already allow.
"""

from __future__ import annotations

from zeromem.query.responder import Answer, Responder
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


def register_info_handler(responder: Responder, settings: Settings, shards: int) -> None:
    async def info(request: InfoRequest) -> Answer:
        return Answer(encode(contract_info(settings, shards, responder.nc.max_payload)))

    responder.route("info", InfoRequest, info)
