"""``zeromem mcp``: the memory tools over the Model Context Protocol (official ``mcp`` SDK).

The MCP tools are exactly the function-calling tools of :mod:`zeromem.tools` (same names,
same JSON Schemas, same compact JSON answers from the same dispatcher), so an agent sees
one memory interface whether it reaches it by function calling or by MCP.

Transports: ``stdio`` (a client spawns this process) and ``http`` (streamable HTTP at
``http://HOST:PORT/mcp``). The connection to NATS is opened on the first tool call, on the
server's own event loop, and closed when the server stops.

Over stdio the server acts as one agent, with the credential of its environment
(``ZEROMEM_CREDS``...). Over HTTP anyone who reaches the port could call it, so every
request must carry ``Authorization: Bearer <token>`` with a token from ``zeromem auth
mcp-token`` (``zeromem.auth.mcp_tokens``): the token names the tenant and agent the call
acts as, and their own NATS credential is used. No token file, no HTTP server.

Run stand-alone (until the CLI wires ``zeromem mcp``)::

    python -m zeromem.mcp_server --transport stdio --tenant acme --agent claude
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

from zeromem.extras import require

require("mcp", "mcp", "the MCP server (zeromem mcp)")
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from zeromem.auth.mcp_tokens import McpTokens, TokenIdentity
from zeromem.sdk.client import MemoryClient, Wait
from zeromem.settings import Settings, SettingsError
from zeromem.tools import ToolDispatcher, tool_definitions

log = logging.getLogger(__name__)

SERVER_NAME = "zeromem"
INSTRUCTIONS = (
    "Memory shared by agents. Keys are namespace:owner:name (user:u10086:pref_lang). "
    "memory_recall before answering about a user or task; memory_write what is worth keeping."
)


class MemoryToolServer:
    """The MCP server and the lazily connected client its tools run on (one per agent
    identity: over HTTP, one per bearer token's agent)."""

    def __init__(
        self,
        settings: Settings,
        *,
        tenant: str | None,
        agent: str | None,
        wait: Wait | str = Wait.APPLIED,
        tokens: McpTokens | None = None,
    ) -> None:
        self.settings = settings
        self.tenant = tenant
        self.agent = agent
        self.wait = Wait(wait)
        self.tools = tool_definitions()
        self.tokens = tokens
        self._dispatcher: ToolDispatcher | None = None
        self._by_token: dict[TokenIdentity, ToolDispatcher] = {}
        self._lock: asyncio.Lock | None = None
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version="0.1.0",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    async def dispatcher_for(self, identity: TokenIdentity) -> ToolDispatcher:
        """The dispatcher of a bearer token's agent, connected with its credential."""
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if identity not in self._by_token:
                client = await MemoryClient.connect(
                    nats_url(self.settings),
                    tenant=identity.tenant,
                    agent=identity.agent,
                    creds=identity.creds,
                    shards=self.settings.shards,
                    settings=self.settings,
                )
                self._by_token[identity] = ToolDispatcher(client, wait=self.wait, tools=self.tools)
            return self._by_token[identity]

    async def dispatcher(self) -> ToolDispatcher:
        if self._dispatcher is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._dispatcher is None:
                    client = await MemoryClient.connect(
                        nats_url(self.settings),
                        tenant=self.tenant,
                        agent=self.agent,
                        shards=self.settings.shards,
                        settings=self.settings,
                    )
                    self._dispatcher = ToolDispatcher(client, wait=self.wait, tools=self.tools)
        return self._dispatcher

    async def close(self) -> None:
        for dispatcher in [self._dispatcher, *self._by_token.values()]:
            if dispatcher is not None:
                with contextlib.suppress(Exception):
                    await dispatcher.client.close()
        self._dispatcher = None
        self._by_token = {}

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["function"]["name"],
                    description=t["function"]["description"],
                    input_schema=t["function"]["parameters"],
                )
                for t in self.tools
            ]
        )

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            if self.tokens is not None:  # over HTTP: the request's token says who calls
                identity = _caller(ctx, self.tokens)
                if identity is None:
                    raise PermissionError("no valid bearer token")
                dispatcher = await self.dispatcher_for(identity)
            else:
                dispatcher = await self.dispatcher()
        except Exception as exc:  # report to the model; the session stays up
            result: dict[str, Any] = {"error": f"memory service unavailable: {exc}"}
        else:
            result = await dispatcher.call_json(params.name, params.arguments or {})
        from zeromem.tools import compact_json

        return types.CallToolResult(
            content=[types.TextContent(text=compact_json(result))],
            structured_content=result,
            is_error="error" in result,
        )

    async def serve_stdio(self) -> None:
        try:
            async with stdio_server() as (read_stream, write_stream):
                await self.server.run(
                    read_stream, write_stream, self.server.create_initialization_options()
                )
        finally:
            await self.close()

    async def serve_http(self, host: str, port: int) -> None:
        import uvicorn
        from mcp.server.auth.settings import AuthSettings
        from pydantic import AnyHttpUrl

        if self.tokens is None or not len(self.tokens):
            raise RuntimeError(
                "the HTTP transport needs bearer tokens: "
                "`zeromem auth mcp-token TENANT AGENT` makes one"
            )
        base = f"http://{host}:{port}"
        app = self.server.streamable_http_app(
            host=host,
            streamable_http_path="/mcp",
            token_verifier=_Verifier(self.tokens),
            # validate_token_resource off: these tokens are this server's own (the token
            # file), not an authorization server's issued for several resources.
            auth=AuthSettings(
                issuer_url=AnyHttpUrl(base),
                resource_server_url=AnyHttpUrl(f"{base}/mcp"),
                validate_token_resource=False,
            ),
        )
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        http = uvicorn.Server(config)
        health_server = None
        if self.settings.telemetry.metrics_port:
            # /healthz and /readyz (ready once the HTTP transport listens) on the metrics
            # address, as every other zeromem process (zeromem.health)
            from zeromem.health import Health, serve_health

            health = Health(self.settings.telemetry.liveness_stall_s)
            health.ready_when("http_listening", lambda: bool(http.started))
            health_server = serve_health(
                health, self.settings.telemetry.metrics_host, self.settings.telemetry.metrics_port
            )
            health.started()
        try:
            await http.serve()
        finally:
            if health_server is not None:
                health_server.shutdown()
            await self.close()


