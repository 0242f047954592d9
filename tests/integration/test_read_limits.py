"""Read-side limits: a request that would cost the service (or another tenant) dearly is
refused at admission with a reason naming the limit; the service goes on answering."""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
import pytest
from nats.errors import NoRespondersError
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.harness import ServiceSet
from zeromem import naming
from zeromem.bus import connect_nats
from zeromem.limits import Limits
from zeromem.schemas import ErrorReply, decode
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.telemetry import Telemetry
from zeromem.telemetry.reading import metric_points


async def request(
    settings: Settings,
    tenant: str,
    kind: str,
    payload: dict[str, object],
    agent: str = "tester",
    took: list[float] | None = None,
) -> tuple[bool, object]:
    """(refused, reply or ErrorReply) for a raw request, on ``agent``'s query subject
    (sent as the operator, who may use any). ``took``: gets the seconds the answered
    attempt took (not the connection's set-up, nor the retries below)."""
    nc = await connect_nats(settings, "read-limits-test")
    try:
        # Right after the read services start, a request has once found no responder
        # though they had flushed their subscriptions (here, and in test_ordering; cause
        # not found): retried for a moment, as a client would. Refusals are not retried.
        for attempt in range(50):
            try:
                started = time.monotonic()
                msg = await nc.request(
                    naming.query_subject(tenant, agent, kind),
                    msgspec.msgpack.encode(payload),
                    timeout=5.0,
                )
                if took is not None:
                    took.append(time.monotonic() - started)
                break
            except NoRespondersError:
                if attempt == 49:
                    raise
                await asyncio.sleep(0.1)
    finally:
        await nc.close()
    if msg.headers and naming.ERROR_HEADER in msg.headers:
        return True, decode(msg.data, ErrorReply)
    return False, msgspec.msgpack.decode(msg.data)


async def test_a_stats_request_over_a_thousand_years_is_refused_at_once(running: Settings) -> None:
    started = time.monotonic()
    refused, reply = await request(
        running, "acme", "stats", {"tenant": "acme", "since": 1.0, "until": 1000 * 365.25 * 86400}
    )
    assert refused and "stats_range" in reply.error, reply  # type: ignore[attr-defined]
    assert time.monotonic() - started < 1.0


async def test_the_default_stats_request_reads_only_the_retained_days(
    running: Settings, tenant: str
) -> None:
    # The SDK's default `since` is 0 (open): the ledger keeps 35 days, so no more are read.
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, shards=running.shards
    ) as client:
        started = time.monotonic()
        reply = await client.stats()
        assert reply.rows == ()
        assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("reader", ["r" * 200_000, "a|b", "tab\there", "new\nline", ""])
