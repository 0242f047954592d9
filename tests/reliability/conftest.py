"""Fixtures of the reliability suite: a deployment of its own per scenario (servers and
service processes it may kill), and the summary lines every scenario prints at the end of
the run (pytest captures a test's output; the terminal summary does not)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.reliability.cluster import Cluster, long_mode
from tests.reliability.history import SUMMARY_LINES
from zeromem.auth.authority import Authority


@pytest.fixture
async def cluster(tmp_path: Path, authority: Authority) -> AsyncIterator[Cluster]:
    deployment = await Cluster(tmp_path / "cluster", authority).start()
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def tenant() -> str:
    return f"r{uuid.uuid4().hex[:10]}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SUMMARY_LINES:
        mode = "long" if long_mode() else "short"
        terminalreporter.section(f"zeromem reliability ({mode})")
        for line in SUMMARY_LINES:
            terminalreporter.write_line(line)
