"""What the worker publishes stays under the broker's payload limit, and is stored: a
publication whose acknowledgement fails or never comes is sent again."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import nats.errors
import nats.js.errors

from zeromem.lifecycle.redact import Redactor
from zeromem.limits import Limits
from zeromem.telemetry import Telemetry
from zeromem.worker.applier import WorkerStats
from zeromem.worker.outbox import RESEND_DELAY_S, Outbox, fit


def test_fit_keeps_one_message_when_it_fits_and_halves_until_each_part_does() -> None:
    def encode(part: list[bytes]) -> bytes:
        return b"".join(part)

    items = [bytes([i]) * 100 for i in range(10)]
    assert fit(items, encode, 10_000) == [encode(items)]
    parts = fit(items, encode, 250)
    assert b"".join(parts) == encode(items)  # nothing lost, order kept
    assert all(len(p) <= 250 for p in parts)
    assert fit([b"x" * 500], encode, 250) == [b"x" * 500]  # alone and too big: as it is


def test_chunks_cut_by_count_and_by_size_in_order() -> None:
    from zeromem.worker.outbox import chunks

    items = [bytes([i]) * 10 for i in range(7)]
    assert chunks(items, 1000, 3) == [items[0:3], items[3:6], items[6:7]]
    assert chunks(items, 25, 100) == [items[0:2], items[2:4], items[4:6], items[6:7]]
    assert chunks([b"x" * 50], 25, 100) == [[b"x" * 50]]
    assert chunks([], 25, 100) == []


class FakeJetStream:
    """Publishes nothing: each publish_async hands out a future the test settles."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []
        self.acks: list[asyncio.Future[object]] = []

    async def publish_async(self, subject: str, data: bytes, headers: dict[str, str]) -> object:
        self.sent.append((subject, data, headers))
        self.acks.append(asyncio.get_running_loop().create_future())
        return self.acks[-1]


def outbox(js: FakeJetStream, ack_wait_s: float = 30.0) -> Outbox:
    nc = SimpleNamespace(max_payload=1024 * 1024, jetstream=lambda: js)
    return Outbox(
        nc,  # type: ignore[arg-type]
        limits=Limits(message_attempts=2),
        ack_wait_s=ack_wait_s,
        redactor=Redactor(),
        telemetry=Telemetry(),
        stats=WorkerStats(),
    )


async def test_a_publication_is_confirmed_once_stored_and_sent_again_when_its_ack_fails() -> None:
    js = FakeJetStream()
    box = outbox(js)
    pubs = [await box._publish_stored("audit.a", b"1", {"Nats-Msg-Id": "x"})]
    assert not await box.confirm(pubs)  # not acknowledged yet: waits, sends nothing more
    assert len(js.sent) == 1
    js.acks[0].set_exception(nats.errors.TimeoutError())  # the broker did not answer
    pubs[0].sent_at -= RESEND_DELAY_S
    assert not await box.confirm(pubs)
    assert js.sent[1] == js.sent[0]  # the same message, the same id: stored once
    js.acks[1].set_result(object())
    assert await box.confirm(pubs) and pubs == []


async def test_a_publication_whose_ack_never_comes_is_sent_again_after_the_ack_wait() -> None:
    js = FakeJetStream()
    box = outbox(js, ack_wait_s=5.0)
    pubs = [await box._publish_stored("dead.a", b"1", {})]
    pubs[0].sent_at -= 6.0  # lost in a broker restart
    assert not await box.confirm(pubs)
    assert len(js.sent) == 2 and js.acks[0].cancelled()


async def test_each_resend_of_a_late_publication_waits_twice_as_long() -> None:
    """A broker that is slow, not gone: resending every late message at once doubles what
    it must take in, and keeps its answers late."""
    js = FakeJetStream()
    box = outbox(js, ack_wait_s=5.0)
    pubs = [await box._publish_stored("dead.a", b"1" * 1000, {"Nats-Msg-Id": "x"})]
    for wait in (5.0, 10.0, 20.0, 40.0, 80.0, 80.0):  # doubled, up to 16 times the first
        pubs[0].sent_at -= wait - 0.5  # not yet
        assert not await box.confirm(pubs)
        sent = len(js.sent)
        pubs[0].sent_at -= 1.0  # past it: sent again
        assert not await box.confirm(pubs) and len(js.sent) == sent + 1
    assert box.stats.resent == 6 and pubs[0].resends == 6
    js.acks[-1].set_result(object())
    assert await box.confirm(pubs)


async def test_a_publication_the_broker_keeps_refusing_is_given_up_after_bounded_attempts() -> None:
    js = FakeJetStream()
    box = outbox(js)
    pubs = [await box._publish_stored("audit.a", b"1", {})]
    for n in range(2):
        js.acks[n].set_exception(
            nats.js.errors.BadRequestError(code=400, description="message size exceeds maximum")
        )
        pubs[0].sent_at -= RESEND_DELAY_S
        confirmed = await box.confirm(pubs)
    assert confirmed and len(js.sent) == 2  # sent twice (message_attempts), then dropped


async def test_a_long_list_is_not_looked_through_again_at_each_check() -> None:
    """The loop asks after a window's publications every time it acknowledges; a backlog
    of refused messages holds thousands (each with its dead letter). The stored head is
    dropped as found, and the look stops at the first one still awaited."""
    import time

    js = FakeJetStream()
    box = outbox(js)
    pubs = [await box._publish_stored("dead.a", b"1", {}) for _ in range(20_000)]
    for ack in js.acks[:5_000]:
        ack.set_result(object())
    assert not await box.confirm(pubs)
    assert len(pubs) == 15_000  # the stored head, dropped
    started = time.perf_counter()
    for _ in range(1_000):
        assert not await box.confirm(pubs)  # the head still awaited: one look each
    assert time.perf_counter() - started < 0.5
    # Later ones stored first (acknowledgements come in any order): still awaited.
    for ack in js.acks[6_000:]:
        ack.set_result(object())
    assert not await box.confirm(pubs) and len(pubs) == 15_000
    for ack in js.acks[5_000:6_000]:
        ack.set_result(object())
    assert await box.confirm(pubs) and pubs == []
    assert len(js.sent) == 20_000  # nothing sent again
