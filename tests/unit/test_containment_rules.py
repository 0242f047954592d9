"""The pure parts of fault containment: what a value may look like, outage or message
fault, rate quotas, bounded logs, the limits section, and the turns between tenants."""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time

import msgspec
import pytest
from nats import errors as nats_errors
from nats.js import errors as js_errors
from redis import exceptions as redis_errors

from zeromem.limits import Limits
from zeromem.logs import BoundedLog
from zeromem.query.gate import OVERLOADED, RATE_LIMITED, TenantGate
from zeromem.quota import RateQuota
from zeromem.settings import Settings, StoreSettings, Variable, variables
from zeromem.shape import agent_refusal, finite_refusal, shape_refusal
from zeromem.worker.faults import Fault, StaleRoundsError, classify


def refused(value: object, depth: int = 32) -> str | None:
    return shape_refusal(value, depth_limit=depth, where="value")


def test_json_like_values_pass_and_every_other_shape_is_named() -> None:
    assert refused({"a": [1, 2.5, "x", None, True, {"b": []}]}) is None
    assert refused(3) is None and refused("s") is None and refused(None) is None
    assert "map_keys" in refused({"a": 1, 2: 3})  # type: ignore[operator]
    assert "map_keys" in refused([{(1, 2): 3}])  # type: ignore[operator]
    assert "ext_types" in refused([msgspec.msgpack.Ext(5, b"x")])  # type: ignore[operator]
    assert "ext_types" in refused({"t": datetime.datetime.now(datetime.UTC)})  # type: ignore[operator]
    assert "ext_types" in refused({"b": b"bytes"})  # type: ignore[operator]
    assert "non_finite" in refused({"x": [math.nan]})  # type: ignore[operator]
    assert "non_finite" in refused(math.inf)  # type: ignore[operator]


def test_nesting_is_counted_in_lists_and_maps_alike() -> None:
    def nest(depth: int) -> object:
        value: object = 1
        for i in range(depth):
            value = [value] if i % 2 else {"k": value}
        return value

    assert refused(nest(32)) is None
    assert "nesting_depth" in refused(nest(33))  # type: ignore[operator]
    assert "nesting_depth" in refused(nest(100_000))  # type: ignore[operator]  # no RecursionError


def test_agent_ids_are_bounded_in_length_and_charset() -> None:
    assert agent_refusal("planner-7@team.a", 128) is None
    for bad in ("a|b", "tab\t", "x" * 129, "ключ", "new\nline", "sp ace"):
        assert "agent_chars" in (agent_refusal(bad, 128) or ""), bad
    assert finite_refusal("x", 1.0, None) is None
    assert "non_finite" in (finite_refusal("x", 1.0, math.nan) or "")


@pytest.mark.parametrize(
    "exc,fault",
    [
        (redis_errors.ConnectionError("refused"), Fault.OUTAGE),
        (redis_errors.TimeoutError(), Fault.OUTAGE),
        (redis_errors.BusyLoadingError(), Fault.OUTAGE),
        (redis_errors.ResponseError("LOADING Redis is loading"), Fault.OUTAGE),
        (redis_errors.ResponseError("BUSY Redis is busy running a script"), Fault.OUTAGE),
        (redis_errors.ResponseError("ERR min or max is not a float"), Fault.MESSAGE),
        (redis_errors.ResponseError("ERR user_script:3: bad argument"), Fault.MESSAGE),
        (nats_errors.ConnectionClosedError(), Fault.OUTAGE),
        (nats_errors.TimeoutError(), Fault.OUTAGE),
        (js_errors.ServiceUnavailableError(), Fault.OUTAGE),
        (js_errors.TooManyStalledMsgsError(), Fault.OUTAGE),
        (nats_errors.MaxPayloadError(), Fault.MESSAGE),
        (TimeoutError(), Fault.OUTAGE),
        (ConnectionResetError(), Fault.OUTAGE),
        (TypeError("'<' not supported between instances of 'int' and 'str'"), Fault.MESSAGE),
        (RecursionError(), Fault.MESSAGE),
        (StaleRoundsError("stale"), Fault.MESSAGE),
        (KeyError("x"), Fault.MESSAGE),
    ],
)
def test_outages_and_message_faults_are_told_apart(exc: BaseException, fault: Fault) -> None:
    assert classify(exc) is fault


