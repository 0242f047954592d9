"""Turns between tenants within a shard: deficit round-robin calls, recorded positions
(a low-water mark) and acknowledgements (only a prefix done and stored)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from zeromem.schemas import Put
from zeromem.worker.commit_cost import commit_cost
from zeromem.worker.fairness import Call, Held, Presence, ShardWindow, TenantCalls
from zeromem.worker.messages import Admitted, Dead

ALONE = {"most": 512, "share": 64, "quantum": 4096}


@dataclass(eq=False)
class FakeMsg:
    data: bytes = b"x"
    words: int = 0  # content words of each of its commands (their commit cost)
    dead: int = 0  # commands refused on admission (the first ones)


def admit(held: Held) -> tuple[list[Admitted], list[Dead]]:
    """Each message's commands, as many as it declares."""
    msg: FakeMsg = held.msg  # type: ignore[assignment]
    admitted, dead = [], []
    for i in range(held.commands):
        if i < msg.dead:
            dead.append(Dead(held.msg, b"", "invalid: test", held.sequence, i))
            continue
        content = " ".join(f"w{n}" for n in range(msg.words)) if msg.words else None
        command = Put(
            id=f"c{held.sequence}-{i}",
            tenant=held.tenant,
            agent="a",
            ts=1.0,
            key="user:u1:k",
            value=i,
            content=content,
        )
        admitted.append(Admitted(held.msg, command, "user:u1:k", held.sequence, 1.0, b"", i))
    return admitted, dead


def window_of(*messages: tuple[str, int] | tuple[str, int, FakeMsg]) -> ShardWindow:
    window = ShardWindow()
    for n, (tenant, count, *msg) in enumerate(messages):
        assert window.add(msg[0] if msg else FakeMsg(), 1 + n, tenant, count)  # type: ignore[arg-type]
    return window


def seqs(call: Call | None) -> list[int]:
    """The messages a call takes commands from, each once, in order."""
    assert call is not None
    return list(dict.fromkeys(a.sequence for a in call.commands))


def positions(call: Call) -> dict[int, int]:
    return {a.sequence: a.position for a in call.commands if a.position}


def run(window: ShardWindow, call: Call | None) -> Call:
    assert call is not None
    window.applied(call)
    return call


def settle(window: ShardWindow) -> int:
    """Acknowledge what can be: the last sequence acknowledged."""
    while window.head() is not None:
        window.pop()
    return window.acknowledged


def test_a_tenant_alone_takes_whole_rounds_in_stream_order() -> None:
    window = window_of(*[("a", 100)] * 10)
    call = window.next_call(admit, **ALONE)
    assert seqs(call) == [1, 2, 3, 4, 5, 6] and len(call.commands) == 512  # type: ignore[union-attr]
    # the sixth message is not applied by this call: the position covers the first five
    assert positions(call) == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}  # type: ignore[arg-type]
    run(window, call)
    assert settle(window) == 5
    rest = run(window, window.next_call(admit, **ALONE))
    assert seqs(rest) == [6, 7, 8, 9, 10] and positions(rest)[6] == 6
    assert settle(window) == 10 and window.commands == 0


def test_another_tenant_waits_one_bounded_call_whatever_the_backlog_ahead() -> None:
    window = window_of(*[("a", 128)] * 30, ("b", 1), ("a", 128))
    first = run(window, window.next_call(admit, **ALONE))
    assert first.tenant == "a" and len(first.commands) == 64  # the share, within a message
    assert positions(first) == {}  # message 1 is not applied whole yet
    second = run(window, window.next_call(admit, **ALONE))
    assert second.tenant == "b" and seqs(second) == [31]
    # b's message is applied ahead of a's 1..30: nothing to record until they are
    assert positions(second) == {}
    assert settle(window) == 0  # nor to acknowledge
    third = run(window, window.next_call(admit, **ALONE))
    assert third.tenant == "a" and positions(third) == {1: 1}
    assert settle(window) == 1


