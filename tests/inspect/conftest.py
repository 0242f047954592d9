"""An inspector served over real HTTP (uvicorn, a free port) in front of the session's real
servers and services, with bearer tokens for two tenants' agents and for the operator."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from zeromem.auth.authority import Authority
from zeromem.auth.mcp_tokens import McpTokens
from zeromem.embedded.servers import free_port
from zeromem.embedded.stack import settings_for_role
from zeromem.inspect import InspectSettings, create_app
from zeromem.inspect.access import Access
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings

PAGE_SIZE = 3  # small, so that every list is paged in the tests


@dataclass
class Inspector:
    base: str
    settings: Settings  # the operator's (admin) view of the servers
    a: str  # two tenants
    b: str
    tokens: dict[str, str]  # who -> token: a (auditor), a_plain (no audit), b, operator
    http: httpx.AsyncClient
    app: Any
    clients: list[MemoryClient] = field(default_factory=list)

    def headers(self, who: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.tokens[who]}"} if who else {}

    async def get(self, path: str, who: str = "a", **kwargs: Any) -> httpx.Response:
        return await self.http.get(self.base + path, headers=self.headers(who), **kwargs)

    async def api(self, path: str, who: str = "a", **kwargs: Any) -> Any:
        response = await self.get("/api" + path, who, **kwargs)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    async def agent(self, tenant: str, agent: str = "writer") -> MemoryClient:
        client = await MemoryClient.connect(
            self.settings.bus.nats_url, tenant=tenant, agent=agent, shards=self.settings.shards
        )
        self.clients.append(client)
        return client


async def serve(app: Any) -> tuple[str, uvicorn.Server, asyncio.Task[None]]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.02)
    assert server.started, "the inspector did not start"
    return f"http://127.0.0.1:{port}", server, task


@pytest.fixture
async def inspector(
    running: Settings, authority: Authority, tmp_path: Path
) -> AsyncIterator[Inspector]:
    a, b = (f"t{uuid.uuid4().hex[:12]}" for _ in range(2))
    tokens_file = McpTokens(tmp_path / "inspect-tokens.json")
    tokens = {}
    for who, tenant, agent, audit in (
        ("a", a, "viewer", True),
        ("a_plain", a, "glance", False),
        ("b", b, "viewer", True),
    ):
        creds = authority.issue_agent(tenant, agent, audit=audit, record=False).write(
            tmp_path / f"{who}.creds"
        )
        tokens[who] = tokens_file.add(tenant, agent, creds)
    tokens["operator"] = tokens_file.add("", "", authority.service_creds_path("admin"))
    # The inspector's own settings: the servers, and Redis as the read services' user.
    app_settings = settings_for_role(running, authority, "reader")
    app = create_app(
        app_settings,
        InspectSettings(page_size=PAGE_SIZE, request_timeout_s=3.0),
        Access(tokens_file.path),
    )
    base, server, task = await serve(app)
    async with httpx.AsyncClient(timeout=15, follow_redirects=False) as http:
        page = Inspector(base, running, a, b, tokens, http, app)
        try:
            yield page
        finally:
            for client in page.clients:
                await client.close()
            server.should_exit = True
            await task
