"""The services (workers for every shard, and the read services) inside the calling
process, against real servers: for the tests, the demo, the examples and the benchmarks
that need to look inside (an in-memory metric reader, a worker's counters)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from zeromem.bus import READ_COMMAND_TIMEOUT_S, connect_nats, connect_redis
from zeromem.settings import Settings
from zeromem.telemetry import Telemetry


@dataclass
class InProcessServices:
    settings: Settings
    workers: list[Any] = field(default_factory=list)
    readers: list[Any] = field(default_factory=list)
    closers: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        settings: Settings,
        *,
        worker_cls: Any = None,
        telemetry: Telemetry | None = None,
        authority: Any = None,
    ) -> InProcessServices:
        """The workers and read services on ``settings``' servers; with ``authority``,
        each under its own service identity (NATS credential and Redis user)."""
        from zeromem.embedded.stack import settings_for_role
        from zeromem.serve import ReadServices
        from zeromem.worker.service import WorkerService

        if authority is None and settings.auth_dir:
            from zeromem.auth.authority import Authority

            authority = Authority.load(settings.authority_dir)
        services = cls(settings)
        reader_settings = settings_for_role(settings, authority, "reader")
        settings = settings_for_role(settings, authority, "worker")
        nc = await connect_nats(settings, name="zeromem-worker")
        redis = connect_redis(settings)
        services.closers += [nc.close, redis.aclose]
        worker_type = worker_cls or WorkerService
        extra: dict[str, Any] = (
            {"telemetry": telemetry}
            if telemetry is not None and _accepts_telemetry(worker_type)
            else {}
        )
        worker = await worker_type(
            settings, list(range(settings.shards)), nc=nc, redis=redis, **extra
        ).start()
        # 30 s: taking eight leases took over 10 s once with five test suites on two cores
        await worker.wait_owned(timeout=30.0)
        services.workers.append(worker)

        read_redis = connect_redis(reader_settings, READ_COMMAND_TIMEOUT_S)
        services.closers.append(read_redis.aclose)
        services.readers.append(await ReadServices.start(reader_settings, read_redis, telemetry))
        return services

    async def stop(self) -> None:
        for worker in self.workers:
            await worker.stop()
        for reader in self.readers:
            await reader.stop()
        for close in reversed(self.closers):
            await close()


def _accepts_telemetry(worker_type: Any) -> bool:
    import inspect

    return "telemetry" in inspect.signature(worker_type.__init__).parameters
