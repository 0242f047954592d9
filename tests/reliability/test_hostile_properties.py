"""Property: no hostile message stalls a shard, a service or another tenant.

For each category of ``hostile_messages`` Hypothesis generates messages; each goes to a
real deployment (two worker processes, a read-service process), and right after it a
canary of another tenant checks the deployment still serves: a put on the hostile
message's shard must be applied within 2 s, and a get must answer within 100 ms (the
long version, ``make reliability``; the short one in ``make test`` allows a noisy shared
machine some margin). A hostile request must be answered (refused with a reason, or
served), never left without a reply. At the end every shard's backlog must drain, and the
dead letters are matched to the hostile messages that caused them.

Per category the run prints: messages tried, dead-lettered with a reason (requests:
refused with a reason), shards stalled, and the largest canary delays.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.strategies import SearchStrategy

from tests.reliability.cluster import Cluster, long_mode, scale
from tests.reliability.history import dead_letters, summarize, wait_idle
from tests.reliability.hostile_messages import CATEGORIES, Hostile
from zeromem import naming
from zeromem.auth.authority import Authority
from zeromem.bus import connect_nats
from zeromem.schemas import DeadLetter
from zeromem.sdk import MemoryClient

T = TypeVar("T")

# The thresholds, held in the long version; the short one runs while other suites
# share the machine's two cores.
WRITE_LIMIT_S = 2.0 if long_mode() else 5.0
READ_LIMIT_S = 0.1 if long_mode() else 1.0
EXAMPLES = int(scale(12, 250))  # per category


class LoopThread:
    """An event loop in a thread of its own: Hypothesis drives the test synchronously and
    each example runs its coroutines here."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@dataclass
class Tally:
    tried: int = 0
    stalled: int = 0  # canary writes not applied in time
    slow_reads: int = 0  # canary reads not answered in time
    unanswered: int = 0  # hostile requests left without a reply
    refused: int = 0  # hostile requests answered with an error that says why
    max_write_s: float = 0.0
    max_read_s: float = 0.0
    sequences: set[int] = field(default_factory=set)  # hostile commands' stream positions


class Probe:
    """Publishes hostile messages and runs the canaries (tenant ``canary``)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.shards = cluster.settings.shards
        self.canary_owner = {}
        for i in range(10_000):
            shard = naming.shard_for("canary", f"user:c{i}", self.shards)
            self.canary_owner.setdefault(shard, f"user:c{i}")
            if len(self.canary_owner) == self.shards:
                break
        self.count = 0

    async def start(self) -> Probe:
        url = self.cluster.settings.bus.nats_url
        self.nc = await connect_nats(self.cluster.settings, "hostile-probe")  # the operator's
        self.js = self.nc.jetstream()
        self.canary = await MemoryClient.connect(
            url, tenant="canary", agent="canary", shards=self.shards, timeout=WRITE_LIMIT_S
        )
        return self

    async def close(self) -> None:
        await self.canary.close()
        await self.nc.close()

    async def send(self, hostile: Hostile, tally: Tally) -> None:
        tally.tried += 1
        subject = hostile.subject(self.shards)
        if hostile.read:
            try:
                reply = await self.nc.request(subject, hostile.payload, timeout=5.0)
            except Exception:
                tally.unanswered += 1
            else:
                if reply.headers and naming.ERROR_HEADER in reply.headers:
                    tally.refused += 1
            shard = self.count % self.shards
        else:
            ack = await self.js.publish(subject, hostile.payload, headers=hostile.headers or None)
            tally.sequences.add(ack.seq)
            shard = naming.shard_for("hostile", hostile.owner, self.shards)
        self.count += 1
        key = f"{self.canary_owner[shard]}:alive"
        started = time.monotonic()
        try:
            receipt = await self.canary.put(key, self.count, wait="applied")
            applied = receipt.status == "applied"
        except Exception:
            applied = False
        took = time.monotonic() - started
        tally.max_write_s = max(tally.max_write_s, took)
        if not applied or took > WRITE_LIMIT_S:
            tally.stalled += 1
        started = time.monotonic()
        try:
            await self.canary.get(key)
            took = time.monotonic() - started
        except Exception:
            took = float("inf")
        tally.max_read_s = max(tally.max_read_s, took)
        if took > READ_LIMIT_S:
            tally.slow_reads += 1
        self.cluster.assert_processes_alive()

    async def dead_letters(self) -> dict[int, list[DeadLetter]]:
        """The dead letters, by the stream position of the message they came from."""
        letters: dict[int, list[DeadLetter]] = {}
        for letter in await dead_letters(self.nc):
            letters.setdefault(letter.stream_seq, []).append(letter)
        return letters


def test_no_hostile_message_stalls_a_shard_a_service_or_another_tenant(
    tmp_path: Path, authority: Authority
) -> None:
    runner = LoopThread()
    cluster = Cluster(tmp_path / "cluster", authority)
    tallies = {category: Tally() for category in CATEGORIES}
    try:
        runner.run(cluster.start())
        runner.run(cluster.start_services(workers=2, serve=True))
        probe = runner.run(Probe(cluster).start())
        for category, strategy in CATEGORIES.items():
            _send_each(runner, probe, strategy, tallies[category])
        stalled_at_end = runner.run(_stalled_shards(cluster))
        letters = runner.run(probe.dead_letters())
        runner.run(probe.close())
    finally:
        cluster.stop()
        runner.stop()

    for category, tally in tallies.items():
        if category == "hostile requests":
            detail = (
                f"refused_with_reason={tally.refused} "
                f"answered={tally.tried - tally.refused - tally.unanswered} "
                f"unanswered={tally.unanswered}"
            )
        else:
            dead = sum(
                1
                for seq in tally.sequences
                if any(letter.reason for letter in letters.get(seq, ()))
            )
            detail = f"dead_lettered_with_reason={dead} accepted={tally.tried - dead}"
        summarize(
            f"[reliability] hostile {category}: tried={tally.tried} {detail} "
            f"shards_stalled={tally.stalled} "
            f"max_canary_write_ms={tally.max_write_s * 1000:.0f} "
            f"max_canary_read_ms={tally.max_read_s * 1000:.0f} "
            f"slow_canary_reads={tally.slow_reads}"
        )
    summarize(
        f"[reliability] hostile, after every category: shards with a backlog left="
        f"{stalled_at_end} (write limit {WRITE_LIMIT_S:g}s, read limit "
        f"{READ_LIMIT_S * 1000:.0f}ms)"
    )
    assert stalled_at_end == 0
    for category, tally in tallies.items():
        assert tally.stalled == 0, f"{category}: {tally.stalled} canary writes late or lost"
        assert tally.slow_reads == 0, f"{category}: {tally.slow_reads} canary reads late"
        assert tally.unanswered == 0, f"{category}: {tally.unanswered} requests unanswered"
    # Every command category produced messages the contract refuses, each with a reason.
    for category in CATEGORIES:
        if category != "hostile requests":
            assert any(letters.get(seq) for seq in tallies[category].sequences), category


def _send_each(
    runner: LoopThread, probe: Probe, strategy: SearchStrategy[Hostile], tally: Tally
) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def send(hostile: Hostile) -> None:
        runner.run(probe.send(hostile, tally))

    send()


async def _stalled_shards(cluster: Cluster) -> int:
    nc = await connect_nats(cluster.settings, "hostile-idle")
    try:
        await wait_idle(nc, cluster.settings.shards, limit_s=30.0)
        return 0
    except TimeoutError as exc:
        return str(exc).count(":") - 1  # shards named in the message
    finally:
        await nc.close()
