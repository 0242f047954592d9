"""Issue 14 (b): every secret shape of tests/secret_shapes.py, written by an agent through
the real bus and workers, appears in no audit record, no log line, no exported span and
no content derived from a value; the memory itself still holds it (redaction is about what
leaves, not what is stored)."""

from __future__ import annotations

import asyncio
import logging

import msgspec
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.harness import ServiceSet
from tests.secret_shapes import SHAPES
from zeromem.sdk import MemoryClient
from zeromem.telemetry import Telemetry


async def test_no_secret_shape_leaves_in_audit_logs_traces_or_derived_content(
    isolated, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    services = await ServiceSet.start(isolated, telemetry=Telemetry(tracer_provider=provider))
    tracer = provider.get_tracer("agent")
    log = logging.getLogger("zeromem.test.agent")
    try:
        async with await MemoryClient.connect(
            isolated.bus.nats_url, tenant="acme", agent="ada", shards=isolated.shards
        ) as client:
            for i, shape in enumerate(SHAPES):
                key = f"user:u1:m{i}"
                with tracer.start_as_current_span("agent turn"):
                    if shape.how == "put":
                        receipt = await client.put(key, shape.value, wait="applied")
                    elif shape.how == "patch":
                        await client.put(key, {"city": "Basel"}, wait="applied")
                        receipt = await client.patch(key, shape.value, wait="applied")
                    else:
                        receipt = await client.put(
                            key, {"n": i}, content=shape.value, wait="applied"
                        )
                # A map with keys that are not strings is refused whole (the limit
                # map_keys): its reason must not carry the secret either.
                expected = "rejected" if _odd_keys(shape.value) else "applied"
                assert receipt.status == expected, (shape.label, receipt)
                # what an agent or a service might log about it
                log.warning("wrote %s = %r", key, shape.value)
            stored = {i: await client.get(f"user:u1:m{i}") for i in range(len(SHAPES))}
            assert sum(item is None for item in stored.values()) == 3  # the refused ones
            await client.recall("Basel", owners=["user:u1"])
            for _ in range(100):
                trail = await client.audit()
                if sum(e.kind == "write" for e in trail) >= len(SHAPES) + sum(
                    s.how == "patch" for s in SHAPES
                ):
                    break
                await asyncio.sleep(0.1)
    finally:
        await services.stop()

    audit_text = msgspec.json.encode(trail).decode()
    log_text = "\n".join(r.getMessage() for r in caplog.records)
    span_text = "\n".join(
        f"{s.name} {dict(s.attributes or {})} {[e.attributes for e in s.events]}"
        for s in exporter.get_finished_spans()
    )
    assert exporter.get_finished_spans(), "no span was exported: the trace check saw nothing"
    assert "Basel" in audit_text  # ordinary text is kept: the redaction is targeted
    leaks = []
    for i, shape in enumerate(SHAPES):
        for where, text in (("audit", audit_text), ("logs", log_text), ("traces", span_text)):
            if shape.secret in text:
                leaks.append(f"{shape.label} in {where}")
        item = stored[i]
        if item is None:
            continue
        # the memory keeps what the agent wrote
        assert shape.secret in msgspec.json.encode(item.value).decode() + item.content
        if shape.how != "content" and shape.secret in item.content:
            leaks.append(f"{shape.label} in derived content")
    assert not leaks, leaks


def _odd_keys(value: object) -> bool:
    if isinstance(value, dict):
        return any(not isinstance(k, str) or _odd_keys(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_odd_keys(v) for v in value)
    return False
