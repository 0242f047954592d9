"""`zeromem up` and the CLI as a newcomer uses them: start, put, get, conflict, restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ZEROMEM = [sys.executable, "-m", "zeromem.cli.main"]


def clean_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ZEROMEM_") and k not in ("NATS_URL", "REDIS_URL")
    }
    return env


def start_ready(
    cwd: Path, *top: str, as_json: bool = False
) -> tuple[subprocess.Popen[str], list[str]]:
    """`zeromem up` until it prints its ready banner (or its JSON); its stdout so far.
    Ready means ready: the first command after it must work, no retry."""
    proc = subprocess.Popen(
        [*ZEROMEM, *top, "up", "--workers", "1", *(["--json"] if as_json else [])],
        cwd=cwd,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if "up and ready" in line or '"status": "ready"' in line:
            while "Ctrl-C" not in lines[-1] and '"ready"' not in lines[-1]:
                lines.append(proc.stdout.readline())
            return proc, lines
    proc.kill()
    pytest.fail("zeromem up did not get ready: " + "".join(lines))


def start_up(cwd: Path) -> subprocess.Popen[str]:
    return start_ready(cwd)[0]


def stop_up(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(30)


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ZEROMEM, *args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=30
    )


def test_up_put_get_conflict_and_restart_keeps_data(tmp_path: Path) -> None:
    proc = start_up(tmp_path)
    try:
        put = cli(
            tmp_path,
            "put",
            "user:u10086:pref_lang",
            '{"lang": "zh"}',
            "--content",
            "prefers Chinese",
            "--json",
        )
        assert put.returncode == 0, put.stderr
        assert json.loads(put.stdout)["result"]["version"] == 1

        got = cli(tmp_path, "get", "user:u10086:pref_lang", "--json")
        assert got.returncode == 0, got.stderr
        item = json.loads(got.stdout)["item"]
        assert item["value"] == {"lang": "zh"} and item["version"] == 1

        clash = cli(tmp_path, "put", "user:u10086:pref_lang", '"en"', "--expected-version", "0")
        assert clash.returncode == 3 and "conflict" in clash.stdout
        assert "current version 1" in clash.stdout

        assert cli(tmp_path, "get", "user:u10086:missing").returncode == 4
        listed = cli(tmp_path, "list", "user:", "--json")
        assert [i["key"] for i in json.loads(listed.stdout)["items"]] == ["user:u10086:pref_lang"]
    finally:
        stop_up(proc)
    assert proc.returncode == 0
    assert not (tmp_path / ".zeromem" / "stack.json").exists()

    proc = start_up(tmp_path)  # the same data dir: JetStream store and append-only file
    try:
        got = cli(tmp_path, "get", "user:u10086:pref_lang", "--json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["item"]["value"] == {"lang": "zh"}
        again = cli(tmp_path, "put", "user:u10086:pref_lang", '"en"', "--expected-version", "1")
        assert again.returncode == 0 and "version 2" in again.stdout
    finally:
        stop_up(proc)


def test_every_command_explains_itself() -> None:
    for command in ("up", "worker", "serve", "put", "get", "list", "delete"):
        out = subprocess.run([*ZEROMEM, command, "--help"], capture_output=True, text=True)
        assert out.returncode == 0 and "usage: zeromem" in out.stdout and len(out.stdout) > 200