def test_a_tenant_with_nothing_waiting_goes_before_a_backlog() -> None:
    """A tenant whose message finds none of its own waiting is served at the next call,
    once, ahead of the tenants with a backlog (which have had their turns): a light
    tenant's lone write does not wait for a heavy tenant's call."""
    window = window_of(*[("a", 128)] * 30)
    window.presence.seen("b", time.monotonic())  # b writes on another shard of the worker
    first = run(window, window.next_call(admit, **ALONE))
    assert first.tenant == "a" and len(first.commands) == 64
    assert window.add(FakeMsg(), 31, "b", 1)  # type: ignore[arg-type]
    second = run(window, window.next_call(admit, **ALONE))
    assert second.tenant == "b" and seqs(second) == [31]
    assert window.add(FakeMsg(), 32, "c", 1)  # type: ignore[arg-type]
    assert window.add(FakeMsg(), 33, "b", 1)  # type: ignore[arg-type]
    # c and b are both new again (b's queue emptied): in arrival order, then a
    assert [run(window, window.next_call(admit, **ALONE)).tenant for _ in range(3)] == [
        "c",
        "b",
        "a",
    ]
    # a tenant with a backlog takes its turns behind the new ones only once each
    assert window.add(FakeMsg(), 34, "b", 128)  # type: ignore[arg-type]
    assert window.add(FakeMsg(), 35, "b", 128)  # type: ignore[arg-type]
    turns = [run(window, window.next_call(admit, **ALONE)).tenant for _ in range(4)]
    assert turns == ["b", "a", "b", "a"]


def test_calls_alternate_by_commit_cost_not_by_count() -> None:
    heavy, light = FakeMsg(words=91), FakeMsg(words=1)  # 100 and 10 units a command
    assert commit_cost(admit(Held(heavy, 1, "a", 1, 1, 0.0))[0][0].command) == 100
    window = window_of(("a", 1000, heavy), ("b", 1000, light))
    turns = {"most": 512, "share": 512, "quantum": 400}
    calls = [run(window, window.next_call(admit, **turns)) for _ in range(6)]
    assert [c.tenant for c in calls] == ["a", "b"] * 3
    assert [len(c.commands) for c in calls] == [4, 40] * 3  # 400 units each turn
    assert all(c.cost <= 400 for c in calls)


def test_a_command_costing_more_than_a_turn_passes_the_next_turns_of_its_tenant() -> None:
    huge = FakeMsg(words=791)  # 800 units
    window = window_of(("a", 3, huge), ("b", 100))
    turns = {"most": 512, "share": 64, "quantum": 400}
    calls = [run(window, window.next_call(admit, **turns)) for _ in range(4)]
    # a's first command alone (a call takes one at least; b's cost 25 units each), then a's
    # debt lets b go twice
    assert [(c.tenant, len(c.commands)) for c in calls] == [
        ("a", 1),
        ("b", 16),
        ("b", 16),
        ("a", 1),
    ]


def test_each_tenants_messages_keep_their_order_and_the_prefix_catches_up() -> None:
    window = window_of(("a", 1), ("b", 1), ("a", 1), ("b", 1), ("c", 1))
    a = run(window, window.next_call(admit, **ALONE))
    assert seqs(a) == [1, 3] and positions(a) == {1: 1, 3: 1}  # 2 is b's, still waiting
    b = run(window, window.next_call(admit, **ALONE))
    assert seqs(b) == [2, 4] and positions(b) == {2: 3, 4: 4}
    c = run(window, window.next_call(admit, **ALONE))
    assert positions(c) == {5: 5}
    assert window.next_call(admit, **ALONE) is None
    assert settle(window) == 5 and len(window) == 0 and window.commands == 0


def test_a_message_applied_over_several_calls_is_done_with_its_last_command() -> None:
    window = window_of(("a", 150), ("b", 1))
    first = run(window, window.next_call(admit, **ALONE))
    assert len(first.commands) == 64 and first.completed == []
    run(window, window.next_call(admit, **ALONE))  # b's
    second = run(window, window.next_call(admit, **ALONE))
    third = run(window, window.next_call(admit, **ALONE))
    assert [a.index for a in third.commands][-1] == 149
    assert positions(second) == {} and positions(third) == {1: 2}  # b's 2 was done already
    assert settle(window) == 2


