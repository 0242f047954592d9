"""A worker's calls start together, in rounds over all its shards.

Each shard has its own consume loop (``service``), and a worker's shards share one event
loop. Left to themselves, the loops' calls run whenever each is ready, so at any moment
up to one call per shard is half done, each a step at a time between the others' steps.
Every stage of every call (its deciding, its commit's round trip, its publishing) then
waits for a turn of the loop that also carries the other shards' stages, and a call's
wall time becomes several times its own cost: with 8 shards a worker at 1,000 appends/s
took 22.7 ms a call for 2.8 commands, against 5.0 ms for 3.5 with one shard a worker
(``python bench/paced_cost.py --rate 1000 --shards S --stages``, 2026-12-02 evening), on
the same CPU per append.

``Rounds`` lines the calls up instead. A call with nothing in flight starts at once, and
the calls other shards make in the same turn of the loop join it; a call made while a
round is in flight waits for that round to end, and every call that came meanwhile starts
together in the next. Their stages then share the loop's turns (the deciding back to
back, the commits in one Redis round trip, ``coalesce``), and a round costs about what one
shard's call costs. Nothing else about a call changes: each runs in its own shard's task,
with its own faults and containment (a retry waits outside its round); a round only says
when it may start. Measured in docs/write-path.md ("Done: one round at a time").

A round never holds the next one for long: past ``HOLD_S`` the next starts anyway, so a
shard whose call is stuck (a Redis node that does not answer) slows the worker's other
shards by at most that, never stalls them.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

# How long a round in flight may hold the next one back. A round of the append workload
# takes a few milliseconds to a few tens of them (a tenant alone gets calls of up to
# ``Settings.worker.batch_size`` commands: about a tenth of a second on this machine).
HOLD_S = 0.05


class _Round:
    __slots__ = ("calls", "left")

    def __init__(self, calls: int) -> None:
        self.calls = calls  # the calls it started
        self.left = calls  # ... not ended yet


class Rounds:
    """When each of a worker's calls may start (see the module's docstring). One per
    worker, used from its event loop only."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.hold_s = hold_s
        self._latest: _Round | None = None  # the last round started, until it ends
        self._open: _Round | None = None  # ... until the loop's next turn: calls join it
        self._forming: list[asyncio.Future[_Round]] = []  # calls waiting for the next
        self._timer: asyncio.Handle | None = None  # starts the next one regardless
        self.started = 0  # rounds so far, and the calls they started (telemetry, benches)
        self.calls = 0

    def turn(self) -> _Turn:
        """``async with rounds.turn():`` around one call: enters when its round starts."""
        return _Turn(self)

    async def _enter(self) -> _Round:
        open_ = self._open
        if open_ is not None:  # a round started in this turn of the loop: it takes more
            open_.calls += 1
            open_.left += 1
            self.calls += 1
            return open_
        loop = asyncio.get_running_loop()
        if self._latest is None and not self._forming:
            # Nothing in flight: start now, not a turn later (a lone call, the common case
            # at low load, pays no wait and no wake-up), and let the calls that the other
            # shards make in this same turn join it.
            return self._begin(1, loop)
        waiter: asyncio.Future[_Round] = loop.create_future()
        if not self._forming:
            self._timer = loop.call_later(self.hold_s, self._start)
        self._forming.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._exit(waiter.result())  # started, then cancelled before it ran
            raise

    def _exit(self, round_: _Round) -> None:
        round_.left -= 1
        if round_.left:
            return
        if round_ is self._open:
            self._open = None
        if round_ is self._latest:
            self._latest = None
            if self._forming:
                # At the loop's next turn, not now: the shard whose call ended the round
                # may have its next call ready by then, and it joins this round instead
                # of waiting for the whole of it.
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters = [w for w in self._forming if not w.done()]  # a cancelled one never ran
        self._forming = []
        if waiters:
            round_ = self._begin(len(waiters), asyncio.get_running_loop())
            for waiter in waiters:
                waiter.set_result(round_)

    def _begin(self, calls: int, loop: asyncio.AbstractEventLoop) -> _Round:
        round_ = self._latest = self._open = _Round(calls)
        loop.call_soon(self._close, round_)
        self.started += 1
        self.calls += calls
        return round_

    def _close(self, round_: _Round) -> None:
        if self._open is round_:
            self._open = None


class _Turn:
    __slots__ = ("_round", "_rounds")

    def __init__(self, rounds: Rounds) -> None:
        self._rounds = rounds
        self._round: _Round | None = None

    async def __aenter__(self) -> None:
        self._round = await self._rounds._enter()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._round is not None:
            self._rounds._exit(self._round)
            self._round = None
