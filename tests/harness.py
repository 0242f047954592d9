"""Running the services inside the test process, against the real servers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from faststream.nats import NatsBroker

from zeromem.bus import connect_nats, connect_redis
from zeromem.settings import Settings


@dataclass
class ServiceSet:
    settings: Settings
    workers: list[Any] = field(default_factory=list)
    brokers: list[NatsBroker] = field(default_factory=list)
    closers: list[Any] = field(default_factory=list)

    @classmethod
    async def start(
        cls, settings: Settings, *, worker_cls: Any = None, telemetry: Any = None
    ) -> ServiceSet:
        from zeromem.serve import build_read_broker
        from zeromem.worker.service import WorkerService

        services = cls(settings)
        nc = await connect_nats(settings, name="test-worker")
        redis = connect_redis(settings)
        services.closers += [nc.close, redis.aclose]
        worker = await (worker_cls or WorkerService)(
            settings, list(range(settings.shards)), nc=nc, redis=redis
        ).start()
        await worker.wait_owned()
        services.workers.append(worker)

        read_redis = connect_redis(settings)
        services.closers.append(read_redis.aclose)
        broker = build_read_broker(settings, read_redis, telemetry)
        await broker.start()
        services.brokers.append(broker)
        return services

    async def stop(self) -> None:
        for worker in self.workers:
            await worker.stop()
        for broker in self.brokers:
            await broker.stop()
        for close in reversed(self.closers):
            await close()
