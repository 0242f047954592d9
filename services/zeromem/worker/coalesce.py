"""One Redis round trip for the script calls a worker's shards make at the same moment.

A worker runs each of its shards in a loop of its own, on one event loop: fetch, read the
round's memories (one script call), decide, commit (another), publish. At half the rate
the workers sustain in large batches, commands arrive one or two at a time and every
shard pays two script calls per command. Redis's cost of a call is mostly fixed (reading
the request, the append-only file's write and the reply, each a system call per event-loop
turn of Redis): a two-``HSET`` script cost Redis 50 to 63 us of CPU called alone and 7 to
13 us pipelined sixteen at a time, and a round trip 0.35 to 0.6 ms of wall time on this
shared 2-core machine (``/work/notes/wpath.md``). Each call then waited behind the other
shards' calls: at 400 appends/s the read and the commit each took 16 ms at the median and
55 ms at the 90th percentile, with the worker and Redis each under a quarter of a core
busy, and a shard's next commands waited in the stream meanwhile (p50 289 ms publish to
applied, issue 15).

``Coalesced`` wraps the worker's Redis client: a script call (``evalsha``) is not sent at
once but queued, and every call queued during one turn of the event loop goes out in one
pipeline when the loop next runs its callbacks. The shards need not coordinate: their
fetches are answered by the same read from the NATS socket, so they wake in the same turn
and their reads (then their commits) coincide; a lone call waits one loop turn, nothing
more. Each call keeps its own reply or error (a pipeline without a transaction, errors
returned per call), so a ``NOSCRIPT`` or a script error reaches only the caller it
belongs to, exactly as a call sent alone; a connection failure reaches every caller of
the round, each of which retries as before.

Each round trip goes on a connection of ``Coalesced``'s own, made with the client's
connection settings (``OWN_CONNECTIONS`` at most, as many as rounds are in flight). The
client's own path (its pool's lock and readiness probe, its retry wrapper and events, a
pipeline's release task under ``asyncio.shield``) is paid on every round of a lone append:
``python bench/redis_call_costs.py`` (2026-12-02, plain asyncio) measured this process's
CPU for a lone script call at 211 µs through redis-py's client, 136 through one of its
connections, and 139 through ``Coalesced`` this way (a round of four calls: 249 µs). A
connection that fails mid-round is closed and dropped, never used again (what it holds
unread would answer the next round's calls); the next round connects afresh. Past the
bound, a round takes the client's path.

``later`` queues a command whose reply nobody waits for (a tenant's applied position,
``worker.service``) into the next round that has a script call in it (at most
``LATER_S`` later): it no longer makes a round trip of its own. Everything else (plain commands,
pipelines of its own) goes straight to the client. A Redis Cluster client is used as it
is: its pipelines split by slot, so there is nothing to gain per round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

# The longest a ``later`` command waits for a script call to go with. Each round trip
# costs Redis an event-loop turn (a read, an append-only-file write, a reply), and a
# shard's round made three: its read, its commit, then its tenant's applied position
# alone, since nothing else was queued when its commit answered. With it riding on the
# next round's read, Redis CPU per append with one append a round went 445 -> 345 µs
# (bench/lone_rounds.py, 3 -> 2 round trips, load average 5 on the 2-core machine). A
# shard's next round, or another shard's, almost always comes within this; a read that
# waits for the applied position (read your writes) needs it only when the shard's own
# position, written by the commit itself, lags behind the tenant's messages.
LATER_S = 0.01
# Connections of its own, at most (one per round in flight: a worker's shards wait for
# their commits in the same few rounds). Past it a round takes the client's pool.
OWN_CONNECTIONS = 4


class Coalesced:
    """A Redis client whose ``evalsha`` calls are sent together, one pipeline per turn of
    the event loop (see the module's docstring). Every other attribute is the client's."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        # (command and arguments, the caller's future; None: nobody waits for the reply)
        self._queued: list[tuple[tuple[Any, ...], asyncio.Future[Any] | None]] = []
        self._flushing: set[asyncio.Task[None]] = set()
        self._soon = False  # a send is due at the loop's next turn (a script call waits)
        self._timer: asyncio.TimerHandle | None = None  # ... or later (``later`` only)
        self._timeout: float | None = None  # the client's socket_timeout (``_connect``)
        self._idle: list[AbstractConnection] = []  # connections of its own, free
        self._own = 0  # connections of its own, free or in a round
        self.calls = 0  # script calls sent
        self.round_trips = 0  # ... in this many round trips

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)

    def evalsha(self, *args: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue(("EVALSHA", *args), future)
        return future

    def later(self, *command: Any) -> None:
        """Send ``command`` with the next script call, or ``LATER_S`` from now if none
        comes sooner; its reply (or error) is dropped."""
        self._queued.append((command, None))
        if not self._soon and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(LATER_S, self._send)

    async def drain(self) -> None:
        """Send what is queued now, wait for every round in flight (a stop: the applied
        positions ``later`` holds are not left behind), and close the connections of its
        own (the next round, if any, opens one again)."""
        self._send()
        if self._flushing:
            await asyncio.wait(list(self._flushing))
        idle, self._idle = self._idle, []
        self._own -= len(idle)
        for connection in idle:
            with contextlib.suppress(Exception):
                await connection.disconnect(nowait=True)

    def _queue(self, command: tuple[Any, ...], future: asyncio.Future[Any] | None) -> None:
        if not self._soon:
            self._soon = True
            asyncio.get_running_loop().call_soon(self._send)
        self._queued.append((command, future))

    def _send(self) -> None:
        self._soon = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._queued:
            return
        queued, self._queued = self._queued, []
        task = asyncio.ensure_future(self._round(queued))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _round(
        self, queued: list[tuple[tuple[Any, ...], asyncio.Future[Any] | None]]
    ) -> None:
        self.calls += len(queued)
        self.round_trips += 1
        replies: list[Any]
        try:
            if self._idle or self._own < OWN_CONNECTIONS:
                replies = await self._on_own_connection([command for command, _ in queued])
            elif len(queued) == 1:
                command = queued[0][0]
                sent = self._redis.execute_command(*command)  # type: ignore[no-untyped-call]
                replies = [await _outcome(sent)]
            else:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for command, _ in queued:
                        pipe.execute_command(*command)
                    replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # the round trip failed: every call of it did
            for _, future in queued:
                if future is not None and not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (the worker stops): so are its calls
            for _, future in queued:
                if future is not None:
                    future.cancel()
            raise
        for (_, future), reply in zip(queued, replies, strict=True):
            if future is None or future.done():  # nobody waits, or its caller was cancelled
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def _connect(self) -> AbstractConnection:
        """A connection of its own, as the client's pool would make one (its address,
        credentials and connect timeout) but with no timeout per socket operation: the
        round is bounded as a whole by the client's ``socket_timeout`` (``_timeout``).
        redis-py bounds each write with ``asyncio.wait_for``, a task per call."""
        pool = self._redis.connection_pool
        self._timeout = pool.connection_kwargs.get("socket_timeout")
        return pool.connection_class(**(pool.connection_kwargs | {"socket_timeout": None}))

    async def _on_own_connection(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """``commands`` in one round trip on a connection of its own: each reply, or its
        error as a value (as a pipeline without a transaction returns them). A connection
        that had been idle and turns out closed (Redis restarted, or closed it) is
        replaced once, as the client's pool would have noticed before using it."""
        while True:
            idle = bool(self._idle)
            if idle:
                connection = self._idle.pop()
            else:
                connection = self._connect()
                self._own += 1
            try:
                if self._timeout is None:
                    replies = await _exchange(connection, commands)
                else:
                    async with asyncio.timeout(self._timeout):
                        replies = await _exchange(connection, commands)
            except TimeoutError as exc:
                self._own -= 1
                with contextlib.suppress(Exception):
                    await connection.disconnect(nowait=True)
                raise RedisTimeoutError(f"no reply from Redis in {self._timeout} s") from exc
            except BaseException as exc:
                # Broken or cancelled mid-round: what it still holds unread would answer
                # the next round's calls. Closed and dropped. Sending the round again
                # after an idle connection's failure is safe for what goes this way: the
                # commit script recognises a command it applied already, and a ``later``
                # SET writes the same position again.
                self._own -= 1
                with contextlib.suppress(Exception):
                    await connection.disconnect(nowait=True)
                if idle and isinstance(exc, RedisConnectionError):
                    continue
                raise
            self._idle.append(connection)
            return replies


async def _exchange(connection: AbstractConnection, commands: list[tuple[Any, ...]]) -> list[Any]:
    if len(commands) == 1:
        packed = connection.pack_command(*commands[0])
    else:
        packed = connection.pack_commands(commands)
    # connects (and authenticates) first if it is not connected
    await connection.send_packed_command(packed, check_health=False)
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(await connection.read_response())
        except ResponseError as exc:  # this call's error; the next reply follows it
            replies.append(exc)
    return replies


async def _outcome(call: Any) -> Any:
    """A lone call's reply, or its error as a value (as a pipeline returns it)."""
    try:
        return await call
    except ResponseError as exc:
        return exc