async def test_a_reader_outside_its_bounds_is_refused(running: Settings, reader: str) -> None:
    refused, reply = await request(
        running,
        "acme",
        "recall",
        {"tenant": "acme", "reader": reader, "query": "x", "scope": {"owners": ["user:u1"]}},
    )
    if reader == "":  # anonymous is allowed
        assert not refused, reply
        return
    assert refused and "reader" in reply.error, reply  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kind,payload",
    [
        ("stats", {"since": float("nan")}),
        ("stats", {"until": float("inf")}),
        ("recall", {"query": "x", "scope": {"owners": ["user:u1"], "since": float("nan")}}),
        ("recall", {"query": "x", "scope": {"owners": ["user:u1"], "until": float("-inf")}}),
    ],
)
async def test_non_finite_numbers_are_a_bad_request_without_a_traceback(
    running: Settings, kind: str, payload: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    refused, reply = await request(running, "acme", kind, {"tenant": "acme", **payload})
    assert refused and reply.code == "bad_request" and "non_finite" in reply.error, reply  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_recall_owners_query_length_and_terms_are_capped(running: Settings) -> None:
    owners = [f"user:o{i}" for i in range(2000)]
    refused, reply = await request(
        running, "acme", "recall", {"tenant": "acme", "query": "x", "scope": {"owners": owners}}
    )
    assert refused and "recall_owners" in reply.error, reply  # type: ignore[attr-defined]
    refused, reply = await request(
        running,
        "acme",
        "recall",
        {"tenant": "acme", "query": "x" * 100_000, "scope": {"owners": ["user:u1"]}},
    )
    assert refused and "query_chars" in reply.error, reply  # type: ignore[attr-defined]
    words = " ".join(f"w{i}" for i in range(300))  # within query_chars, over query_terms
    refused, reply = await request(
        running,
        "acme",
        "recall",
        {"tenant": "acme", "query": words, "scope": {"owners": ["user:u1"]}},
    )
    assert refused and "query_terms" in reply.error, reply  # type: ignore[attr-defined]


async def test_unique_readers_never_grow_the_metrics_without_bound(isolated: Settings) -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    services = await ServiceSet.start(isolated, telemetry=telemetry)
    try:
        limit = services.readers[0].recall.telemetry.max_agents
        for i in range(limit + 40):
            refused, reply = await request(
                isolated,
                "acme",
                "recall",
                {"tenant": "acme", "query": "x", "scope": {"owners": ["user:u1"]}},
                agent=f"agent-{i}",
            )
            assert not refused, reply
        await asyncio.sleep(0.1)
        points = metric_points(reader).get("zeromem.recall.requests", [])
        agents = {attrs.get("zeromem.agent") for attrs, _ in points}
        assert len(agents) <= limit + 1, len(agents)  # the first ones, then one overflow value
    finally:
        await services.stop()


async def test_a_client_looping_on_refusals_gets_them_late_and_others_go_on(
    isolated: Settings,
) -> None:
    settings = isolated.with_(limits=Limits(tenant_refusals_per_s=2, refusal_delay_s=0.5))
    services = await ServiceSet.start(settings)
    try:
        huge = {"tenant": "loud", "query": "x", "scope": {"owners": [f"u:{i}" for i in range(50)]}}
        took: list[float] = []  # as answered: a no-responder retry is not the service's
        for _ in range(8):
            refused, reply = await request(settings, "loud", "recall", huge, took=took)
            assert refused and "recall_owners" in reply.error, reply  # type: ignore[attr-defined]
        # Two at once (its rate's burst), the third late; then the loop goes no faster
        # than the rate refills (2/s) plus one late refusal per delay: ~1.5 s for eight.
        assert max(took[:2]) < 0.4 and took[2] >= 0.5 and sum(took) >= 1.2, took
        # Meanwhile (its refusals waiting) another tenant is answered at once.
        pending = [asyncio.create_task(request(settings, "loud", "recall", huge)) for _ in range(4)]
        await asyncio.sleep(0.05)
        calm: list[float] = []
        refused, _ = await request(
            settings,
            "calm",
            "recall",
            {"tenant": "calm", "query": "x", "scope": {"owners": ["u:1"]}},
            took=calm,
        )
        assert not refused and calm[0] < 0.4, calm
        assert all(r[0] for r in await asyncio.gather(*pending))
    finally:
        await services.stop()


async def test_a_reader_with_a_bar_cannot_break_its_tenants_stats(
    running: Settings, tenant: str
) -> None:
    await request(
        running,
        tenant,
        "recall",
        {"tenant": tenant, "reader": "x|y", "query": "q", "scope": {"owners": ["user:u1"]}},
    )
    async with await MemoryClient.connect(
        running.bus.nats_url, tenant=tenant, agent="ok", shards=running.shards
    ) as client:
        await client.recall("q", owners=["user:u1"])
        reply = await client.stats(since=time.time() - 3600)
        assert all("|" not in row.agent for row in reply.rows)


@pytest.mark.parametrize("since,until", [(1e300, 1e300), (0.0, 1e300), (-5.0, 0.0), (5e9, 1e9)])
async def test_stats_bounds_far_out_or_backwards_are_answered(
    running: Settings, since: float, until: float
) -> None:
    refused, reply = await request(
        running, "acme", "stats", {"tenant": "acme", "since": since, "until": until}
    )
    assert refused or reply == {} or "rows" in reply, reply  # type: ignore[operator]


async def test_a_read_nobody_serves_is_told_from_one_left_unanswered(isolated: Settings) -> None:
    # Both said "no answer from the zeromem get service within 5.0s": a read service
    # resubscribing after a NATS restart looked like one that received a get and stalled.
    from zeromem.sdk import NoResponderError

    async with await MemoryClient.connect(
        isolated.bus.nats_url, tenant="t-nobody", agent="a", shards=isolated.shards, timeout=5.0
    ) as client:
        started = time.monotonic()
        with pytest.raises(NoResponderError, match="no zeromem get service is subscribed"):
            await client.get("user:x:k")
        assert time.monotonic() - started < 2.0  # at once, not after the timeout


async def test_a_read_service_back_within_a_moment_answers(isolated: Settings) -> None:
    """No responder for a moment (a read service restarting or resubscribing after a
    reconnect): the SDK asks again for up to 0.75 s before it says so."""
    from tests.harness import ServiceSet

    services = await ServiceSet.start(isolated)
    try:
        responder = services.readers[0].responder
        async with await MemoryClient.connect(
            isolated.bus.nats_url, tenant="t-back", agent="a", shards=isolated.shards
        ) as client:
            await responder.stop()  # unsubscribed: nobody serves gets now
            read = asyncio.create_task(client.get("user:x:k"))
            await asyncio.sleep(0.2)
            assert not read.done()
            await responder.start()
            assert await asyncio.wait_for(read, 2.0) is None
    finally:
        await services.stop()


async def test_a_strategy_is_checked_as_the_request_is_decoded(running: Settings) -> None:
    """The strategy's wire form is the plain map it always was (the empty map too: the
    default, as the first clients sent it); a bad one is a bad_request naming the field,
    and the service goes on answering."""
    scope = {"owners": ["user:u1"]}
    for strategy, reason in (
        ({"name": "psychic"}, "unknown strategy 'psychic'; known: default, "),
        ({"seconds": 5}, "missing required field `name` - at `$.strategy`"),
        ({"name": "time_window", "seconds": -1}, "at `$.strategy.seconds`"),
        (
            {"name": "compose", "steps": [{"name": "by_tag", "tags": []}]},
            "at `$.strategy.steps[0].tags`",
        ),
    ):
        refused, reply = await request(
            running, "acme", "recall", {"tenant": "acme", "scope": scope, "strategy": strategy}
        )
        assert refused and reason in reply.error, (strategy, reply)  # type: ignore[attr-defined]
        assert reply.code == "bad_request"  # type: ignore[attr-defined]
    for strategy in (
        None,
        {},
        {"name": "by_tag", "tags": ["orders"], "boost": 50},
        {"name": "compose", "steps": [{"name": "recency", "half_life_s": None}]},
    ):
        refused, reply = await request(
            running, "acme", "recall", {"tenant": "acme", "scope": scope, "strategy": strategy}
        )
        assert not refused, (strategy, reply)
