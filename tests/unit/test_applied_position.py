"""The tenant's own applied position (``WorkerService._note_applied``) is written only when
the shard's position, recorded by the commit, does not already cover the message: a read
waits on whichever is further (``query.consistency``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from zeromem.store.keys import redis_keys
from zeromem.worker.service import WorkerService


class _Later:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def later(self, *command: Any) -> None:
        self.sent.append(command)


def _worker(shard_at: int) -> tuple[Any, _Later]:
    later = _Later()
    applier = SimpleNamespace(shard_applied=lambda shard: shard_at)
    return SimpleNamespace(applier=applier, _coalesced=later), later


def test_covered_by_the_shard_position_nothing_is_written() -> None:
    worker, later = _worker(shard_at=120)
    WorkerService._note_applied(worker, "acme", 3, 120)
    WorkerService._note_applied(worker, "acme", 3, 90)
    assert later.sent == []


def test_ahead_of_the_shard_position_the_tenants_own_is_written() -> None:
    """Another tenant's earlier message still waits for its turn: the shard's position
    stays behind it, and only the tenant's own says this message is applied."""
    worker, later = _worker(shard_at=120)
    WorkerService._note_applied(worker, "acme", 3, 121)
    assert later.sent == [("SET", redis_keys("acme").applied(3), 121)]
