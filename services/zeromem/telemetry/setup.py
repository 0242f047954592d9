"""Configuring exporters from the telemetry settings, without ever breaking the service.

- A Prometheus scrape endpoint on ``metrics_port`` (``ZEROMEM_METRICS_PORT``), if set, with
  the process's ``/healthz`` and ``/readyz`` beside ``/metrics`` (``zeromem.health``).
- OTLP over HTTP when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the per-signal
  ``..._METRICS_ENDPOINT`` / ``..._TRACES_ENDPOINT``) is set (read into
  ``TelemetrySettings``); the exporter reads the other ``OTEL_*`` variables itself. An
  unreachable collector costs the metrics, nothing else: exports run in a background
  thread and their failures are logged by the SDK.
- Nothing on the console by default.
"""

from __future__ import annotations

import logging

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from zeromem.health import Health, serve_health
from zeromem.settings import TelemetrySettings
from zeromem.telemetry.instruments import Telemetry

log = logging.getLogger(__name__)


def configure_telemetry(
    service: str, config: TelemetrySettings | None = None, health: Health | None = None
) -> Telemetry:
    """The process's exporters; with a metrics port, also its health endpoints (``health``:
    its readiness checks; liveness alone if none is given). Call from the running loop."""
    resource = Resource.create(
        {"service.name": f"zeromem-{service}", "service.namespace": "zeromem"}
    )
    config = config or TelemetrySettings()
    readers: list[MetricReader] = []
    if config.metrics_port:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader

            health = health or Health()
            serve_health(health, config.metrics_host, config.metrics_port)
            readers.append(PrometheusMetricReader())
        except Exception:  # a port in use must not stop the service
            log.exception("Prometheus endpoint on port %d unavailable", config.metrics_port)
    if config.otlp_metrics:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        except Exception:
            log.exception("OTLP metrics exporter unavailable")
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)

    tracer_provider: trace.TracerProvider | None = None
    if config.otlp_traces:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            sdk_provider = TracerProvider(resource=resource)
            sdk_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            tracer_provider = sdk_provider
        except Exception:
            log.exception("OTLP trace exporter unavailable")
    return Telemetry(meter_provider, tracer_provider)
