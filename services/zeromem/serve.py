"""``zeromem serve``: the read services (get, list, recall) in one process."""

from __future__ import annotations

from faststream import FastStream
from faststream.nats import NatsBroker
from redis.asyncio import Redis

from zeromem.bus import connect_redis
from zeromem.query.service import register_query_handlers, register_recall_handler
from zeromem.settings import Settings
from zeromem.telemetry import Telemetry, TelemetryConfig, configure_telemetry


def build_read_broker(
    settings: Settings, redis: Redis, telemetry: Telemetry | None = None
) -> NatsBroker:
    # logger=None: FastStream's per-message log line costs more than a read itself.
    broker = NatsBroker(settings.nats_url, logger=None, max_reconnect_attempts=-1)
    register_query_handlers(broker, redis)
    recall = register_recall_handler(broker, redis, telemetry)
    broker.zeromem_recall = recall  # type: ignore[attr-defined]  # for a clean shutdown
    return broker


async def run_read_services(settings: Settings) -> None:
    redis = connect_redis(settings)
    telemetry = configure_telemetry(TelemetryConfig("serve", settings.metrics_port))
    broker = build_read_broker(settings, redis, telemetry)
    app = FastStream(broker, logger=None)
    try:
        await app.run()
    finally:
        await broker.zeromem_recall.usage.stop()  # type: ignore[attr-defined]
        await redis.aclose()
