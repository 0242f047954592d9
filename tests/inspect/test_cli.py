"""The commands: ``zeromem auth inspect-token`` and ``zeromem up --inspect-port``."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.test_cli_up import ZEROMEM, clean_env, cli, stop_up
from zeromem.auth.authority import Authority
from zeromem.auth.credentials import Identity, load_credential
from zeromem.auth.mcp_tokens import McpTokens
from zeromem.cli.main import main
from zeromem.embedded.servers import free_port


def test_inspect_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZEROMEM_AUTH_DIR", str(tmp_path / "auth"))
    authority = Authority.load_or_create(tmp_path / "auth")
    tokens = McpTokens(authority.directory / "inspect-tokens.json")

    assert main(["auth", "inspect-token", "acme", "ops", "--audit"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    found = tokens.lookup(token)
    assert found is not None and (found.tenant, found.agent) == ("acme", "ops")
    assert Identity.of(load_credential(found.creds)) == Identity("acme", "ops", "")
    assert "acme" in authority.tenants()

    assert main(["auth", "inspect-token", "--operator"]) == 0
    operator = tokens.lookup(capsys.readouterr().out.strip().splitlines()[-1])
    assert operator is not None and Identity.of(load_credential(operator.creds)).role == "admin"

    assert main(["auth", "inspect-token", "acme"]) == 2  # an agent is needed, or --operator


def test_up_serves_the_inspector(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*ZEROMEM, "up", "--workers", "1", "--inspect-port", str(port)],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    try:
        # The inspector prints its link as soon as it starts, alongside the read services
        # and workers: the stack is usable once `up` says it is ready (a read before then
        # can meet no read service yet, a 503 under load).
        link, ready, lines = "", False, []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (link and ready):
            line = proc.stdout.readline()
            lines.append(line)
            if "operator login" in line:
                link = line.split(": ", 1)[1].strip()
            ready = ready or "is up and ready" in line
            if proc.poll() is not None:
                break
        assert ready, "".join(lines)
        assert link.startswith(f"http://127.0.0.1:{port}/login?token="), "".join(lines)
        assert (
            cli(
                tmp_path, "put", "user:u1:pref_lang", '"zh"', "--content", "prefers Chinese"
            ).returncode
            == 0
        )
        with httpx.Client(timeout=10) as http:
            login = http.get(link, follow_redirects=False)
            assert login.status_code == 303  # and the session cookie is set on the client
            memories = http.get(f"http://127.0.0.1:{port}/api/t/default/memories")
            assert memories.status_code == 200
            assert [i["key"] for i in memories.json()["items"]] == ["user:u1:pref_lang"]
            shards = http.get(f"http://127.0.0.1:{port}/api/ops/shards").json()
            assert all(s["holder"] for s in shards["shards"])  # the one worker's
        forged = httpx.get(
            f"http://127.0.0.1:{port}/api/t/default/memories",
            headers={"cookie": "zm_inspect=forged"},
        )
        assert forged.status_code == 401
    finally:
        stop_up(proc)
