"""The worker's throttle notices (``worker.throttle``) and the SDK's model of the quota
they describe (``sdk.pacing``), without servers: what a notice says, how often one is
sent, and how long a client then holds a shard's commands back."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from zeromem import naming
from zeromem.quota import RateQuota
from zeromem.schemas import Throttle, decode, encode
from zeromem.sdk.pacing import MAX_PAUSE_S, ShardPacer
from zeromem.worker.throttle import NOTICE_EVERY_S, ThrottleNotices


@dataclass
class _Published:
    sent: list[tuple[str, bytes]] = field(default_factory=list)

    async def publish(self, subject: str, data: bytes) -> None:
        self.sent.append((subject, data))

    async def subscribe(self, subject: str, cb: Any) -> object:
        return object()


@dataclass
class _Msg:
    data: bytes


async def test_a_refused_agent_is_told_the_rate_and_when_its_message_would_pass() -> None:
    quota = RateQuota(10.0)
    nc = _Published()
    notices = ThrottleNotices(nc, quota, 1.0)  # type: ignore[arg-type]
    subject = naming.command_subject("acme", 3, "planner")
    now = time.monotonic()
    assert quota.take((3, "acme"), 10, now)  # the bucket's second spent
    assert not quota.take((3, "acme"), 4, now)
    await notices.refused(3, subject, 4)
    [(to, data)] = nc.sent
    assert to == naming.throttle_subject("acme", "planner") == "_INBOX.zm.acme.planner.throttle"
    notice = decode(data, Throttle)
    assert (notice.tenant, notice.shard, notice.limit, notice.rate) == (
        "acme",
        3,
        "tenant_commands_per_s",
        10.0,
    )
    assert notice.refused == 4 and 0.35 <= notice.retry_after_s <= 0.4  # 4 tokens at 10/s
    # One notice per agent and shard per NOTICE_EVERY_S; another agent or shard its own.
    await notices.refused(3, subject, 1)
    await notices.refused(4, naming.command_subject("acme", 4, "planner"), 1)
    await notices.refused(3, naming.command_subject("acme", 3, "critic"), 1)
    assert len(nc.sent) == 3
    await asyncio.sleep(NOTICE_EVERY_S)
    await notices.refused(3, subject, 1)
    assert len(nc.sent) == 4 and notices.sent == 4


def test_wait_for_takes_nothing() -> None:
    quota = RateQuota(5.0)
    assert quota.wait_for("k") == 0.0  # never seen: full
    now = time.monotonic()
    assert quota.take("k", 5, now)
    assert quota.wait_for("k", 1, now) == pytest.approx(0.2)
    assert quota.wait_for("k", 50, now) == pytest.approx(
        1.0
    )  # a big message waits for a full bucket
    assert quota.take("k", 1, now + 0.21)
    assert RateQuota(0).wait_for("k", 9) == 0.0


async def test_after_a_notice_the_shard_is_paced_at_the_quota_rate() -> None:
    pacer = ShardPacer(_Published(), "_INBOX.zm.acme.planner.throttle")  # type: ignore[arg-type]
    await pacer.start()
    # Nothing said: nothing waits.
    started = time.monotonic()
    await pacer.wait(3, 100)
    assert time.monotonic() - started < 0.01 and pacer.affordable(3, 100) == 100
    # A message of 2 would pass in 0.1 s at 20/s: the bucket holds 0 now.
    notice = Throttle(tenant="acme", shard=3, limit="x", rate=20.0, retry_after_s=0.1, refused=2)
    await pacer._on_notice(_Msg(encode(notice)))  # type: ignore[arg-type]
    assert pacer.notices == 1 and 0.0 < pacer.paused(3) <= 0.05
    assert pacer.affordable(3, 10) == 1  # at least one
    started = time.monotonic()
    await pacer.wait(3, 4)  # 4 commands at 20/s from an empty bucket: 0.2 s
    assert 0.15 <= time.monotonic() - started < 0.4
    assert pacer.affordable(3, 4) == 4 and pacer.affordable(3, 40) < 40
    pacer.spent(3, 4)
    assert pacer.paused(3) > 0.0
    # Other shards are not held back.
    assert pacer.paused(4) == 0.0 and pacer.affordable(4, 99) == 99


@pytest.mark.parametrize(
    "rate,after",
    [(float("nan"), 0.1), (20.0, float("nan")), (0.0, 0.1), (20.0, -1.0), (float("inf"), 1.0)],
)
async def test_a_notice_that_makes_no_sense_holds_nothing_back(rate: float, after: float) -> None:
    pacer = ShardPacer(_Published(), "t")  # type: ignore[arg-type]
    notice = Throttle(tenant="a", shard=1, limit="x", rate=rate, retry_after_s=after, refused=1)
    await pacer._on_notice(_Msg(encode(notice)))  # type: ignore[arg-type]
    await pacer._on_notice(_Msg(b"\xc1 not msgpack"))  # type: ignore[arg-type]
    assert pacer.paused(1) == 0.0


async def test_a_huge_pause_is_bounded() -> None:
    pacer = ShardPacer(_Published(), "t")  # type: ignore[arg-type]
    notice = Throttle(tenant="a", shard=1, limit="x", rate=1.0, retry_after_s=1e9, refused=1)
    await pacer._on_notice(_Msg(encode(notice)))  # type: ignore[arg-type]
    assert pacer.paused(1) <= MAX_PAUSE_S + 1.0
