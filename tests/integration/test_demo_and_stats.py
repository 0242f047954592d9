"""`make demo` (short) and `zeromem stats` as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from zeromem.sdk import MemoryClient


def test_the_demo_runs_and_prints_the_savings() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "zeromem.demo", "--turns", "30"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "tokens if each turn carried its history" in out.stdout
    assert "saved against history" in out.stdout
    assert "LLM tokens spent writing memory" in out.stdout


async def test_stats_report_usage_per_agent(client: MemoryClient, tmp_path: Path) -> None:
    await client.put("user:u1:a", 1, content="alpha beta", wait="applied")
    for _ in range(3):
        await client.recall("alpha", owners=["user:u1"], history_tokens=500)
    reply = await client.stats()
    rows = [r for r in reply.rows if r.agent == client.agent]
    assert sum(r.recalls for r in rows) == 3
    assert sum(r.history for r in rows) == 1500
    assert sum(r.injected for r in rows) > 0 and sum(r.baseline for r in rows) > 0

    from zeromem.cli.views import print_stats, save_stats_png

    print_stats(client.tenant, reply.rows)
    png = tmp_path / "stats.png"
    save_stats_png(client.tenant, reply.rows, str(png))
    assert png.stat().st_size > 5000


async def test_stats_of_another_tenant_are_refused(client: MemoryClient) -> None:
    from zeromem import naming
    from zeromem.schemas import StatsRequest, encode

    msg = await client.nc.request(
        naming.query_subject(client.tenant, client.agent, "stats"),
        encode(StatsRequest(tenant=client.tenant + "x")),
        timeout=5,
    )
    assert msg.headers and msg.headers.get(naming.ERROR_HEADER) == "bad_request"
