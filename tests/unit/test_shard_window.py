"""Turns between tenants within a shard: rounds, recorded positions and acknowledgements."""

from __future__ import annotations

import time
from dataclasses import dataclass

from zeromem.worker.fairness import ShardWindow


@dataclass
class FakeMsg:
    data: bytes = b"x"


def window_of(*tenants_and_counts: tuple[str, int], start: int = 1) -> ShardWindow:
    window = ShardWindow()
    for n, (tenant, count) in enumerate(tenants_and_counts):
        assert window.add(FakeMsg(), start + n, tenant, count)  # type: ignore[arg-type]
    return window


def seqs(chosen: list) -> list[int]:  # type: ignore[type-arg]
    return [h.sequence for h in chosen]


def test_a_tenant_alone_takes_whole_rounds_in_stream_order() -> None:
    window = window_of(*[("a", 100)] * 10)
    assert seqs(window.select(batch_size=512, share=64)) == [1, 2, 3, 4, 5]  # 500 of 512


def test_another_tenant_is_served_in_the_next_round_whatever_the_backlog_ahead() -> None:
    window = window_of(*[("a", 128)] * 30, ("b", 1), ("a", 128))
    chosen = window.select(batch_size=512, share=64)
    # b's first (the lighter turn), then one message of a (at least one, even over the share)
    assert seqs(chosen) == [31, 1]
    positions = window.positions(chosen)
    # b's message is applied ahead of a's 1..30: nothing to record until 1 is applied, then
    # only up to 1.
    assert positions == {31: 0, 1: 1}
    last = window.finish(chosen)
    assert last is not None and last.sequence == 1  # acknowledged: the done prefix only
    assert window.acknowledged == 1 and len(window) == 31


def test_each_tenants_messages_keep_their_order_and_the_prefix_catches_up() -> None:
    window = window_of(("a", 1), ("b", 1), ("a", 1), ("b", 1), ("c", 1))
    first = window.select(batch_size=2, share=1)
    assert seqs(first) == [1, 2]
    assert window.positions(first) == {1: 1, 2: 2}
    assert window.finish(first).sequence == 2  # type: ignore[union-attr]
    second = window.select(batch_size=3, share=1)
    assert seqs(second) == [3, 4, 5]
    window.finish(second)
    assert window.acknowledged == 5 and len(window) == 0 and window.commands == 0


def test_positions_skip_over_messages_done_in_an_earlier_round() -> None:
    window = window_of(("a", 1), ("b", 1), ("a", 1))
    done_ahead = [h for h in window.held if h.tenant == "b"]
    window.finish(done_ahead)  # b's applied first: nothing acknowledged yet
    assert window.acknowledged == 0 and len(window) == 3
    chosen = window.select(batch_size=10, share=10)
    assert seqs(chosen) == [1, 3]
    assert window.positions(chosen) == {1: 2, 3: 3}  # 1 done makes 1..2 the prefix


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
    assert window.finish([]) is None  # 1 is still waiting: nothing to acknowledge yet
    last = window.finish(window.select(batch_size=10, share=10))
    assert last is not None and last.sequence == 2 and len(window) == 0


def test_messages_waiting_long_are_reported_once_per_interval() -> None:
    window = window_of(("a", 1), ("b", 1))
    for held in window.held:
        held.since -= 100  # arrived long ago
    window.finish([window.held[1]])  # b's applied: it no longer waits
    assert seqs(window.waiting_since(time.monotonic() - 10)) == [1]
    assert window.waiting_since(time.monotonic() - 10) == []  # its clock restarted
