"""A lean JetStream pull consumer for one shard.

nats-py's ``PullSubscription.fetch`` waits for each message of a batch separately
(``next_msg`` under ``asyncio.wait_for``: a task and a timer per message) and may send two
pull requests per batch. At a few hundred messages a batch that bookkeeping cost the worker
more than deciding the commands. Here one pull request asks for a whole batch and the
messages are collected by a subscription callback into a list; the fetch wakes once, when
the batch is complete or the server says the request is over.

The request uses ``no_wait`` together with ``expires``: the server then waits up to
``expires`` for the first message, delivers what it has (up to ``batch``) and ends the
request with a 404 status as soon as nothing more is available (nats-server >= 2.9).
An idle shard therefore costs one request per ``expires``; a busy one gets every batch in
one round trip.

Each request has a reply subject of its own, so a status that ends an older request (one
whose fetch already gave up) is recognised and cannot cut a newer fetch short. Messages
are kept in arrival order, which is the consumer's delivery order, across fetches: one that
arrives after its fetch timed out is returned by the next fetch, never dropped.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import APIError

from zeromem import naming

# JetStream status codes that can reach a pull request's reply subject.
_HEARTBEAT = "100"  # idle heartbeat (only if requested; skipped)
_ENDED = frozenset({"404", "408", "409"})  # no messages / request expired / request refused
_STATUS = "Status"


class PullFeed:
    """Fetches batches from one durable pull consumer. Not safe for concurrent fetches
    (a shard has exactly one loop)."""

    def __init__(self, nc: NatsClient, stream: str, consumer: str) -> None:
        self.nc = nc
        self.request_subject = naming.pull_request_subject(stream, consumer)
        self._inbox = nc.new_inbox()
        self._sub: Any = None
        self._seq = 0
        self._reply = ""  # reply subject of the request in flight
        self._msgs: list[Msg] = []  # delivered, not yet returned: in delivery order
        self._target = 0  # fetch in flight: wake once this many messages are in hand
        self._waiter: asyncio.Future[None] | None = None
        self._error: Exception | None = None
        self._interrupted = False

    async def start(self) -> PullFeed:
        # No pending limits: a fetch never has more than one batch in flight, and a dropped
        # message (nats-py drops on a full subscription) would stall the shard until ack_wait.
        self._sub = await self.nc.subscribe(
            f"{self._inbox}.*", cb=self._on_msg, pending_msgs_limit=0, pending_bytes_limit=0
        )
        return self

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await sub.unsubscribe()

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages; waits up to ``timeout`` for the first one and returns
        as soon as the server has no more. Raises ``TimeoutError`` if none came."""
        if self._msgs and (len(self._msgs) >= batch or self._interrupted):
            return self._take(batch)
        if self._interrupted:
            raise TimeoutError
        self._seq += 1
        self._reply = f"{self._inbox}.{self._seq}"
        self._target = batch
        request: dict[str, Any] = {"batch": batch - len(self._msgs), "no_wait": True}
        if not self._msgs:  # with messages in hand, only ask for what is there right now
            request["expires"] = max(int(timeout * 1e9) - 50_000_000, 1_000_000)
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        await self.nc.publish(self.request_subject, json.dumps(request).encode(), reply=self._reply)
        try:
            # The server ends the request itself just before ``timeout``; waiting a little
            # longer only matters if the connection is down.
            async with asyncio.timeout(timeout + 0.5):
                await waiter
        except TimeoutError:
            pass
        finally:
            self._waiter = None
            self._reply = ""
            self._target = 0
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if not self._msgs:
            raise TimeoutError
        return self._take(batch)

    def interrupt(self) -> None:
        """End the fetch in flight now, and every later one at once (the shard is being
        handed over, or its lease was lost): each returns what is in hand, or raises
        ``TimeoutError``. For good: a fetch that started just after would otherwise wait
        out its whole expiry."""
        self._interrupted = True
        self._wake()

    def nudge(self) -> None:
        """End the fetch in flight now (it returns what is in hand, or raises
        ``TimeoutError``): the shard has something else to do. Its request may still
        deliver; what it brings is returned by the next fetch, in order."""
        self._wake()

    def _take(self, batch: int) -> list[Msg]:
        msgs = self._msgs
        if len(msgs) <= batch:
            self._msgs = []
            return msgs
        self._msgs = msgs[batch:]
        return msgs[:batch]

    async def _on_msg(self, msg: Msg) -> None:
        if not msg.reply:
            # A status from the server. A stored message always has a reply subject (its
            # ack subject), so an agent's own "Status" header cannot make it look like one.
            status = (msg.headers or {}).get(_STATUS)
            if status is None or status == _HEARTBEAT or msg.subject != self._reply:
                return  # a heartbeat, or the end of an older request
            if status not in _ENDED:  # e.g. 503 (no JetStream): the shard loop restarts
                self._error = APIError.from_msg(msg)
            self._wake()
            return
        self._msgs.append(msg)
        if len(self._msgs) >= self._target > 0:
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
