"""`zeromem auth` as an operator uses it: a tenant, a creds file for an agent, the CLI
acting with it through ZEROMEM_CREDS, then a revocation that the running servers apply."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from zeromem.settings import Settings

ZEROMEM = [sys.executable, "-m", "zeromem.cli.main"]


async def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # asynchronously: the workers answering it run on this test's event loop
    pipe = subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(*ZEROMEM, *args, env=env, stdout=pipe, stderr=pipe)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


async def test_issue_use_and_revoke_a_credential(
    running: Settings, tenant: str, tmp_path: Path
) -> None:
    env = dict(
        os.environ,
        ZEROMEM_NATS_URL=running.bus.nats_url,
        ZEROMEM_SHARDS=str(running.shards),
        ZEROMEM_REDIS_URL=running.store.redis_url,
    )
    assert (await cli(env, "auth", "tenant", "create", tenant)).returncode == 0
    creds = tmp_path / "writer.creds"
    issued = await cli(env, "auth", "issue", tenant, "writer", "--out", str(creds))
    assert issued.returncode == 0, issued.stderr
    assert "BEGIN NATS USER JWT" in creds.read_text() and oct(creds.stat().st_mode)[-3:] == "600"

    agent = dict(env, ZEROMEM_CREDS=str(creds))  # the conventional variable; no --tenant
    put = await cli(agent, "put", "user:u1:note", '"hello"', "--json")
    assert put.returncode == 0, put.stderr
    assert json.loads(put.stdout)["result"]["agent"] == "writer"  # the credential's agent
    got = await cli(agent, "get", "user:u1:note", "--json")
    assert json.loads(got.stdout)["item"]["value"] == "hello"
    other = await cli(agent, "get", "user:u1:note", "--tenant", "someone-else")
    assert other.returncode != 0 and "for tenant" in other.stderr

    listed = json.loads((await cli(env, "auth", "list", "--tenant", tenant, "--json")).stdout)
    assert [(r["agent"], r["status"]) for r in listed] == [("writer", "valid")]

    revoked = await cli(env, "auth", "revoke", "--tenant", tenant, "--agent", "writer")
    assert revoked.returncode == 0, revoked.stderr
    assert "pushed to" in revoked.stdout
    after = await cli(agent, "get", "user:u1:note")
    assert after.returncode != 0 and "Authorization Violation" in after.stderr
    listed = json.loads((await cli(env, "auth", "list", "--tenant", tenant, "--json")).stdout)
    assert [r["status"] for r in listed] == ["revoked"]