def test_commands_refused_on_admission_go_with_the_call() -> None:
    window = window_of(("a", 3, FakeMsg(dead=3)), ("a", 2, FakeMsg(dead=1)))
    call = run(window, window.next_call(admit, **ALONE))
    assert len(call.dead) == 4 and len(call.commands) == 1
    assert [h.sequence for h in call.completed] == [1, 2] and positions(call) == {2: 2}


def test_nothing_is_acknowledged_before_its_publications_are_sent() -> None:
    window = window_of(("a", 1), ("a", 1))
    call = run(window, window.next_call(admit, **ALONE))
    window.held[1].sending = True  # say, its dead letter not sent yet
    assert window.head() is window.held[0]
    window.pop()
    assert window.head() is None and window.unsettled()
    window.held[0].sending = False
    assert settle(window) == 2 and call.completed


def test_a_message_given_up_drops_what_of_it_is_still_queued() -> None:
    window = window_of(("a", 150), ("a", 1))
    first = window.next_call(admit, **{**ALONE, "most": 100})
    assert first is not None and len(first.commands) == 100
    window.give_up(first.touched[0])  # it failed: dead-lettered whole
    rest = window.next_call(admit, **ALONE)
    assert seqs(rest) == [2] and positions(rest) == {2: 2}  # type: ignore[arg-type]


def test_redeliveries_are_not_held_twice() -> None:
    window = window_of(("a", 1), ("a", 1))
    assert not window.add(FakeMsg(), 2, "a", 1)  # type: ignore[arg-type]
    assert not window.add(FakeMsg(), 1, "a", 1)  # type: ignore[arg-type]
    assert window.add(FakeMsg(), 3, "a", 1)  # type: ignore[arg-type]
    assert window.commands == 3


def test_a_message_refused_on_arrival_is_acknowledged_with_the_prefix_only() -> None:
    window = window_of(("a", 1))
    assert window.add(FakeMsg(), 2, "noisy", 128, done=True)  # type: ignore[arg-type]
    assert window.commands == 1  # the refused one waits for no turn
    assert settle(window) == 0  # 1 is still waiting: nothing to acknowledge yet
    call = run(window, window.next_call(admit, **ALONE))
    assert positions(call) == {1: 2}  # the refused one is done: the prefix runs past it
    assert settle(window) == 2


def test_messages_held_long_are_reported_once_per_interval_until_acknowledged() -> None:
    window = window_of(("a", 1), ("b", 1), ("c", 1))
    for held in window.held:
        held.since -= 100  # arrived long ago
    run(window, window.next_call(admit, **ALONE))  # a's applied, not acknowledged yet
    assert [h.sequence for h in window.waiting_since(time.monotonic() - 10)] == [1, 2, 3]
    assert window.waiting_since(time.monotonic() - 10) == []  # their clocks restarted
    assert settle(window) == 1  # a's acknowledged: nothing to tell the server of it
    for held in window.held:
        held.since -= 100
    assert [h.sequence for h in window.waiting_since(time.monotonic() - 10)] == [2, 3]


def test_a_tenant_busy_elsewhere_waits_and_the_others_go_on() -> None:
    presence = Presence()
    woken: list[bool] = []
    calls = TenantCalls(presence, lambda: woken.append(True))
    window = ShardWindow(presence)
    for n, tenant in enumerate(["a", "a", "b"]):
        window.add(FakeMsg(), n + 1, tenant, 1)  # type: ignore[arg-type]
    calls.take("a")  # a's call on another shard of the worker
    call = window.next_call(admit, **ALONE, busy=calls.busy)
    assert call is not None and call.tenant == "b"  # a is passed over, not waited for
    window.applied(call)
    assert window.next_call(admit, **ALONE, busy=calls.busy) is None  # only a, busy
    assert window.runnable
    calls.release("a")
    assert woken == [True]
    assert seqs(window.next_call(admit, **ALONE, busy=calls.busy)) == [1, 2]


def test_a_tenant_alone_on_the_worker_has_calls_on_every_shard_at_once() -> None:
    presence = Presence()
    calls = TenantCalls(presence, lambda: None)
    window = ShardWindow(presence)
    window.add(FakeMsg(), 1, "a", 1)  # type: ignore[arg-type]
    calls.take("a")
    assert not calls.busy("a")
    assert window.next_call(admit, **ALONE, busy=calls.busy) is not None
