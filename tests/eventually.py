"""``eventually``: the one way the tests wait for something asynchronous to happen (a
fire-and-forget write landing, a redelivery, the reaper's next pass)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

_UNSET = object()


async def eventually(
    probe: Callable[[], Any],
    until: Callable[[Any], object] = bool,
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Call ``probe`` (a plain or a coroutine function, no arguments) every ``interval``
    seconds until ``until`` holds for what it returns (by default: until it is truthy), and
    return that value. An exception of a ``retry_on`` class counts as "not yet". After
    ``timeout`` seconds, fail with the last value (or exception) seen."""
    deadline = time.monotonic() + timeout
    last: Any = _UNSET
    while True:
        try:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
        except retry_on as exc:
            last = exc
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not reached within {timeout:g}s; last seen: {last!r:.500}")
        await asyncio.sleep(interval)
