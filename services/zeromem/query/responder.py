"""The one mechanism every read (info, get, list, stats, owners, archived, recall) is
answered by: a plain nats-py queue subscription per kind, a task per request.

Why not FastStream, which the design names: it cannot meet recall's latency target.
Measured with ``bench/read_mechanism.py`` (one run each, 2,000 memories in scope, the same
admission and gate on every side, requests one at a time; raw NATS request-reply p50
0.34 ms), p50 of a trivial reply (``info``) and of a recall, two runs on a quiet machine:

    mechanism                                         info       recall
    a nats-py subscription, a task per request        0.34-0.41  1.63-1.67 ms
    FastStream tuned (apply_types=False, a decoder    0.54-0.59  1.82-2.07 ms
      passing the nats-py message through, msgspec
      decode in the handler, no_reply, logger=None,
      max_workers)
    FastStream as the read services used it           0.76-0.83  2.09-2.79 ms

FastStream's per-message machinery (its parser, middleware chain, context and worker
pool) costs 0.2-0.4 ms a request even with everything that can be turned off turned off:
12-25% of a recall, which is what the latency target is about. (A third run, with this
responder itself and the machine's load at 5.5: info 0.40 ms here, 0.64 tuned FastStream,
0.94 as used; recalls took 4 ms on every side and told nothing apart.) So all reads share
this responder, not two mechanisms side by side. The AsyncAPI document never came from
FastStream: ``zeromem.schemas.asyncapi`` builds it from the wire contract itself (the
names in ``zeromem.naming`` and the JSON Schemas), and ``make schemas`` writes it.

What every request goes through, in order:

- the subscription's callback (nats-py runs a subscription's callbacks one after another,
  so this one never waits): the tenant's budget (``TenantGate.admit``) and this
  responder's bound on requests in hand; a refusal is answered at once. Any other
  request gets a task of its own, so one tenant's flood never queues another's;
- in the task, a span joining the caller's trace (``traceparent``), the admission of the
  request (``query.admission``), the tenant's turn (``TenantGate.slot``) and the answer;
- a refusal (``Refused``) is a ``bad_request`` ``ErrorReply`` (past the tenant's refusal
  rate, sent after a delay: ``TenantGate.refusal_delay``), any other failure an
  ``internal`` one (logged, at most once per ``Limits.log_interval_s`` per kind of
  failure); both carry the code in the ``Zm-Error`` header too;
- what an answer does after its reply (a recall's metrics, usage and audit record) runs
  once the reply is sent, never before it.

``stop`` drains: the subscriptions stop taking requests, the requests in hand finish.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry import propagate
from opentelemetry.trace import SpanKind, Tracer

from zeromem import naming
from zeromem.limits import refusal
from zeromem.logs import BoundedLog
from zeromem.query.admission import Refused, admit_request, tenant_of_query_subject
from zeromem.query.gate import OVERLOADED, TenantGate
from zeromem.schemas import ErrorCode, ErrorReply, encode

log = logging.getLogger(__name__)
T = TypeVar("T")


class Answer(NamedTuple):
    """A reply's body, and what to do once it is sent (bookkeeping that must not delay
    it)."""

    body: bytes
    after: Callable[[], object] | None = None


@dataclass(frozen=True, slots=True)
class _Route:
    kind: str
    request_type: type[Any]
    answer: Callable[[Any], Awaitable[Answer]]
    queue: str


class Responder:
    def __init__(self, nc: NatsClient, gate: TenantGate, tracer: Tracer) -> None:
        self.nc = nc
        self.gate = gate
        self.tracer = tracer
        self._routes: dict[str, _Route] = {}
        self._subs: dict[str, Subscription] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._late: set[asyncio.Task[None]] = set()  # refusals waiting their delay
        self._log = BoundedLog(log, gate.limits.log_interval_s)

    def route(
        self,
        kind: str,
        request_type: type[T],
        answer: Callable[[T], Awaitable[Answer]],
        *,
        queue: str = naming.QUERY_QUEUE_GROUP,
    ) -> None:
        """Answer ``kind`` requests (``zm.q.<tenant>.<agent>.<kind>``), decoded as
        ``request_type``, with ``answer`` (which raises ``Refused`` for a bad request).
        ``queue`` is the NATS queue group the replicas share the subject in."""
        if kind in self._routes:
            raise ValueError(f"{kind!r} is answered already")
        self._routes[kind] = _Route(kind, request_type, answer, queue)

    async def start(self) -> Responder:
        for kind, route in self._routes.items():
            self._subs[kind] = await self.nc.subscribe(
                naming.query_subject_all(kind), queue=route.queue, cb=self._receiver(route)
            )
        # A round trip: the server holds every subscription once this returns, so a
        # request sent after start (and after readiness says so) finds a responder.
        await self.nc.flush()
        return self

    async def stop(self) -> None:
        """Take no more requests (those the subscriptions hold still get their task),
        then let every request in hand finish."""
        subs, self._subs = self._subs, {}
        for kind, sub in subs.items():
            try:
                await sub.drain()  # type: ignore[no-untyped-call]  # nats-py leaves it unannotated
            except Exception as exc:  # the connection is closed or down: nothing more comes
                log.warning("%s: the subscription did not drain (%r)", kind, exc)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._late:
            await asyncio.gather(*self._late, return_exceptions=True)

    @property
    def in_hand(self) -> int:
        """Requests being answered (or waiting for their tenant's turn)."""
        return len(self._tasks)

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        return dict(self._subs)

    def _receiver(self, route: _Route) -> Callable[[Msg], Awaitable[None]]:
        limits = self.gate.limits
        # Every request the gate lets wait or run, whoever's: beyond that the gate would
        # refuse each one anyway, once its task reached it.
        most = limits.reads_queued + limits.reads_in_flight

        async def on_request(msg: Msg) -> None:
            if not msg.reply:
                return  # a publish, not a request: nobody to answer
            tenant = tenant_of_query_subject(msg.subject)
            refused = self.gate.admit(tenant)
            if refused is None and len(self._tasks) >= most:
                refused = (
                    OVERLOADED,
                    refusal("reads_queued", f"the service has {len(self._tasks)} requests in hand"),
                )
            if refused is not None:
                await self._refuse(msg, tenant, *refused)
                return
            task = asyncio.create_task(self._answer(msg, tenant, route))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return on_request

    async def _answer(self, msg: Msg, tenant: str, route: _Route) -> None:
        # The agent's trace continues here: one agent turn is one trace.
        parent = propagate.extract(msg.headers or {})
        with self.tracer.start_as_current_span(
            f"zeromem {route.kind}", context=parent, kind=SpanKind.SERVER
        ) as span:
            span.set_attribute("zeromem.tenant", tenant)
            try:
                request = admit_request(msg.subject, msg.data, route.request_type, self.gate.limits)
                async with self.gate.slot(tenant):
                    answer = await route.answer(request)
            except Refused as exc:
                await self._refuse(msg, tenant, "bad_request", str(exc))
                return
            except Exception as exc:  # every request gets an answer, even a bug's
                self._log.error(
                    ("read", route.kind, type(exc)), "%s failed", route.kind, exc_info=exc
                )
                await self._error(msg, "internal", f"{route.kind} failed; see the service log")
                return
            await self.nc.publish(msg.reply, answer.body)
            if answer.after is not None:
                # publish() only queues the reply for the client's flusher task, which is
                # already scheduled to run: a callback scheduled now runs after it, once
                # the reply is sent (and, scheduled here, still within this span's context).
                asyncio.get_running_loop().call_soon(answer.after)

    async def _refuse(self, msg: Msg, tenant: str, code: ErrorCode, message: str) -> None:
        """Answer a refusal: at once, or after the tenant's refusal delay (query.gate), in a
        task of its own that holds nothing else up."""
        delay = self.gate.refusal_delay(tenant)
        if not delay:
            await self._error(msg, code, message)
            return
        task = asyncio.create_task(self._refuse_later(msg, tenant, code, message, delay))
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    async def _refuse_later(
        self, msg: Msg, tenant: str, code: ErrorCode, message: str, delay: float
    ) -> None:
        try:
            await asyncio.sleep(delay)
            await self._error(msg, code, message)
        except Exception as exc:  # the connection closed meanwhile: nobody to tell
            self._log.warning(("late refusal", type(exc)), "a delayed refusal: %r", exc)
        finally:
            self.gate.refusal_sent(tenant)

    async def _error(self, msg: Msg, code: ErrorCode, message: str) -> None:
        await self.nc.publish(
            msg.reply,
            encode(ErrorReply(error=message, code=code)),
            headers={naming.ERROR_HEADER: code},
        )
