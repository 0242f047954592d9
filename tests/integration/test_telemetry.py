"""Telemetry against the real stack: metric values after a known workload, the Prometheus
endpoint of a running service, one trace across an agent turn."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.eventually import eventually
from tests.harness import ServiceSet
from zeromem.auth.authority import Authority
from zeromem.embedded import free_port
from zeromem.embedded.stack import settings_for_role
from zeromem.sdk import MemoryClient
from zeromem.telemetry import Telemetry
from zeromem.telemetry.reading import metric_points as metric_values
from zeromem.telemetry.reading import total


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=2).read().decode()


async def test_100_recalls_count_exactly_the_injected_and_baseline_tokens(isolated) -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    services = await ServiceSet.start(isolated, telemetry=telemetry)
    try:
        async with await MemoryClient.connect(
            isolated.bus.nats_url, tenant="acme", agent="planner", shards=isolated.shards
        ) as client:
            for i in range(40):
                await client.put(
                    f"user:u1:fact{i}",
                    i,
                    content=f"fact number {i} about the rollout plan",
                    wait="applied" if i == 39 else "none",
                )
            injected = baseline = 0
            for i in range(100):
                reply = await client.recall(
                    f"rollout plan fact {i % 40}",
                    owners=["user:u1"],
                    k=1 + i % 5,
                    budget=30 + i,
                    history_tokens=1000,
                )
                injected += reply.tokens
                baseline += reply.baseline_tokens
        values = metric_values(reader)
        attrs = {"zeromem.tenant": "acme", "zeromem.agent": "planner"}
        assert total(values, "zeromem.recall.requests", **attrs) == 100
        assert total(values, "zeromem.recall.tokens.injected", **attrs) == injected
        assert total(values, "zeromem.recall.tokens.baseline", **attrs) == baseline
        assert total(values, "zeromem.recall.tokens.saved", **attrs) == baseline - injected
        assert total(values, "zeromem.agent.history.tokens", **attrs) == 100_000
        assert injected < baseline
    finally:
        await services.stop()


async def test_prometheus_endpoint_of_a_running_service_shows_the_token_metrics(isolated) -> None:
    port = free_port()
    reader = settings_for_role(isolated, Authority.load(isolated.authority_dir), "reader")
    env = dict(
        os.environ,
        ZEROMEM_NATS_URL=reader.bus.nats_url,
        ZEROMEM_REDIS_URL=reader.store.redis_url,
        ZEROMEM_NATS_CREDS=reader.bus.nats_creds,
        ZEROMEM_SHARDS=str(isolated.shards),
        ZEROMEM_METRICS_PORT=str(port),
        ZEROMEM_METRICS_HOST="127.0.0.1",
    )
    serve = subprocess.Popen(
        [sys.executable, "-m", "zeromem.cli.main", "serve"], env=env, stderr=subprocess.DEVNULL
    )
    services = await ServiceSet.start(isolated)  # workers (and a second read service)
    try:
        async with await MemoryClient.connect(
            isolated.bus.nats_url, tenant="acme", agent="scraper", shards=isolated.shards
        ) as client:
            await client.put("user:u1:a", 1, content="alpha beta gamma", wait="applied")
            await services.readers[0].stop()  # leave the subprocess as the only recall service
            services.readers.clear()
            # the subprocess says when it serves (its start takes seconds on a busy machine)
            await eventually(
                lambda: asyncio.to_thread(_get, f"http://127.0.0.1:{port}/readyz"),
                retry_on=(OSError,),  # not listening yet, or 503 (urllib raises HTTPError)
                timeout=60.0,
                interval=0.1,
            )
            await eventually(
                lambda: client.recall("alpha", owners=["user:u1"]), retry_on=(Exception,)
            )
            body = await eventually(
                lambda: asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics"),
                lambda body: "zeromem_recall_tokens_injected" in body,
                retry_on=(OSError,),
            )
        assert "zeromem_recall_tokens_injected" in body
        assert "zeromem_recall_tokens_baseline" in body
        assert 'zeromem_tenant="acme"' in body
    finally:
        serve.terminate()
        serve.wait(10)
        await services.stop()


async def test_a_recall_joins_the_agents_trace(isolated) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=provider)
    services = await ServiceSet.start(isolated, telemetry=telemetry)
    tracer = provider.get_tracer("agent")
    try:
        async with await MemoryClient.connect(
            isolated.bus.nats_url, tenant="acme", shards=isolated.shards
        ) as client:
            await client.put("user:u1:a", 1, content="alpha", wait="applied")
            with tracer.start_as_current_span("agent turn") as turn:
                await client.recall("alpha", owners=["user:u1"])
            trace_id = turn.get_span_context().trace_id
        await asyncio.sleep(0.05)
        recall_spans = [s for s in exporter.get_finished_spans() if s.name == "zeromem recall"]
        assert recall_spans and recall_spans[0].context.trace_id == trace_id
    finally:
        await services.stop()


async def test_conflicts_and_outcomes_are_counted_exactly(isolated) -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    services = await ServiceSet.start(isolated, telemetry=telemetry)
    try:
        async with await MemoryClient.connect(
            isolated.bus.nats_url,
            tenant="acme",
            agent="a",
            shards=isolated.shards,
            telemetry=telemetry,
        ) as client:
            await client.put("task:t1:status", "new", wait="applied")
            for _ in range(3):
                clash = await client.put("task:t1:status", "x", expected_version=0, wait="applied")
                assert clash.status == "conflict"
            await client.patch("task:t1:missing", {"a": 1}, wait="applied")  # rejected
            await client.delete("task:t1:status", wait="applied")
        values = metric_values(reader)
        counted = {
            (a.get("zeromem.op"), a.get("zeromem.outcome")): v
            for a, v in values["zeromem.commands"]
            if a.get("zeromem.tenant") == "acme"
        }
        assert counted[("put", "conflict")] == 3
        assert counted[("put", "applied")] == 1
        assert counted[("patch", "rejected")] == 1
        assert counted[("delete", "applied")] == 1
        assert total(values, "zeromem.write.llm_tokens", **{"zeromem.tenant": "acme"}) == 0
        assert "zeromem.write.llm_tokens" in values  # reported, as zero
        assert total(values, "zeromem.memories.stored", **{"zeromem.tenant": "acme"}) == 0
        assert total(values, "zeromem.commands.published", **{"zeromem.tenant": "acme"}) == 6
    finally:
        await services.stop()


async def test_one_trace_spans_a_publish_and_its_apply(isolated) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    services = await ServiceSet.start(isolated, telemetry=Telemetry(tracer_provider=provider))
    tracer = provider.get_tracer("agent")
    try:
        async with await MemoryClient.connect(
            isolated.bus.nats_url, tenant="acme", shards=isolated.shards
        ) as client:
            with tracer.start_as_current_span("agent turn") as turn:
                await client.put("user:u1:pref", "zh", wait="applied")
            trace_id = turn.get_span_context().trace_id
        applies = [s for s in exporter.get_finished_spans() if s.name == "process zm.cmd"]
        assert applies and applies[0].context.trace_id == trace_id
        assert (
            applies[0].parent is not None
            and applies[0].parent.span_id == turn.get_span_context().span_id
        )
    finally:
        await services.stop()
