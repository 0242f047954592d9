"""A worker's calls start together, in rounds (``worker.rounds``): what comes in one turn
of the loop starts at once, what comes during a round waits for its end, and a stuck call
holds the others back for at most ``hold_s``."""

from __future__ import annotations

import asyncio
import time

import pytest

from zeromem.worker.rounds import Rounds


class _Calls:
    """Calls that record when they started and end when told to."""

    def __init__(self, rounds: Rounds) -> None:
        self.rounds = rounds
        self.started: dict[str, float] = {}
        self.release: dict[str, asyncio.Event] = {}

    def call(self, name: str) -> asyncio.Task[None]:
        self.release[name] = asyncio.Event()

        async def run() -> None:
            async with self.rounds.turn():
                self.started[name] = time.monotonic()
                await self.release[name].wait()

        return asyncio.create_task(run(), name=name)


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_calls_made_in_one_turn_start_in_one_round() -> None:
    rounds = Rounds()
    calls = _Calls(rounds)
    tasks = [calls.call(name) for name in "abc"]
    await _turns()
    assert set(calls.started) == {"a", "b", "c"}
    assert (rounds.started, rounds.calls) == (1, 3)
    for event in calls.release.values():
        event.set()
    await asyncio.gather(*tasks)


async def test_a_call_made_during_a_round_waits_for_its_end() -> None:
    rounds = Rounds(hold_s=10.0)
    calls = _Calls(rounds)
    first = [calls.call("a"), calls.call("b")]
    await _turns()
    late = [calls.call("c"), calls.call("d")]
    await _turns()
    assert "c" not in calls.started and "d" not in calls.started
    calls.release["a"].set()
    await _turns()
    assert "c" not in calls.started  # "b" is still in the round
    calls.release["b"].set()
    await _turns()
    assert {"c", "d"} <= set(calls.started)
    assert (rounds.started, rounds.calls) == (2, 4)
    calls.release["c"].set()
    calls.release["d"].set()
    await asyncio.gather(*first, *late)


async def test_a_stuck_call_holds_the_next_round_back_for_at_most_hold_s() -> None:
    rounds = Rounds(hold_s=0.05)
    calls = _Calls(rounds)
    stuck = calls.call("stuck")
    await _turns()
    began = time.monotonic()
    waiting = calls.call("next")
    await asyncio.sleep(0.2)  # far past hold_s
    assert 0.04 <= calls.started["next"] - began < 0.5
    # ... and the round after it waits for that one, not for the stuck call.
    calls.release["next"].set()
    await waiting
    after = calls.call("after")
    await _turns()
    assert "after" in calls.started
    calls.release["after"].set()
    calls.release["stuck"].set()
    await asyncio.gather(stuck, after)


async def test_a_call_cancelled_while_waiting_takes_no_place() -> None:
    rounds = Rounds(hold_s=10.0)
    calls = _Calls(rounds)
    running = calls.call("a")
    await _turns()
    gone = calls.call("gone")
    kept = calls.call("kept")
    await _turns()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    calls.release["a"].set()
    await _turns()
    assert "kept" in calls.started and "gone" not in calls.started
    assert rounds.calls == 2
    calls.release["kept"].set()
    await asyncio.gather(running, kept)


async def test_a_call_that_fails_or_is_cancelled_in_its_round_ends_it() -> None:
    rounds = Rounds(hold_s=10.0)

    async def failing() -> None:
        async with rounds.turn():
            raise ValueError("its own fault")

    calls = _Calls(rounds)
    failed = asyncio.create_task(failing())
    cancelled = calls.call("cancelled")
    await _turns()
    cancelled.cancel()
    with pytest.raises(ValueError):
        await failed
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    later = calls.call("later")
    await _turns()
    assert "later" in calls.started  # the round ended with both: nothing holds the next
    calls.release["later"].set()
    await later
