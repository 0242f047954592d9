"""The stall watch names where a blocked event loop is, and how long it was held."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from zeromem.stall import StallWatch


def _hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # a blocking call, as a bug would make one


async def test_a_blocked_loop_is_logged_with_its_stack_and_its_length(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = StallWatch(threshold_s=0.3).start()
    try:
        with caplog.at_level(logging.WARNING, logger="zeromem.stall"):
            await asyncio.sleep(0.1)
            _hold_the_loop(1.0)
            await asyncio.sleep(0.3)  # the loop turns again and says how long it was held
    finally:
        watch.stop()
    messages = [r.getMessage() for r in caplog.records]
    stacks = [m for m in messages if "has not turned" in m]
    assert len(stacks) == 1, messages  # once per stall
    assert "_hold_the_loop" in stacks[0]
    held = [m for m in messages if "was held for" in m]
    assert len(held) == 1 and watch.stalls == 1
    assert 0.7 <= float(held[0].split("held for ")[1].split("s")[0]) <= 3.0


async def test_a_turning_loop_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch(threshold_s=0.5).start()  # far above a loaded machine's delays
    try:
        with caplog.at_level(logging.WARNING, logger="zeromem.stall"):
            for _ in range(10):
                _hold_the_loop(0.02)  # short calls, many turns
                await asyncio.sleep(0.03)
    finally:
        watch.stop()
    assert not caplog.records and watch.stalls == 0


async def test_switched_off_at_zero() -> None:
    watch = StallWatch(threshold_s=0).start()
    _hold_the_loop(0.1)
    await asyncio.sleep(0)
    watch.stop()
    assert watch.stalls == 0
