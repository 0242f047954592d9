"""Loaded by a `zeromem worker` that ``bench/paced_cost.py --census`` starts (this folder
leads its PYTHONPATH): what runs on the worker's event loop, counted by kind.

The worker then runs on the standard asyncio loop instead of uvloop (which cannot be
instrumented from Python): the counts are the same, its CPU figures are not. Every
callback the loop runs is counted under a name (a task's coroutine, or the callback's
qualified name), with the loop's turns (one wait in ``epoll`` each); the counts are
written to ``$ZEROMEM_CENSUS_DIR/<pid>.json`` every quarter second, whole (written aside,
then renamed), so that a reader can take the difference between two moments.
"""

from __future__ import annotations

import asyncio.base_events
import asyncio.events
import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

sys.modules["uvloop"] = None  # type: ignore[assignment]  # `import uvloop` fails: asyncio

_OUT = os.environ.get("ZEROMEM_CENSUS_DIR", "")
_counts: Counter[str] = Counter()
_run = asyncio.events.Handle._run
_run_once = asyncio.base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]


def _name(callback: Any) -> str:
    owner = getattr(callback, "__self__", None)
    if owner is not None and hasattr(owner, "get_coro"):  # a task's step
        coro = owner.get_coro()
        return "task " + getattr(coro, "__qualname__", type(coro).__name__)
    return getattr(callback, "__qualname__", type(callback).__name__)


def _counted_run(self: asyncio.events.Handle) -> None:
    _counts[_name(self._callback)] += 1  # type: ignore[attr-defined]
    _run(self)


def _counted_run_once(self: Any) -> None:
    _counts["(loop turns)"] += 1
    _run_once(self)


def _write_every(seconds: float) -> None:
    path = os.path.join(_OUT, f"{os.getpid()}.json")
    while True:
        time.sleep(seconds)
        with open(path + ".part", "w") as out:
            json.dump(dict(_counts), out)
        os.replace(path + ".part", path)


if _OUT:
    asyncio.events.Handle._run = _counted_run  # type: ignore[method-assign]
    asyncio.base_events.BaseEventLoop._run_once = _counted_run_once  # type: ignore[attr-defined]
    threading.Thread(target=_write_every, args=(0.25,), daemon=True).start()
