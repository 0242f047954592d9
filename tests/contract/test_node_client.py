"""The wire contract, driven from a second language: ``node/client.mjs`` is a Node.js
client written from ``schemas/`` alone (the AsyncAPI document, the JSON Schemas and the
README's rules). It runs against the suite's real servers with a credential issued here
and validates every reply with Ajv in strict mode; this test reads its report.

``make test`` installs its npm packages first (``make contract-deps``: ``npm ci`` from
the lock file, and Node itself with apt-get where it is missing)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from zeromem.auth.authority import Authority
from zeromem.settings import Settings

NODE_DIR = Path(__file__).parent / "node"
SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"
CHECKS = [
    "documents",
    "crc32",
    "info",
    "put",
    "dedupe",
    "compare-and-set",
    "batch",
    "get",
    "list",
    "appended ids order",
    "recall",
    "change feed resume",
    "dead-lettered command",
    "shard past the count",
    "error reply",
]


def _node_ready() -> str:
    """The node binary, with the client's packages installed; skips (saying why) only
    where Node cannot be had."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are not installed: `make contract-deps` installs them")
    if not (NODE_DIR / "node_modules" / ".package-lock.json").is_file():
        done = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.skip(f"npm ci failed in {NODE_DIR} (is the registry reachable?): {done.stderr}")
    return node


@pytest.mark.timeout(180)
async def test_a_node_client_follows_the_published_contract(
    running: Settings, authority: Authority, tenant: str, tmp_path: Path
) -> None:
    node = _node_ready()
    authority.create_tenant(tenant)
    creds = authority.issue_agent(tenant, "node-client").write(tmp_path / "node-client.creds")
    process = await asyncio.create_subprocess_exec(
        node,
        "client.mjs",
        running.bus.nats_url,
        str(creds),
        tenant,
        "node-client",
        str(SCHEMAS_DIR),
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 150)
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    checks = {line["check"]: line for line in lines if "check" in line}
    failures = {name: c["detail"] for name, c in checks.items() if not c["ok"]}
    assert not failures, f"{failures}\nstderr: {err.decode()[-2000:]}"
    assert list(checks) == CHECKS, f"stdout: {out.decode()[-2000:]}\nstderr: {err.decode()[-2000:]}"
    assert lines[-1] == {"done": True, "failed": 0}
    assert process.returncode == 0
    assert checks["info"]["detail"]["shards"] == running.shards