def test_a_rate_quota_admits_its_rate_and_a_large_take_only_when_full() -> None:
    quota = RateQuota(10.0)
    assert all(quota.take("t", 1, now=100.0) for _ in range(10))
    assert not quota.take("t", 1, now=100.0)
    assert quota.take("other", 1, now=100.0)  # keys are independent
    assert quota.take("t", 1, now=100.2)  # two tokens back after 0.2 s
    assert quota.take("b", 50, now=0.0)  # a batch larger than a second's worth, when full
    assert not quota.take("b", 1, now=4.0)  # ... leaves the bucket in debt for 5 s
    assert quota.take("b", 1, now=5.2)
    assert RateQuota(0).take("anything", 10**9)  # 0: off


def test_a_repeating_failure_is_logged_once_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bounded = BoundedLog(logging.getLogger("zeromem.test"), interval_s=3600)
    caplog.set_level(logging.WARNING, logger="zeromem.test")
    for _ in range(1000):
        bounded.warning(("same", 1), "it failed")
    bounded.warning(("other", 2), "something else")
    assert [r.getMessage() for r in caplog.records] == ["it failed", "something else"]
    bounded._last[("same", 1)] -= 7200  # the interval passed
    bounded.warning(("same", 1), "it failed")
    assert "999 more like it" in caplog.records[-1].getMessage()


def limit_variables() -> list[Variable]:
    return [variable for variable in variables() if variable.path[0] == "limits"]


def test_limits_come_from_the_environment_and_ride_in_the_settings() -> None:
    limits = Settings.from_env(
        {"ZEROMEM_LIMIT_RECALL_OWNERS": "8", "ZEROMEM_LIMIT_TENANT_COMMANDS_PER_S": "2.5"}
    ).limits
    assert limits.recall_owners == 8 and limits.tenant_commands_per_s == 2.5
    assert Settings.from_env(Settings(limits=limits).env()).limits == limits
    settings = Settings.from_env({"ZEROMEM_LIMIT_VALUE_BYTES": "1024", "ZEROMEM_SHARDS": "4"})
    assert settings.limits.value_bytes == 1024 and settings.shards == 4
    with pytest.raises(ValueError):
        Limits(nesting_depth=-1)
    names = [variable.names[0] for variable in limit_variables()]
    assert len(names) == len(set(names)) > 30


async def test_a_flooding_tenant_waits_behind_itself_and_another_takes_the_next_slot() -> None:
    gate = TenantGate(Limits(reads_in_flight=2, tenant_in_flight=2, tenant_queued=100))
    order: list[str] = []
    release = asyncio.Event()

    async def request(tenant: str, name: str) -> None:
        assert gate.admit(tenant) is None
        async with gate.slot(tenant):
            order.append(name)
            await release.wait()

    flood = [asyncio.create_task(request("a", f"a{i}")) for i in range(20)]
    await asyncio.sleep(0)
    quiet = asyncio.create_task(request("b", "b0"))
    await asyncio.sleep(0)
    assert order == ["a0", "a1"]  # both slots taken by the flood
    release.set()
    await asyncio.gather(*flood, quiet)
    # Turns alternate: of the two slots freed first, one went to b (a had been waiting
    # longer, so it had the first turn), not after all of a's eighteen waiting requests.
    assert order.index("b0") in (2, 3)


async def test_a_tenant_over_its_queue_or_rate_is_refused_at_once() -> None:
    gate = TenantGate(Limits(reads_in_flight=1, tenant_in_flight=1, tenant_queued=2))
    hold = asyncio.Event()

    async def request() -> None:
        async with gate.slot("a"):
            await hold.wait()

    tasks = [asyncio.create_task(request()) for _ in range(3)]  # one working, two waiting
    await asyncio.sleep(0)
    code, reason = gate.admit("a")  # type: ignore[misc]
    assert code == OVERLOADED and "tenant_queued" in reason
    assert gate.admit("b") is None
    hold.set()
    await asyncio.gather(*tasks)
    assert gate.in_flight == 0

    rated = TenantGate(Limits(tenant_requests_per_s=5))
    verdicts = [rated.admit("a") for _ in range(6)]
    assert verdicts[:5] == [None] * 5
    assert verdicts[5] is not None and verdicts[5][0] == RATE_LIMITED
    assert "tenant_requests_per_s" in verdicts[5][1]


