"""The connections the page reads through: one NATS connection per viewer credential.

A tenant's viewer gets a ``MemoryClient`` connected with its own creds file, exactly as an
agent connects: its reads are requests on ``zm.q.<tenant>.<agent>.*``, its live feed a
consumer whose filter the server holds to its tenant. Nothing here filters another
tenant's data out in Python; there is no connection that could see it. The operator's
reads go through the admin credential; the operator views also read Redis (lease holders,
the tenants seen), with the read-only user of the read services.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import Any

from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

from zeromem.bus import connect_nats, connect_redis
from zeromem.inspect.access import OPERATOR_AGENT, Viewer
from zeromem.sdk.client import MemoryClient
from zeromem.settings import InspectSettings, Settings


class Connections:
    def __init__(self, settings: Settings, inspect: InspectSettings) -> None:
        self.settings = settings
        self.inspect = inspect
        self._clients: OrderedDict[tuple[str, str, str], MemoryClient] = OrderedDict()
        self._admin: NatsClient | None = None
        self._operator_clients: dict[str, MemoryClient] = {}
        self._redis: Redis | None = None
        self._lock = asyncio.Lock()

    async def client(self, viewer: Viewer, tenant: str) -> MemoryClient:
        """A client reading ``tenant`` with ``viewer``'s credential."""
        viewer.check(tenant)
        if viewer.operator:
            nc = await self.admin(viewer)
            if tenant not in self._operator_clients:
                self._operator_clients[tenant] = MemoryClient(
                    nc,
                    tenant=tenant,
                    agent=OPERATOR_AGENT,
                    shards=self.settings.shards,
                    timeout=self.inspect.request_timeout_s,
                )
            return self._operator_clients[tenant]
        key = (viewer.creds, viewer.tenant, viewer.agent)
        async with self._lock:
            client = self._clients.get(key)
            if client is not None and not client.nc.is_closed:
                self._clients.move_to_end(key)
                return client
            client = await MemoryClient.connect(
                self.settings.bus.nats_url,
                tenant=viewer.tenant,
                agent=viewer.agent,
                creds=viewer.creds,
                shards=self.settings.shards,
                timeout=self.inspect.request_timeout_s,
                settings=self.settings,
            )
            self._clients[key] = client
            while len(self._clients) > self.inspect.max_connections:
                # A live stream on an evicted connection ends; the browser's EventSource
                # reconnects and resumes after the last event it saw.
                _, oldest = self._clients.popitem(last=False)
                with contextlib.suppress(Exception):
                    await oldest.nc.close()
            return client

    async def admin(self, viewer: Viewer) -> NatsClient:
        """The operator's connection (admin credential)."""
        viewer.check_operator()
        async with self._lock:
            if self._admin is None or self._admin.is_closed:
                as_admin = self.settings.with_(bus={"nats_creds": viewer.creds, "nats_token": ""})
                self._admin = await connect_nats(as_admin, name="zeromem-inspect")
                self._operator_clients = {}
            return self._admin

    def redis(self, viewer: Viewer) -> Redis | None:
        """Redis for the operator views (None when this process was given none)."""
        viewer.check_operator()
        if self._redis is None and self.settings.store.redis_url:
            self._redis = connect_redis(self.settings)
        return self._redis

    async def close(self) -> None:
        clients: list[Any] = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            with contextlib.suppress(Exception):
                await client.nc.close()
        if self._admin is not None:
            with contextlib.suppress(Exception):
                await self._admin.close()
        if self._redis is not None:
            await self._redis.aclose()
