"""A lean JetStream pull consumer for one shard, with one long-lived pull request.

nats-py's ``PullSubscription.fetch`` waits for each message of a batch separately
(``next_msg`` under ``asyncio.wait_for``: a task and a timer per message) and may send two
pull requests per batch. At a few hundred messages a batch that bookkeeping cost the worker
more than deciding the commands. Here messages are collected by a subscription callback
into a list, and a fetch wakes once.

One pull request stays open across fetches: it asks for a batch and expires after
``expires_s``, and the server delivers each command as it is stored, until the batch is
delivered or the request expires; only then is the next one sent. A request per fetch
(``no_wait``, ended by a 404 status as soon as the server had nothing more) cost every
round of a paced shard a request and a status, and the server and the worker a wake-up
each. An idle shard costs one request per ``expires_s``.

A fetch returns what has come: at once when messages are in hand and the last of them
says the consumer had nothing more to deliver (its ``num_pending``), or the request's
batch is all delivered; otherwise while the rest of their burst keeps coming (no gap of
``BURST_GAP_S``), within ``timeout``. It waits up to ``timeout`` for the first message.
So a backlog still comes as one batch (the rebuild's replay, a shard catching up), and a
lone command is returned the moment it arrives.

Flow control: a new request asks for at most ``batch`` less the messages in hand, and is
sent only when the previous one is over, so what a fetch's caller receives never passes
the ``batch`` it asked for when the request went out (its window's room).

Each request has a reply subject of its own, so a status that ends an older request (one
given up for lost) is recognised and cannot end a newer one. Messages are kept in arrival
order, which is the consumer's delivery order, across fetches: one that arrives while no
fetch waits is returned by the next fetch, never dropped.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import APIError

from zeromem import naming

# JetStream status codes that can reach a pull request's reply subject.
_HEARTBEAT = "100"  # idle heartbeat (only if requested; skipped)
_EXPIRED = "408"  # the request's time ran out: the next one is sent at once
_ENDED = frozenset({"404", "408", "409"})  # no messages / expired / refused (consumer gone...)
_STATUS = "Status"
# How long a request lives on the server by default (the worker passes its idle pull).
REQUEST_EXPIRES_S = 5.0
# With messages in hand, a fetch waits this long for the next of their burst (the
# consumer said it had more): a burst is delivered back to back, and under a steady
# stream of commands the consumer nearly always has more, so waiting for it to have none
# would hold every fetch to its timeout (seen: unbatched appends applied at half the
# rate).
BURST_GAP_S = 0.002
# A request with no status this long past its expiry is taken as lost (a connection that
# broke and came back: the server forgot it) and the next one is sent.
LOST_AFTER_S = 1.0


def pending_after(reply: str) -> int:
    """How many messages the consumer had left to deliver when it delivered this one
    (the ``num_pending`` of its reply subject)."""
    tokens = reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(tokens[8])
    return int(tokens[Msg.Ack.NumPending])


class PullFeed:
    """Fetches batches from one durable pull consumer. Not safe for concurrent fetches
    (a shard has exactly one loop)."""

    def __init__(
        self, nc: NatsClient, stream: str, consumer: str, expires_s: float = REQUEST_EXPIRES_S
    ) -> None:
        self.nc = nc
        self.request_subject = naming.pull_request_subject(stream, consumer)
        self.expires_s = expires_s
        self._inbox = nc.new_inbox()
        self._sub: Any = None
        self._seq = 0
        self._reply = ""  # reply subject of the request open on the server ("" none)
        self._credit = 0  # messages the open request may still deliver
        self._lost_at = 0.0  # monotonic: the open request is taken as lost after this
        self._refused = False  # the last request ended without expiring (409 and the like)
        self._msgs: list[Msg] = []  # delivered, not yet returned: in delivery order
        self._more = False  # the last one delivered said the consumer had more
        self._want = 0  # a fetch waits: wake once this many messages are in hand
        self._first = False  # ... or at the first one (it waits with none in hand)
        self._waiter: asyncio.Future[None] | None = None
        self._error: Exception | None = None
        self._interrupted = False
        self._nudged = False

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
        """Up to ``batch`` messages, as soon as the burst they came in is complete (see
        the module's docstring); waits up to ``timeout`` for the first one (``timeout``
        0: only what is in hand). Raises ``TimeoutError`` if none came."""
        deadline = time.monotonic() + timeout
        self._refused = False
        while True:
            self._raise_error()
            if self._msgs and (self._interrupted or self._complete(batch)):
                break
            if self._interrupted or self._nudged:
                break
            now = time.monotonic()
            if self._reply and now > self._lost_at:
                self._reply, self._credit = "", 0
            if not self._reply and not self._refused and len(self._msgs) < batch:
                await self._request(batch - len(self._msgs), now)
            left = deadline - now
            if left <= 0:
                break
            if self._reply:  # bounded also by the open request's life: then the next one
                left = min(left, max(self._lost_at - now, 0.001))
            had = len(self._msgs)
            if had:  # the rest of a burst comes right behind its first messages
                left = min(left, BURST_GAP_S)
            if not await self._wait(batch, left) and had and len(self._msgs) == had:
                await asyncio.sleep(0)  # what the connection has read already
                if len(self._msgs) == had:
                    break  # none for a moment: what comes next is new commands
        self._nudged = False
        self._raise_error()
        if not self._msgs:
            raise TimeoutError
        return self._take(batch)

    def interrupt(self) -> None:
        """End the fetch in flight now, and every later one at once (the shard is being
        handed over, or its lease was lost): each returns what is in hand, or raises
        ``TimeoutError``. For good: a fetch that started just after would otherwise wait
        out its whole timeout."""
        self._interrupted = True
        self._wake()

    def nudge(self) -> None:
        """End the fetch in flight now (it returns what is in hand, or raises
        ``TimeoutError``): the shard has something else to do. The open request stays
        open; what it brings is returned by the next fetch, in order."""
        if self._waiter is not None:
            self._nudged = True
            self._wake()

    async def _wait(self, batch: int, timeout: float) -> bool:
        """Until woken (``_on_msg``, ``nudge``, ``interrupt``) or ``timeout``: whether
        woken."""
        self._want = batch
        self._first = not self._msgs
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            return False
        finally:
            self._waiter = None
            self._want = 0
            self._first = False
        return True

    def _complete(self, batch: int) -> bool:
        """The messages in hand are all the fetch gets without waiting for new commands:
        as many as asked for, all the consumer had, or all the open request will bring."""
        return len(self._msgs) >= batch or not self._more or not self._credit

    async def _request(self, batch: int, now: float) -> None:
        self._seq += 1
        self._reply = f"{self._inbox}.{self._seq}"
        self._credit = batch
        self._lost_at = now + self.expires_s + LOST_AFTER_S
        request = {"batch": batch, "expires": int(self.expires_s * 1e9)}
        await self.nc.publish(self.request_subject, json.dumps(request).encode(), reply=self._reply)

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

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
            self._reply, self._credit = "", 0
            if status not in _ENDED:  # e.g. 503 (no JetStream): the shard loop restarts
                self._error = APIError.from_msg(msg)
            elif status != _EXPIRED:
                # Refused (the consumer was deleted, ...): not asked again before the next
                # fetch, which a refusal every time would otherwise turn into a busy loop.
                self._refused = True
            self._wake()
            return
        self._msgs.append(msg)
        self._more = pending_after(msg.reply) > 0
        if self._credit:
            self._credit -= 1
            if not self._credit:
                self._reply = ""  # all it asked for: the server ends it without a status
        # The first of a burst wakes the fetch (which then waits out its burst, if the
        # consumer said it had more), and so does the one that ends it.
        if self._want and (
            self._first or len(self._msgs) >= self._want or not self._more or not self._credit
        ):
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