def test_refusals_past_a_tenants_refusal_rate_are_answered_late_and_bounded() -> None:
    gate = TenantGate(Limits(tenant_refusals_per_s=3, refusal_delay_s=0.5, tenant_queued=2))
    assert [gate.refusal_delay("a") for _ in range(3)] == [0.0] * 3  # within its rate
    assert [gate.refusal_delay("a") for _ in range(2)] == [0.5, 0.5]  # then late ...
    assert gate.refusal_delay("a") == 0.0  # ... at most tenant_queued waiting at once
    assert gate.refusal_delay("b") == 0.0  # another tenant's are its own
    gate.refusal_sent("a")
    assert gate.refusal_delay("a") == 0.5  # one waits again in its place
    assert TenantGate(Limits()).refusal_delay("a") == 0.0  # off by default


async def test_a_waiting_request_that_is_cancelled_gives_its_place_back() -> None:
    gate = TenantGate(Limits(reads_in_flight=1, tenant_in_flight=1))
    hold = asyncio.Event()

    async def request() -> None:
        async with gate.slot("a"):
            await hold.wait()

    first = asyncio.create_task(request())
    second = asyncio.create_task(request())
    await asyncio.sleep(0)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    hold.set()
    await first
    assert gate.in_flight == 0 and gate._queued == 0 and not gate._waiting


def test_a_value_limit_the_broker_cannot_carry_is_refused_at_start() -> None:
    from types import SimpleNamespace

    from zeromem.worker.service import WorkerService

    nc = SimpleNamespace(max_payload=1024 * 1024, jetstream=lambda: None)
    redis = SimpleNamespace(register_script=lambda text: None)
    settings = Settings(limits=Limits(value_bytes=4 * 1024 * 1024))
    with pytest.raises(ValueError, match="value_bytes"):
        WorkerService(settings, [0], nc=nc, redis=redis, engine=object())  # type: ignore[arg-type]
    WorkerService(Settings(), [0], nc=nc, redis=redis, engine=object())  # type: ignore[arg-type]


def test_the_readme_lists_every_limit_with_its_default() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): line
        for line in readme.splitlines()
        if line.startswith("| `")
    }
    for variable in limit_variables():
        name, default = variable.path[-1], variable.value_in(Settings())
        assert name in rows, f"README lists no limit {name}"
        shown = str(int(default)) if float(default).is_integer() else str(default)
        assert f"| {shown}" in rows[name], f"README's default of {name} is not {shown}"


async def test_while_tenants_share_a_service_each_has_one_request_in_flight_and_its_share() -> None:
    gate = TenantGate(
        Limits(
            tenant_in_flight=4, tenant_in_flight_shared=1, reads_in_flight=8, tenant_read_share=0.1
        )
    )
    running: list[str] = []
    hold = asyncio.Event()

    async def request(tenant: str, seconds: float = 0.0) -> None:
        assert gate.admit(tenant) is None
        async with gate.slot(tenant):
            running.append(tenant)
            await asyncio.sleep(seconds)
            await hold.wait()

    alone = [asyncio.create_task(request("a")) for _ in range(6)]
    await asyncio.sleep(0.01)
    assert running.count("a") == 4  # alone: tenant_in_flight
    hold.set()
    await asyncio.gather(*alone)

    hold.clear()
    running.clear()
    assert gate.admit("b") is None  # b is active too: the service is shared now
    shared = [asyncio.create_task(request("a")) for _ in range(3)]
    quiet = asyncio.create_task(request("b"))
    await asyncio.sleep(0.01)
    assert sorted(running) == ["a", "b"]  # one each
    hold.set()
    await asyncio.gather(*shared, quiet)

    # A request that took 0.15 s left a in debt (its share is 0.1 s of work per second):
    # a's next one waits until it has earned the time back, while b's goes at once.
    running.clear()
    gate.admit("a")
    gate.admit("b")
    async with gate.slot("a"):
        gate._share["a"][0] -= 0.15  # as if it had run that long while shared
    started = asyncio.get_running_loop().time()
    late = asyncio.create_task(request("a"))
    await asyncio.sleep(0.05)
    assert running == []
    await request("b")
    assert running == ["b"]
    await late
    assert asyncio.get_running_loop().time() - started >= 0.4


def _shared_gate(share: float) -> TenantGate:
    gate = TenantGate(Limits(tenant_in_flight_shared=1, tenant_read_share=share))
    gate.admit("a")
    gate.admit("b")  # b is active too: the service is shared
    return gate


