"""The MCP server driven by the official ``mcp`` SDK's own client over stdio."""

from __future__ import annotations

import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client

from zeromem.settings import Settings
from zeromem.tools import TOOL_NAMES, tool_definitions


async def test_list_tools_then_write_then_recall(running: Settings, tenant: str) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "zeromem.mcp_server",
            "--transport",
            "stdio",
            "--tenant",
            tenant,
            "--agent",
            "mcp-test",
        ],
        env={
            **os.environ,
            "ZEROMEM_NATS_URL": running.bus.nats_url,
            "ZEROMEM_SHARDS": str(running.shards),
        },
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        assert [t.name for t in listed.tools] == list(TOOL_NAMES)
        definitions = {t["function"]["name"]: t["function"] for t in tool_definitions()}
        for tool in listed.tools:
            assert tool.description == definitions[tool.name]["description"]
            assert tool.input_schema == definitions[tool.name]["parameters"]

        wrote = await session.call_tool(
            "memory_write",
            {
                "namespace": "user",
                "owner": "u7",
                "name": "pref_lang",
                "value": {"lang": "zh"},
                "content": "prefers answers in Chinese",
                "type": "user_preference",
            },
        )
        assert not wrote.is_error
        assert json.loads(wrote.content[0].text) == {
            "ok": True,
            "key": "user:u7:pref_lang",
            "version": 1,
        }
        recalled = await session.call_tool(
            "memory_recall",
            {"query": "how should answers be written", "namespace": "user", "owner": "u7"},
        )
        body = json.loads(recalled.content[0].text)
        assert body["keys"] == ["user:u7:pref_lang"] and "Chinese" in body["context"]
        assert recalled.structured_content == body

        bad = await session.call_tool("memory_read", {"namespace": "user"})
        assert bad.is_error and "missing" in json.loads(bad.content[0].text)["error"]
        missing = await session.call_tool(
            "memory_read", {"namespace": "user", "owner": "u7", "name": "nope"}
        )
        assert not missing.is_error and json.loads(missing.content[0].text) == {"found": False}
