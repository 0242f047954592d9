"""Memories with their own times: the clock-skew bound on agents' subjects, the import
subject, and ``zeromem import`` (idempotent, resumable) through the real stack."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from zeromem.schemas import Put
from zeromem.sdk import MemoryClient
from zeromem.sdk.importer import ImportLineError, import_file
from zeromem.settings import Settings

DAY = 86_400.0


async def test_an_agent_may_not_backdate_beyond_the_skew_bound(client: MemoryClient) -> None:
    old = time.time() - 30 * DAY
    refused = await client.put("conv:c1:t1", "Mara: hi", created_at=old, wait="applied")
    assert refused.status == "rejected" and refused.reason.startswith("clock_skew")
    assert "import" in refused.reason
    near = time.time() - 60
    ok = await client.put("conv:c1:t2", "Mara: hi", created_at=near, wait="applied")
    assert ok.status == "applied" and ok.result.item.created_at == near
    ahead = await client.put("conv:c1:t3", "x", created_at=time.time() + DAY, wait="applied")
    assert ahead.status == "rejected" and "after" in ahead.reason


@pytest.fixture
async def importer(running: Settings, tenant: str) -> AsyncIterator[MemoryClient]:
    """A client with the operator's credential: an agent's may not publish on the import
    subjects (its permissions name only its own command subjects), so only the
    operator's tools backdate."""
    async with await MemoryClient.connect(
        running.bus.nats_url,
        tenant=tenant,
        agent="importer",
        shards=running.shards,
        settings=running,
    ) as c:
        yield c


async def test_the_import_subject_takes_original_times(importer: MemoryClient) -> None:
    created, updated = time.time() - 400 * DAY, time.time() - 399 * DAY
    command = Put(
        id="imp-1",
        tenant=importer.tenant,
        agent="importer",
        ts=created,
        key="conv:c2:t1",
        value="Mara: I adopted a beagle",
        created_at=created,
        updated_at=updated,
    )
    receipt = await importer.send(command, "applied", importing=True)
    assert receipt.status == "applied"
    item = await importer.get("conv:c2:t1")
    assert item is not None and (item.created_at, item.updated_at) == (created, updated)
    reply = await importer.recall("beagle", owners=["conv:c2"])
    assert reply.memories[0].updated_at == updated
    assert reply.context.startswith("[" + time.strftime("%Y-%m-%d", time.gmtime(updated)))
    backwards = Put(
        id="imp-2",
        tenant=importer.tenant,
        agent="importer",
        ts=created,
        key="conv:c2:t2",
        value="x",
        created_at=updated,
        updated_at=created,
    )
    refused = await importer.send(backwards, "applied", importing=True)
    assert refused.status == "rejected" and "before created_at" in refused.reason


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


async def test_zeromem_import_is_idempotent_and_resumes(
    importer: MemoryClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zeromem.sdk.importer as importer_module

    monkeypatch.setattr(importer_module, "CHECKPOINT_LINES", 10)
    rows: list[dict[str, object]] = [
        {
            "key": f"conv:c3:t{i:03d}",
            "value": f"Mara: turn number {i} about gardening",
            "type": "message",
            "created_at": f"2023-03-{1 + i % 28:02d}T18:00:00Z",
        }
        for i in range(35)
    ]
    rows.insert(20, {"key": "conv:c3:bad", "colour": "blue"})
    path = tmp_path / "turns.jsonl"
    _write(path, rows)
    state = tmp_path / "state"
    with pytest.raises(ImportLineError) as failure:
        await import_file(importer, path, state_dir=state)
    assert failure.value.line == 21 and "colour" in failure.value.reason
    del rows[20]
    _write(path, rows)  # fixed: a changed file starts over, sending duplicates only
    report = await import_file(importer, path, state_dir=state)
    assert report.lines == 35 and report.applied >= 1 and not report.rejected
    page = await importer.list("conv:c3:", limit=100)
    assert len(page.keys) == 35
    item = await importer.get("conv:c3:t004")
    assert item is not None and item.version == 1
    assert time.gmtime(item.created_at)[:3] == (2023, 3, 5)
    again = await import_file(importer, path, state_dir=state)  # done: nothing left to send
    assert again.resumed_at == 35 and again.sent == 0
    rerun = await import_file(importer, path, state_dir=state, restart=True)  # all duplicates
    assert rerun.sent == 35
    await importer.flush()
    item = await importer.get("conv:c3:t004")
    assert item is not None and item.version == 1  # nothing applied twice
