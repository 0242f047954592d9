"""Telemetry configuration never breaks a service."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from zeromem.settings import Settings, TelemetrySettings
from zeromem.telemetry import configure_telemetry


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens here once the socket closes


def test_an_unreachable_collector_costs_only_the_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
    telemetry = configure_telemetry("test", Settings.from_env().telemetry)
    started = time.perf_counter()
    for _ in range(1000):  # recording stays in memory: no call waits on the collector
        telemetry.record_recall("acme", "agent", 10, 100, 0.001)
    # One wait on the collector would cost its 5 s timeout; the loop itself takes ~50 ms
    # (0.53 s once with five test suites sharing two cores, so no tighter bound).
    assert time.perf_counter() - started < 4.0
    with telemetry.tracer.start_as_current_span("turn"):
        pass
    # Stopping is bounded too: the final export to the dead collector is given up.
    started = time.perf_counter()
    asyncio.run(telemetry.shutdown(limit_s=1.0))
    assert time.perf_counter() - started < 3.0


def test_a_metrics_port_in_use_does_not_stop_the_service() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        telemetry = configure_telemetry("test", TelemetrySettings(metrics_port=port))
        telemetry.record_recall("acme", "agent", 1, 2, 0.001)