async def test_a_tenant_in_debt_in_a_quiet_service_starts_once_it_has_earned_it_back() -> None:
    # The read-silence interleaving: a's last request ran while b was active and left it
    # in debt, then nobody else's request finished. a's next one waited for a dispatch
    # only another request's end (or a timer its own wait never set) would make.
    gate = _shared_gate(share=0.5)
    async with gate.slot("a"):
        pass
    gate._share["a"][0] = -0.1  # as if it had run 0.1 s past its share while shared
    loop = asyncio.get_running_loop()
    started = loop.time()
    gate.admit("a")
    async with asyncio.timeout(2.0):  # it waited forever before the fix
        async with gate.slot("a"):
            waited = loop.time() - started
    assert 0.15 <= waited < 1.0  # 0.1 s of debt at 0.5 s/s: 0.2 s
    assert gate.in_flight == 0 and gate._queued == 0


async def test_a_tenant_in_little_debt_does_not_wait_for_the_timer_of_one_in_much() -> None:
    gate = _shared_gate(share=0.5)
    gate._share["b"] = [-0.45, time.monotonic()]  # b waits 0.9 s; its wait sets the timer first
    gate._share["a"] = [-0.05, time.monotonic()]  # a, 0.1 s
    loop = asyncio.get_running_loop()
    started = loop.time()
    b = asyncio.create_task(_hold(gate, "b"))
    await asyncio.sleep(0)
    async with asyncio.timeout(2.0), gate.slot("a"):
        waited = loop.time() - started
    assert waited < 0.5, waited  # 0.9 s when it waited for b's timer
    await b


async def test_a_request_that_outlasted_an_outage_costs_its_tenant_at_most_a_second() -> None:
    gate = _shared_gate(share=0.25)
    gate._take("a")
    gate._give("a", 10.0)  # a get that waited out a 10 s Redis restart, charged on its end
    assert gate._share["a"][0] == -0.25  # one second's worth, not 40 s of silence
    assert gate.in_flight == 0


async def test_a_waiter_cancelled_as_its_turn_comes_neither_breaks_the_turns_nor_leaks() -> None:
    gate = TenantGate(Limits(reads_in_flight=1, tenant_in_flight=1))
    async with gate.slot("a"):
        second = asyncio.create_task(_hold(gate, "b"))
        third = asyncio.create_task(_hold(gate, "c"))
        await asyncio.sleep(0)  # both wait
        second.cancel()  # its future is cancelled now; its task forgets its place later
    # a's slot freed in between: the turn came to a cancelled waiter (InvalidStateError
    # out of a's exit before, with a slot taken for nobody).
    with pytest.raises(asyncio.CancelledError):
        await second
    await third  # the next waiter got the slot
    assert gate.in_flight == 0 and gate._queued == 0 and not gate._waiting


async def _hold(gate: TenantGate, tenant: str, until: asyncio.Event | None = None) -> None:
    async with gate.slot(tenant):
        if until is not None:
            await until.wait()


async def test_a_slow_turn_is_logged_with_the_gates_state(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from zeromem.query import gate as gate_module

    monkeypatch.setattr(gate_module, "SLOW_TURN_S", 0.05)
    gate = _shared_gate(share=0.5)
    gate._share["a"] = [-0.05, time.monotonic()]  # 0.1 s to earn back
    with caplog.at_level(logging.WARNING, logger="zeromem.query.gate"):
        async with gate.slot("a"):
            state = gate.state()
    assert state["busy"] == 1 and state["active"] == {"a": 1} and state["shared"]
    (line,) = [r.getMessage() for r in caplog.records]
    assert "tenant 'a' waited 0.1 s for its turn" in line and "'share_s': {'a': 0.0" in line


async def test_a_read_on_a_redis_that_stops_answering_fails_instead_of_waiting_for_ever() -> None:
    from redis.exceptions import TimeoutError as RedisTimeout

    from zeromem.bus import connect_redis

    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # a paused Redis: the socket is open, nothing answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redis = connect_redis(Settings(store=StoreSettings(redis_url=f"redis://127.0.0.1:{port}")), 0.2)
    try:
        async with asyncio.timeout(5.0):  # no timeout: it waited as long as the socket
            with pytest.raises(RedisTimeout):
                await redis.get("k")
    finally:
        await redis.aclose()
        for writer in accepted:
            writer.close()
        server.close()
