"""``zeromem mcp``: the memory tools over the Model Context Protocol (official ``mcp`` SDK).

The MCP tools are exactly the function-calling tools of :mod:`zeromem.tools` (same names,
same JSON Schemas, same compact JSON answers from the same dispatcher), so an agent sees
one memory interface whether it reaches it by function calling or by MCP.

Transports: ``stdio`` (a client spawns this process) and ``http`` (streamable HTTP at
``http://HOST:PORT/mcp``). The connection to NATS is opened on the first tool call, on the
server's own event loop, and closed when the server stops.

Run stand-alone (until the CLI wires ``zeromem mcp``)::

    python -m zeromem.mcp_server --transport stdio --tenant acme --agent claude
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from zeromem.sdk.client import MemoryClient, Wait
from zeromem.settings import Settings
from zeromem.tools import ToolDispatcher, tool_definitions

log = logging.getLogger(__name__)

SERVER_NAME = "zeromem"
INSTRUCTIONS = (
    "Memory shared by agents. Keys are namespace:owner:name (user:u10086:pref_lang). "
    "memory_recall before answering about a user or task; memory_write what is worth keeping."
)


class MemoryToolServer:
    """The MCP server and the lazily connected client its tools run on."""

    def __init__(
        self, settings: Settings, *, tenant: str, agent: str, wait: Wait | str = Wait.APPLIED
    ) -> None:
        self.settings = settings
        self.tenant = tenant
        self.agent = agent
        self.wait = Wait(wait)
        self.tools = tool_definitions()
        self._dispatcher: ToolDispatcher | None = None
        self._lock: asyncio.Lock | None = None
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version="0.1.0",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

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
                    )
                    self._dispatcher = ToolDispatcher(client, wait=self.wait, tools=self.tools)
        return self._dispatcher

    async def close(self) -> None:
        if self._dispatcher is not None:
            with contextlib.suppress(Exception):
                await self._dispatcher.client.close()
            self._dispatcher = None

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

        app = self.server.streamable_http_app(host=host, streamable_http_path="/mcp")
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        try:
            await uvicorn.Server(config).serve()
        finally:
            await self.close()


def nats_url(settings: Settings) -> str:
    """The configured NATS URL, else the embedded stack's (``zeromem up`` in data_dir)."""
    if settings.nats_url:
        return settings.nats_url
    from zeromem.embedded import find_running_stack

    info = find_running_stack(settings.data_dir)
    if info is None:
        raise RuntimeError(f"no NATS_URL and no running `zeromem up` in {settings.data_dir}")
    return info.nats_url


def run_mcp(
    settings: Settings, transport: str, host: str, port: int, tenant: str, agent: str
) -> int:
    """Serve the memory tools over ``transport`` (``stdio`` or ``http``); the exit code."""
    server = MemoryToolServer(settings, tenant=tenant, agent=agent)
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
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--agent", default="mcp")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout is the wire
    return run_mcp(
        Settings.from_env(), args.transport, args.host, args.port, args.tenant, args.agent
    )


if __name__ == "__main__":
    sys.exit(main())
