"""The tests' polling helper: returns once the condition holds, fails loudly otherwise."""

from __future__ import annotations

import pytest

from tests.eventually import eventually


async def test_returns_the_first_value_the_condition_accepts() -> None:
    seen: list[int] = []

    async def probe() -> int:
        seen.append(len(seen))
        return seen[-1]

    assert await eventually(probe, lambda n: n >= 3, interval=0.001) == 3


async def test_retries_the_exceptions_it_is_told_to() -> None:
    calls = iter([ConnectionError("not yet"), "up"])

    def probe() -> str:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert await eventually(probe, retry_on=(ConnectionError,), interval=0.001) == "up"


async def test_fails_with_the_last_value_seen() -> None:
    with pytest.raises(AssertionError, match="last seen: 0"):
        await eventually(lambda: 0, timeout=0.05, interval=0.01)
