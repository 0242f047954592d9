"""``zeromem serve``: the read services (get, list, stats, recall) in one process."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

from zeromem.bus import (
    READ_COMMAND_TIMEOUT_S,
    connect_nats,
    connect_redis,
    connection_events,
    nats_connect_options,
)
from zeromem.health import Health
from zeromem.heap import settle_after_start
from zeromem.lifecycle import vault
from zeromem.query.dump import read_service_state
from zeromem.query.gate import TenantGate
from zeromem.query.recall_responder import RecallResponder
from zeromem.query.service import register_query_handlers, register_stats_handler
from zeromem.recall.service import RecallService
from zeromem.settings import Settings
from zeromem.telemetry import Telemetry, TelemetryConfig, configure_telemetry

log = logging.getLogger(__name__)


@dataclass
class ReadServices:
    broker: NatsBroker  # get, list, stats (FastStream)
    nc: NatsClient  # recall (a plain subscription, see query.recall_responder)
    responder: RecallResponder
    recall: RecallService
    gate: TenantGate

    @classmethod
    async def start(
        cls, settings: Settings, redis: Redis, telemetry: Telemetry | None = None
    ) -> ReadServices:
        # logger=None: FastStream's per-message log line costs more than a read itself.
        broker = NatsBroker(
            settings.nats_servers,
            logger=None,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,  # as every other service connection (bus.connect_nats)
            **connection_events("zeromem-read"),
            **nats_connect_options(settings),
        )
        gate = TenantGate(settings.limits)  # every read of this process takes turns here
        # Reads through ``redis`` open memories encrypted at rest with this process's keys.
        vault.attach(redis, vault.vault_of(settings, redis))
        register_query_handlers(broker, redis, shards=settings.shards, gate=gate)
        recall = register_stats_handler(broker, redis, telemetry, gate=gate)
        await broker.start()
        nc = await connect_nats(settings, name="zeromem-recall")
        responder = await RecallResponder(nc, recall, gate).start()
        return cls(broker, nc, responder, recall, gate)

    def state(self) -> str:
        """The gate, connections, subscriptions and task stacks (``query.dump``)."""
        return read_service_state(
            self.gate,
            {"zeromem-read": self.broker.connection, "zeromem-recall": self.nc},
            list(self.broker.subscribers),
            len(self.responder._tasks),
        )

    def connected(self) -> bool:
        broker_nc = self.broker.connection  # get, list and stats (FastStream's client)
        return self.nc.is_connected and broker_nc is not None and broker_nc.is_connected

    async def stop(self) -> None:
        await self.responder.stop()
        await self.recall.usage.stop()
        await self.broker.stop()
        await self.nc.drain()


async def run_read_services(settings: Settings) -> None:
    redis = connect_redis(settings, READ_COMMAND_TIMEOUT_S)
    health = Health(settings.liveness_stall_s)
    telemetry = configure_telemetry(
        TelemetryConfig("serve", settings.metrics_port, settings.metrics_host), health
    )
    services = await ReadServices.start(settings, redis, telemetry)
    # Ready: both connections up, so the queue-group subscriptions receive requests.
    health.ready_when("nats_connected", services.connected)
    health.started()
    settle_after_start()
    # kill -USR1 <pid>: the state of every read in flight, to the log (query.dump).
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, lambda: log.warning("state:\n%s", services.state()))
    try:
        await asyncio.Event().wait()
    finally:
        await services.stop()
        await redis.aclose()
