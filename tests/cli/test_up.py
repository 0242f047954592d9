"""`zeromem up` as a newcomer runs it (issue 18): one stack per data directory, children
that die with it whatever kills it, "ready" that means ready, a banner that says how to
reach the stack, and the CLI finding it from a subdirectory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_cli_up import clean_env, cli, start_ready

ZEROMEM = [sys.executable, "-m", "zeromem.cli.main"]


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid,ppid"], capture_output=True, text=True).stdout
    return [int(p) for p, pp in (line.split() for line in out.splitlines()[1:]) if int(pp) == pid]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too (reaped by init soon)
    state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return state != "Z"


def wait_gone(pids: list[int], timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_ready_means_the_first_command_works(tmp_path: Path) -> None:
    proc, lines = start_ready(tmp_path)
    try:
        # no retry: the workers hold the shards and the read services answer
        got = cli(tmp_path, "get", "user:u1:none")
        assert got.returncode == 4, got.stderr
        put = cli(tmp_path, "put", "user:u1:pref_lang", '"zh"')
        assert put.returncode == 0 and "version 1" in put.stdout, put.stderr
        banner = "".join(lines)
        assert "From another shell in this directory (or below):  zeromem put" in banner
        below = tmp_path / "src" / "deep"
        below.mkdir(parents=True)
        got = cli(below, "get", "user:u1:pref_lang", "--json")
        assert got.returncode == 0 and json.loads(got.stdout)["item"]["value"] == "zh"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode == 0


def test_a_second_up_names_the_first_and_leaves_it_running(tmp_path: Path) -> None:
    proc, _ = start_ready(tmp_path)
    try:
        state = (tmp_path / ".zeromem" / "stack.json").read_text()
        second = subprocess.run(
            [*ZEROMEM, "up", "--workers", "1"],
            cwd=tmp_path,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 6, second.stderr
        assert f"in use by process {proc.pid} (zeromem up)" in second.stderr
        assert "Traceback" not in second.stderr
        assert (tmp_path / ".zeromem" / "stack.json").read_text() == state
        assert cli(tmp_path, "put", "user:u1:k", "1").returncode == 0  # the first still serves
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_children_die_with_up(tmp_path: Path, sig: signal.Signals) -> None:
    """Closing the terminal (SIGHUP) or killing `up` outright (SIGKILL) leaves no NATS,
    Redis, read service or worker behind, and a new `up` starts on the same data."""
    proc, _ = start_ready(tmp_path)
    assert cli(tmp_path, "put", "user:u1:k", '"kept"').returncode == 0
    children = children_of(proc.pid)
    assert len(children) == 5, children  # nats-server, redis, serve, worker, snapshot
    proc.send_signal(sig)
    proc.wait(30)
    assert wait_gone(children) == []
    proc, _ = start_ready(tmp_path)  # the lock went with the process
    try:
        got = cli(tmp_path, "get", "user:u1:k", "--json")
        assert json.loads(got.stdout)["item"]["value"] == "kept"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0


def test_json_banner_and_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "elsewhere"
    proc, lines = start_ready(tmp_path, "--data-dir", str(data), as_json=True)
    try:
        ready = json.loads(lines[-1])
        assert ready["status"] == "ready" and ready["data_dir"] == str(data)
        assert all(alive(pid) for pid in ready["children"].values())
        other = tmp_path / "other"
        other.mkdir()
        missing = cli(other, "get", "user:u1:x")
        assert missing.returncode == 5 and "looked in" in missing.stderr
        found = cli(other, "--data-dir", str(data), "get", "user:u1:x")
        assert found.returncode == 4, found.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert json.loads(out.splitlines()[-1]) == {"status": "stopped"}


def test_the_banner_with_a_data_dir_names_it(tmp_path: Path) -> None:
    data = tmp_path / "d"
    proc, lines = start_ready(tmp_path, "--data-dir", str(data))
    try:
        assert f"From another shell:  zeromem --data-dir {data} put" in "".join(lines)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
