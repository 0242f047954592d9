"""An MCP client session with zeromem's MCP server over stdio (official ``mcp`` SDK).

Starts a local stack, spawns ``python -m zeromem.mcp_server --transport stdio`` the way an
MCP-capable client (an IDE, a desktop assistant) would, lists the tools, writes a few
memories and recalls them. Prints the tokens the recall saved against injecting every
memory of the owner.

    python examples/mcp_session.py [--short]    # virtualenv active (make run made it)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from zeromem.integrations.local import issue_credentials, local_stack
from zeromem.sdk import ZeromemError

try:
    from mcp import ClientSession, StdioServerParameters, stdio_client
except ImportError:
    sys.exit("error: this example needs the MCP SDK; pip install 'zeromem[mcp]'")

FACTS = [
    ("deploy_window", "Deploys happen Tuesdays 14:00-16:00 UTC; never on Fridays."),
    ("oncall", "On-call this week is Priya (pager +1-555-0142), backup Tom."),
    ("db_version", "Production runs PostgreSQL 16.2 on db-prod-3; replicas db-prod-4/5."),
    ("incident_1182", "INC-1182: checkout latency spike from a missing index on orders.user_id."),
    ("style", "Commit messages use the imperative mood and reference the ticket id."),
    ("budget", "Cloud budget for Q3 is $42,000; 61% spent as of August 14."),
]


async def main(short: bool) -> None:
    facts = FACTS if short else FACTS * 5
    async with local_stack() as settings:
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "zeromem.mcp_server",
                "--transport",
                "stdio",
                "--tenant",
                "demo",
                "--agent",
                "mcp-demo",
            ],
            env={
                **os.environ,
                "ZEROMEM_NATS_URL": settings.bus.nats_url,
                "ZEROMEM_SHARDS": str(settings.shards),
                # the agent's credential, as `zeromem auth issue demo mcp-demo` writes it
                "ZEROMEM_CREDS": str(issue_credentials(settings, "demo", "mcp-demo")),
            },
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            print("tools:", ", ".join(t.name for t in listed.tools))

            async def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
                result = await session.call_tool(tool, arguments)
                return json.loads(result.content[0].text)

            for i, (name, text) in enumerate(facts):
                await call(
                    "memory_write",
                    namespace="team",
                    owner="platform",
                    name=f"{name}{i // len(FACTS) or ''}",
                    value={"note": text},
                    content=text,
                    type="fact",
                )
            recalled = await call(
                "memory_recall",
                query="who is on call and when can I deploy",
                namespace="team",
                owner="platform",
                budget=120,
            )
            print(f"recall kept {recalled['keys']}")
            print(f"context ({recalled['tokens']} tokens):")
            print(recalled["context"])
            missing = await call(
                "memory_read", namespace="team", owner="platform", name="nothing_here"
            )
            print(f"read of a missing key: {missing}")
            print(f"tokens saved: {recalled['saved_tokens']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="fewer memories")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.short))
    except ZeromemError as exc:
        sys.exit(f"error: {exc}")
