"""Fixtures of the reliability suite: a deployment of its own per scenario (servers and
service processes it may kill), and the summary lines every scenario prints at the end of
the run (pytest captures a test's output; the terminal summary does not)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.cluster import Cluster, long_mode
from tests.reliability.history import SUMMARY_LINES
from zeromem.auth.authority import Authority


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


CALL_FAILED = pytest.StashKey[bool]()
LOG_TAIL_LINES = 40


@contextlib.asynccontextmanager
async def deployed(
    tmp_path: Path, authority: Authority, request: pytest.FixtureRequest, **options: Any
) -> AsyncIterator[Cluster]:
    """A scenario's own deployment (``options``: Cluster's, e.g. ``nats_nodes=3``), stopped
    afterwards; if the test failed, with the end of every service's log printed."""
    deployment = await Cluster(tmp_path / "cluster", authority, **options).start()
    try:
        yield deployment
    finally:
        deployment.stop()
        if request.node.stash.get(CALL_FAILED, False):
            print_service_logs(deployment.root)


@pytest.fixture
async def cluster(
    tmp_path: Path, authority: Authority, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    async with deployed(tmp_path, authority, request) as deployment:
        yield deployment


def print_service_logs(root: Path) -> None:
    """A failed scenario's evidence: the end of each worker's and read service's log (the
    temp dir is gone by the time anyone reads a CI report). Tracebacks are folded to
    their last line so the tail shows events, not frames."""
    for log in sorted(root.glob("*.log")):
        lines = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if line and not line.startswith((" ", "Traceback"))
        ]
        print(f"--- {log.name}: last {LOG_TAIL_LINES} of {len(lines)} lines")
        for line in lines[-LOG_TAIL_LINES:]:
            print(line[:300])


@pytest.fixture
def tenant() -> str:
    return f"r{uuid.uuid4().hex[:10]}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SUMMARY_LINES:
        mode = "long" if long_mode() else "short"
        terminalreporter.section(f"zeromem reliability ({mode})")
        for line in SUMMARY_LINES:
            terminalreporter.write_line(line)
