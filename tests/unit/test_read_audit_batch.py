"""Recall's read audit records go out in batches (``query.audit_batch``): none lost, none
held longer than the delay, one tenant's never in another's batch."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from zeromem import naming
from zeromem.query.audit_batch import ReadAuditBatcher
from zeromem.schemas import AuditBatch, decode


class Published:
    """A publish that keeps what it was given, decoded, with when it was called."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, AuditBatch, float]] = []

    async def __call__(self, subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        assert headers is None
        self.batches.append((subject, decode(data, AuditBatch), time.monotonic()))


async def test_records_within_the_delay_share_one_publish_in_order() -> None:
    published = Published()
    batcher = ReadAuditBatcher(published, "recall", max_delay_s=0.05)
    started = time.monotonic()
    for i in range(5):
        batcher.record("t1", "agent", [f"user:u1:m{i}"], {"query_terms": i})
    assert published.batches == [] and batcher.pending == 5
    await asyncio.sleep(0.2)
    ((subject, batch, at),) = published.batches
    assert subject == naming.audit_read_subject("t1", "recall")
    assert [e.keys for e in batch.entries] == [(f"user:u1:m{i}",) for i in range(5)]
    assert [e.detail for e in batch.entries] == [{"query_terms": i} for i in range(5)]
    assert {(e.kind, e.op, e.agent, e.tenant) for e in batch.entries} == {
        ("read", "recall", "agent", "t1")
    }
    assert at - started < 0.15  # sent once the delay passed, not later
    assert batcher.pending == 0


async def test_a_full_batch_goes_at_once_and_tenants_never_share_one() -> None:
    published = Published()
    batcher = ReadAuditBatcher(published, "recall", max_entries=3, max_delay_s=10.0)
    for i in range(7):
        batcher.record("t1", "a", [f"user:u:m{i}"], {})
    batcher.record("t2", "b", ["user:v:m0"], {})
    await asyncio.sleep(0)  # the publishes' tasks run
    assert [len(b.entries) for _, b, _ in published.batches] == [3, 3]
    assert batcher.pending == 2  # one of t1's, one of t2's, waiting for the (long) delay
    await batcher.flush()
    by_subject: dict[str, list[str]] = {}
    for subject, batch, _ in published.batches:
        by_subject.setdefault(subject, []).extend(k for e in batch.entries for k in e.keys)
    assert by_subject == {
        naming.audit_read_subject("t1", "recall"): [f"user:u:m{i}" for i in range(7)],
        naming.audit_read_subject("t2", "recall"): ["user:v:m0"],
    }
    assert batcher.pending == 0


async def test_a_failed_publish_is_logged_and_the_next_batch_still_goes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    published = Published()
    calls = 0

    async def flaky(subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("NATS is down")
        await published(subject, data, headers)

    batcher = ReadAuditBatcher(flaky, "recall", max_delay_s=0.01)
    with caplog.at_level(logging.ERROR, logger="zeromem.query.audit_batch"):
        batcher.record("t1", "a", ["user:u:m0"], {})
        await batcher.flush()
        batcher.record("t1", "a", ["user:u:m1"], {})
        await batcher.flush()
    assert "could not record 1 reads of tenant 't1'" in caplog.text
    assert [e.keys for _, b, _ in published.batches for e in b.entries] == [("user:u:m1",)]
