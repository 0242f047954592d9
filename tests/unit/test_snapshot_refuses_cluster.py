"""`zeromem snapshot` takes Redis's copy of one server: on a Redis Cluster that copy would
miss every other master's keys, so it is refused before anything is connected."""

from __future__ import annotations

import pytest

from zeromem.embedded.snapshot import SnapshotRefusedError, take_snapshot
from zeromem.settings import Settings


async def test_a_redis_cluster_is_refused_with_what_to_do_instead() -> None:
    settings = Settings.from_env({}).with_(store={"redis_cluster": True})
    with pytest.raises(SnapshotRefusedError, match="--whole-log"):
        await take_snapshot(settings)
