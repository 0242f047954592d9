"""The change feed, as an agent subscribes to it: ``MemoryClient.watch("task:t42:*")``.

Every applied, conflicting or rejected command is published by the worker on
``zm.chg.{tenant}.{shard}.{namespace}.{owner}`` and retained by the ``ZM_CHANGES``
stream, so a subscriber that went away resumes exactly where it stopped: each event
carries its ``position`` (the change stream's sequence times ``MAX_BATCH_RESULTS`` plus
the event's index in its message: under bulk writes one message carries several of an
owner's results), and ``watch(..., since_position=p)`` delivers everything after it, in
order. ``since_time`` resumes from a
moment instead. Events repeated by the log itself (a worker that crashed between apply
and acknowledgement publishes its results again) are dropped by command id, so a
subscriber sees each change once.

The feed reads through a pull consumer of its own whose filter is named in the consumer's
create subject: the server lets an agent create consumers on ``ZM_CHANGES`` only with a
filter inside its own tenant (docs/security.md). If the consumer goes away (idle past
``IDLE_S``, a server restart) the feed opens a new one after the last message it saw.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from zeromem import naming
from zeromem.schemas import Applied, Conflict, Result, decode_results, status_of

_SEEN_LIMIT = 65536  # command ids remembered for dropping repeats
_SCALE = naming.MAX_BATCH_RESULTS
IDLE_S = 300.0  # the server drops a feed's consumer nobody pulled from for this long
_FETCH = 256  # messages per pull
_POLL_S = 5.0  # one pull's longest wait when the caller waits without a limit


def results_of(msg: Any) -> list[Result]:
    """The results a change-feed message carries (one, or a batch of one owner's)."""
    headers = msg.headers
    return decode_results(msg.data, bool(headers) and naming.BATCH_HEADER in headers)


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    position: int  # resume after this event with ``since_position=position``
    time: float  # when the change was published
    result: Result

    @property
    def key(self) -> str:
        return self.result.key

    @property
    def op(self) -> str:
        return self.result.op

    @property
    def status(self) -> str:
        return {Applied: "applied", Conflict: "conflict"}.get(type(self.result), "rejected")

    @property
    def version(self) -> int:
        result = self.result
        return result.version if isinstance(result, Applied) else 0


def parse_scope(scope: str) -> tuple[str, str, str]:
    """``task:t42:*`` -> (``task``, ``t42``, key prefix ``task:t42:``); ``task:*`` -> every
    task owner; ``task:t42:step*`` -> keys starting with ``task:t42:step``."""
    glob = scope.endswith("*")
    base = scope[:-1] if glob else scope
    parts = base.split(":", 2)
    namespace = parts[0] or "*"
    owner_id = parts[1] if len(parts) > 1 and parts[1] else "*"
    if owner_id == "*":
        return namespace, "*", f"{namespace}:" if namespace != "*" else ""
    prefix = base if len(parts) > 2 or glob else f"{namespace}:{owner_id}"
    return namespace, owner_id, prefix


class ChangeFeed:
    def __init__(
        self,
        nc: NatsClient,
        tenant: str,
        scope: str,
        *,
        since_position: int | None = None,
        since_time: float | None = None,
        from_start: bool = False,
    ) -> None:
        self.nc = nc
        self.tenant = tenant
        self.scope = scope
        self.namespace, self.owner_id, self.prefix = parse_scope(scope)
        self.position = since_position or 0
        self._resume_after = self.position  # events at or before it were seen already
        self._ready: deque[ChangeEvent] = deque()
        self._since_time = since_time
        self._from_start = from_start
        self._sub: Any = None
        self._stream_seq = 0  # the last change-stream message this feed has seen
        self._name = ""  # its consumer
        self._seen: OrderedDict[str, None] = OrderedDict()

    async def start(self) -> ChangeFeed:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
        if self.position:
            # from the message holding that event: the rest of its events come next
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=self.position // _SCALE,
            )
        elif self._since_time is not None:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_TIME,
                opt_start_time=datetime.fromtimestamp(self._since_time, UTC),
            )
        elif self._from_start:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
        await self._open(config)
        return self

    async def _open(self, config: ConsumerConfig) -> None:
        js = self.nc.jetstream()
        name = self.nc._nuid.next().decode()  # unguessable: consumers are not listed
        config.name = name
        config.filter_subject = naming.change_watch_subject(
            self.tenant, self.namespace, self.owner_id
        )
        config.ack_policy = AckPolicy.NONE  # the feed keeps its own position
        config.inactive_threshold = IDLE_S
        config.mem_storage = True
        config.num_replicas = 1
        info = await js.add_consumer(naming.CHANGE_STREAM, config)
        self._name = name
        # where the stream stood: a reopened consumer starts after it at the earliest
        delivered = info.delivered.stream_seq if info.delivered is not None else 0
        self._stream_seq = max(self._stream_seq, delivered or 0)
        self._sub = await js.pull_subscribe_bind(consumer=name, stream=naming.CHANGE_STREAM)

    async def _reopen(self) -> None:
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self._stream_seq + 1
        )
        await self._open(config)

    async def next(self, timeout: float | None = None) -> ChangeEvent:
        """The next change in scope; ``TimeoutError`` if none came within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        reopened = False
        while not self._ready:
            wait = _POLL_S if deadline is None else deadline - time.monotonic()
            if wait <= 0:
                raise TimeoutError
            try:
                msgs = await self._sub.fetch(_FETCH, timeout=max(wait, 0.001))
            except (NatsTimeoutError, TimeoutError):
                continue
            except Exception:
                if reopened:
                    raise
                reopened = True  # the consumer is gone (idle too long, a restart)
                await self._reopen()
                continue
            for msg in msgs:
                self._take(msg)
        event = self._ready.popleft()
        self.position = event.position
        return event

    def _take(self, msg: Any) -> None:
        meta = msg.metadata
        self._stream_seq = max(self._stream_seq, meta.sequence.stream)
        first = meta.sequence.stream * _SCALE
        at = meta.timestamp.timestamp()
        results = results_of(msg)
        for index, result in enumerate(results):
            position = first + index
            if position <= self._resume_after:
                continue
            if (
                self.prefix
                and not (result.key + ":").startswith(self.prefix)
                and not result.key.startswith(self.prefix)
                and not any(k.startswith(self.prefix) for k in getattr(result, "keys", ()))
            ):
                continue
            ident = f"{result.command_id}|{status_of(result)}"
            if ident in self._seen:
                continue
            self._seen[ident] = None
            if len(self._seen) > _SEEN_LIMIT:
                self._seen.popitem(last=False)
            self._ready.append(ChangeEvent(position, at, result))
        if not self._ready:  # nothing in scope: still moved past it
            self.position = max(self.position, first + len(results) - 1)

    def __aiter__(self) -> ChangeFeed:
        return self

    async def __anext__(self) -> ChangeEvent:
        return await self.next()

    async def close(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            with contextlib.suppress(Exception):  # else the server drops it after IDLE_S
                await self.nc.jetstream().delete_consumer(naming.CHANGE_STREAM, self._name)

    async def __aenter__(self) -> ChangeFeed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