class _Verifier:
    """The MCP SDK's bearer check, against the token file: a known token is accepted
    with its tenant and agent as the client id."""

    def __init__(self, tokens: McpTokens) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken

        identity = self.tokens.lookup(token)
        if identity is None:
            return None
        return AccessToken(token=token, client_id=f"{identity.tenant}/{identity.agent}", scopes=[])


def _caller(ctx: Any, tokens: McpTokens) -> TokenIdentity | None:
    """The identity of the token the HTTP request carried (checked again here: the tool
    acts with that agent's credential)."""
    request = getattr(ctx, "request", None)
    header = request.headers.get("authorization", "") if request is not None else ""
    if not header.lower().startswith("bearer "):
        return None
    return tokens.lookup(header[7:].strip())


def nats_url(settings: Settings) -> str:
    """The configured NATS URL, else the embedded stack's (``zeromem up`` in data_dir)."""
    if settings.bus.nats_url:
        return settings.bus.nats_url
    from zeromem.embedded import find_running_stack

    info = find_running_stack(settings.data_dir)
    if info is None:
        raise RuntimeError(f"no NATS_URL and no running `zeromem up` in {settings.data_dir}")
    return info.nats_url


def run_mcp(
    settings: Settings,
    transport: str,
    host: str,
    port: int,
    tenant: str | None,
    agent: str | None,
    tokens_file: str | None = None,
) -> int:
    """Serve the memory tools over ``transport`` (``stdio`` or ``http``); the exit code."""
    tokens = None
    if transport != "stdio":
        path = Path(tokens_file) if tokens_file else settings.authority_dir / "mcp-tokens.json"
        tokens = McpTokens(path)
        if not len(tokens):
            print(
                f"no bearer tokens in {path}: the HTTP transport serves only callers with one "
                "(`zeromem auth mcp-token TENANT AGENT`)",
                file=sys.stderr,
            )
            return 2
    server = MemoryToolServer(settings, tenant=tenant, agent=agent, tokens=tokens)
    try:
        if transport == "stdio":
            asyncio.run(server.serve_stdio())
        elif transport in ("http", "streamable-http", "streamable_http"):
            asyncio.run(server.serve_http(host, port))
        else:
            print(f"unknown transport {transport!r}: use stdio or http", file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        return 0
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zeromem-mcp", description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--tenant", help="default: the credential's")
    parser.add_argument("--agent", help="default: the credential's")
    parser.add_argument("--tokens", help="bearer token file for http (default: the authority's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout is the wire
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2  # as the CLI's exit code for a mistake in its input
    return run_mcp(
        settings,
        args.transport,
        args.host,
        args.port,
        args.tenant,
        args.agent,
        args.tokens,
    )


if __name__ == "__main__":
    sys.exit(main())
