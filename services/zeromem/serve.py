"""``zeromem serve``: the read services (get, list, stats, recall) in one process."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

from zeromem.bus import READ_COMMAND_TIMEOUT_S, connect_nats, connect_redis
from zeromem.health import Health
from zeromem.heap import settle_after_start
from zeromem.lifecycle import vault
from zeromem.query.dump import read_service_state
from zeromem.query.gate import TenantGate
from zeromem.query.responder import Responder
from zeromem.query.service import register_query_handlers, register_recall_and_stats
from zeromem.recall.expansion import shared_expander
from zeromem.recall.service import RecallService
from zeromem.settings import Settings
from zeromem.stall import StallWatch
from zeromem.telemetry import Telemetry, configure_telemetry

log = logging.getLogger(__name__)


CONNECTION_NAME = "zeromem-read"


@dataclass
class ReadServices:
    nc: NatsClient
    responder: Responder  # every read kind (query.responder says why one, and not FastStream)
    recall: RecallService
    gate: TenantGate

    @classmethod
    async def start(
        cls, settings: Settings, redis: Redis, telemetry: Telemetry | None = None
    ) -> ReadServices:
        telemetry = telemetry or Telemetry()
        gate = TenantGate(settings.limits)  # every read of this process takes turns here
        # Reads through ``redis`` open memories encrypted at rest with this process's keys.
        vault.attach(redis, vault.vault_of(settings, redis))
        nc = await connect_nats(settings, name=CONNECTION_NAME)
        responder = Responder(nc, gate, telemetry.tracer)
        register_query_handlers(responder, redis, settings)
        recall = register_recall_and_stats(responder, redis, settings, telemetry)
        if recall.config.expansion_weight > 0.0:
            # Load query expansion's model (about a second) before the first recall, off
            # the event loop.
            recall.expander = await asyncio.to_thread(shared_expander)
        await responder.start()
        return cls(nc, responder, recall, gate)

    def state(self) -> str:
        """The gate, the connection, the subscriptions and task stacks (``query.dump``)."""
        return read_service_state(self.responder, CONNECTION_NAME)

    def connected(self) -> bool:
        return self.nc.is_connected

    async def stop(self) -> None:
        await self.responder.stop()  # no more requests; those in hand are answered
        if self.recall.audit is not None:
            await self.recall.audit.flush()  # the audit records still waiting for a batch
        await self.recall.usage.stop()
        await self.nc.drain()


async def run_read_services(settings: Settings) -> None:
    redis = connect_redis(settings, READ_COMMAND_TIMEOUT_S)
    health = Health(settings.telemetry.liveness_stall_s)
    telemetry = configure_telemetry("serve", settings.telemetry, health)
    services = await ReadServices.start(settings, redis, telemetry)
    # Watched once started: starting (imports, first connections) is not a stall.
    stalls = StallWatch(settings.telemetry.loop_stall_log_s).start()
    # Ready: the connection up, so the queue-group subscriptions receive requests.
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
        await telemetry.shutdown()
        stalls.stop()
