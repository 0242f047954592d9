"""Loaded by a `zeromem worker` that ``bench/paced_cost.py --stages`` starts (this folder
leads its PYTHONPATH): where a command's time goes between its publish and the end of the
call that applied it, in three stages, each timed on the wall clock of this machine:

- publish to arrival: from the command's own timestamp (``Command.ts``, set by the SDK
  when the put was made) to its delivery reaching the shard's feed (``PullFeed._on_msg``);
- arrival to call: waiting in the shard's window for a call to take it;
- the call: deciding, committing and publishing the results (``WorkerService.run_call``),
  with the other shards' calls interleaved on the same event loop.

Each applied command (a batch message's first: the others share its arrival) adds a row:
its timestamp, the three moments, the call's size and how many calls its round started
(``worker.rounds``; 0 in a tree without it). Every quarter second the rows since
the last write are appended to ``$ZEROMEM_STAGES_DIR/<pid>.jsonl``, one JSON array a line,
so a reader takes the rows of one round by their timestamps.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from zeromem.worker import pull, service

_OUT = os.environ.get("ZEROMEM_STAGES_DIR", "")
_arrived: dict[int, float] = {}  # id(msg) -> when its delivery reached the feed
_rows: list[tuple[float, float, float, float, int, int]] = []
_on_msg = pull.PullFeed._on_msg
_run_call = service.WorkerService.run_call


async def _timed_on_msg(self: pull.PullFeed, msg: Any) -> None:
    if msg.reply:  # a delivery (a status has none)
        _arrived[id(msg)] = time.time()
    await _on_msg(self, msg)


async def _timed_run_call(self: service.WorkerService, shard: int, call: Any) -> Any:
    began = time.time()
    rounds = getattr(self, "_rounds", None)  # a tree before worker/rounds.py has none
    round_ = rounds._latest if rounds is not None else None  # this call's: just entered
    sent = await _run_call(self, shard, call)
    ended = time.time()
    calls = round_.calls if round_ is not None else 0
    for admitted in call.commands:
        arrived = _arrived.pop(id(admitted.msg), None)
        if arrived is not None:  # a batch message's later commands: popped by its first
            _rows.append((admitted.command.ts, arrived, began, ended, len(call.commands), calls))
    return sent


def _write_every(seconds: float) -> None:
    written = 0
    with open(os.path.join(_OUT, f"{os.getpid()}.jsonl"), "a") as out:
        while True:
            time.sleep(seconds)
            rows = _rows[written:]  # appended by the event loop's thread meanwhile
            written += len(rows)
            out.writelines(json.dumps(row) + "\n" for row in rows)
            out.flush()


if _OUT:
    pull.PullFeed._on_msg = _timed_on_msg  # type: ignore[method-assign]
    service.WorkerService.run_call = _timed_run_call  # type: ignore[method-assign]
    threading.Thread(target=_write_every, args=(0.25,), daemon=True).start()
