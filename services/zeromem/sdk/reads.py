"""The read half of :class:`~zeromem.sdk.client.MemoryClient`: get, list, recall, owners,
archived, info, stats and search as NATS request-reply to the read services (an agent never
needs Redis), and the change feed and audit trail it reads from JetStream.

A mixin, so the client stays one object for its users while its reads and its writes (which
publish commands to JetStream: ``sdk.client``) live apart.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from opentelemetry import propagate, trace

from zeromem import naming
from zeromem.schemas import (
    ArchivedReply,
    ArchivedRequest,
    AuditEntry,
    ErrorReply,
    GetReply,
    GetRequest,
    InfoReply,
    InfoRequest,
    ListReply,
    ListRequest,
    MemoryItem,
    MemoryKey,
    MemoryType,
    OwnersReply,
    OwnersRequest,
    RecalledMemory,
    RecallReply,
    RecallRequest,
    RecallScope,
    RecallStrategy,
    StatsReply,
    StatsRequest,
    decode,
    encode,
    parse_strategy,
)
from zeromem.schemas.strategies import NoDecayStrategy
from zeromem.sdk.acks import AckCounter
from zeromem.sdk.batching import CommandBatcher
from zeromem.sdk.errors import (
    NoResponderError,
    RequestRejectedError,
    ServiceUnavailableError,
)
from zeromem.sdk.feed import ChangeFeed

log = logging.getLogger(__name__)

T = TypeVar("T")

# A request that finds no read service subscribed is sent again after these waits (0.75 s
# in all) before NoResponderError: a read service restarting or resubscribing after a
# reconnect is back within that, and right after a read service started, a request has
# met "no responders" although its subscriptions had been flushed (seen a few times in the
# test suite on this 2-core machine; cause not found).
NO_RESPONDER_RETRIES_S = (0.05, 0.1, 0.2, 0.4)

_MISSING: Any = object()


class ReadMethods:
    """Reads for a client bound to one tenant and agent (see ``MemoryClient``)."""

    # Set by MemoryClient.__init__; declared here so the reads type-check on their own.
    nc: NatsClient
    tenant: str
    agent: str
    timeout: float
    shards: int
    read_your_writes: bool
    _acks: AckCounter
    _batcher: CommandBatcher | None

    async def _own_writes(self, owners: Iterable[str] | None) -> tuple[tuple[int, int], ...]:
        """Read your writes: the positions in the command log of this client's writes to
        the shards of ``owners`` (None: every shard it wrote to), once every write issued
        before this read has been sent and acknowledged (bounded by ``timeout``: a read
        that cannot learn a position goes without it)."""
        if not self.read_your_writes:
            return ()
        if self._batcher is not None:
            await self._batcher.send_all()
        acks = self._acks
        if owners is None:
            shards = set(acks.positions) | acks.unacknowledged_shards()
        else:
            shards = {naming.shard_for(self.tenant, owner, self.shards) for owner in owners}
        # Only the shards with a write still unacknowledged: a wait on the others returns
        # at once, yet gathering them under a timeout cost every read of a client that
        # had ever written four turns of the event loop (a task per wait, the gather, the
        # timeout) and 30-38 µs of CPU, against 2-4 µs now (measured in a loop of 5,000
        # reads of one owner, all writes acknowledged, on a stack at load average 5).
        waits = [acks.settled(shard) for shard in shards if acks.unsettled(shard)]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), self.timeout)
            except TimeoutError:
                log.warning("read your writes: acknowledgements still missing; reading without")
        after = ((s, acks.unapplied(s)) for s in sorted(shards))
        return tuple((s, position) for s, position in after if position is not None)

    async def get(
        self, key: str, default: Any = _MISSING, *, slide: bool = True
    ) -> MemoryItem | Any:
        """The memory at ``key``; ``None`` (or ``default``) when there is none. With a
        default, an unreachable query service also yields the default instead of raising.
        ``slide=False``: a look that does not push a sliding expiry out."""
        after = await self._own_writes(_owner_of_key(key))
        request = GetRequest(
            tenant=self.tenant, reader=self.agent, key=key, slide=slide, after=after
        )
        try:
            reply = await self._request("get", request, GetReply)
        except ServiceUnavailableError:
            if default is _MISSING:
                raise
            log.warning("query service unreachable; returning the default for %s", key)
            return default
        if reply.found:
            return reply.item
        return None if default is _MISSING else default

    async def get_value(self, key: str, default: Any = None) -> Any:
        """The value at ``key``, or ``default`` when it is missing or unreachable."""
        item = await self.get(key, default=None)
        return default if item is None else item.value

    async def list(
        self,
        prefix: str = "",
        *,
        cursor: str = "",
        limit: int = 100,
        with_items: bool = True,
        slide: bool = True,
    ) -> ListReply:
        """One page of memories whose key starts with ``prefix``; pass ``next_cursor`` on."""
        request = ListRequest(
            tenant=self.tenant,
            reader=self.agent,
            prefix=prefix,
            cursor=cursor,
            limit=limit,
            with_items=with_items,
            slide=slide,
            after=await self._own_writes(_owner_of_prefix(prefix)),
        )
        return await self._request("list", request, ListReply)

    async def iter_list(
        self, prefix: str = "", *, page_size: int = 100
    ) -> AsyncIterator[MemoryItem]:
        cursor = ""
        while True:
            page = await self.list(prefix, cursor=cursor, limit=page_size)
            for item in page.items:
                yield item
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def recall(
        self,
        query: str = "",
        *,
        owners: Iterable[str] = (),
        prefix: str = "",
        types: Iterable[MemoryType | str] = (),
        tags: Iterable[str] = (),
        since: float | None = None,
        until: float | None = None,
        k: int = 5,
        budget: int = 1500,
        encoding: str = "cl100k_base",
        strategy: RecallStrategy | dict[str, Any] | None = None,
        explain: bool = False,
        history_tokens: int = 0,
        include_archived: bool = False,
    ) -> RecallReply:
        """The memories that matter for ``query`` within ``owners`` (e.g. ``user:u1``,
        ``task:t42``), ranked and packed into ``budget`` tokens. ``reply.context`` is the
        block to put in the prompt; ``reply.baseline_tokens`` is what injecting every
        memory that passed the filters would have cost. ``history_tokens``, when the agent
        reports it, is what carrying its whole history would have cost (for the metrics).
        ``strategy``: a ``zeromem.schemas.strategies`` struct or its plain form
        (``{"name": "by_tag", "tags": ["billing"]}``); a bad one raises ``StrategyError``
        here, before any round trip."""
        scope = RecallScope(
            owners=tuple(owners),
            prefix=prefix,
            types=tuple(MemoryType(t) for t in types),
            tags=tuple(tags),
            since=since,
            until=until,
        )
        request = RecallRequest(
            tenant=self.tenant,
            reader=self.agent,
            query=query,
            scope=scope,
            k=k,
            budget=budget,
            encoding=encoding,
            strategy=parse_strategy(strategy),
            explain=explain,
            history_tokens=history_tokens,
            include_archived=include_archived,
            after=await self._own_writes(scope.owners or _owner_of_prefix(prefix)),
        )
        return await self._request("recall", request, RecallReply)

    async def owners(self, prefix: str = "", *, cursor: str = "", limit: int = 50) -> OwnersReply:
        """One page of the owners (``user:u1``) holding memories, with their live and
        archived counts, whose name starts with ``prefix``; pass ``next_cursor`` on."""
        request = OwnersRequest(
            tenant=self.tenant, reader=self.agent, prefix=prefix, cursor=cursor, limit=limit
        )
        return await self._request("owners", request, OwnersReply)

    async def archived(
        self, owner: str, *, key: str = "", cursor: str = "", limit: int = 50
    ) -> ArchivedReply:
        """One page of ``owner``'s archive tier (or the archived memory ``key``)."""
        request = ArchivedRequest(
            tenant=self.tenant, reader=self.agent, owner=owner, key=key, cursor=cursor, limit=limit
        )
        return await self._request("archived", request, ArchivedReply)

    async def info(self) -> InfoReply:
        """The deployment's contract version, shard count and limits (the ``info`` query)."""
        return await self._request(
            "info", InfoRequest(tenant=self.tenant, reader=self.agent), InfoReply
        )

    async def stats(self, since: float = 0.0, until: float = 0.0) -> StatsReply:
        """This tenant's recall token usage per agent and minute (for ``zeromem stats``)."""
        return await self._request(
            "stats",
            StatsRequest(tenant=self.tenant, reader=self.agent, since=since, until=until),
            StatsReply,
        )

    async def search(
        self, keyword: str, *, owners: Iterable[str] = (), prefix: str = "", limit: int = 10
    ) -> builtins.list[RecalledMemory]:
        """Memories matching ``keyword`` by relevance alone (no decay, no budget to speak
        of): the tool layer's search."""
        reply = await self.recall(
            keyword,
            owners=owners,
            prefix=prefix,
            k=limit,
            budget=200_000,
            strategy=NoDecayStrategy(),
        )
        return [m for m in reply.memories if not m.via]

    async def _request(self, kind: str, request: Any, reply_type: type[T]) -> T:
        subject = naming.query_subject(self.tenant, self.agent, kind)
        headers: dict[str, str] = {}
        if trace.get_current_span().get_span_context().is_valid:
            propagate.inject(headers)
        data = encode(request)
        waits = iter(NO_RESPONDER_RETRIES_S)
        while True:
            try:
                msg = await self.nc.request(
                    subject, data, timeout=self.timeout, headers=headers or None
                )
                break
            except NoRespondersError:
                # Nobody subscribed this instant: a read service restarting (a rolling
                # deploy, a reconnect) is back within moments. Told at once past that.
                wait = next(waits, None)
                if wait is None:
                    raise NoResponderError(kind) from None
                await asyncio.sleep(wait)
            except (NatsTimeoutError, TimeoutError):
                raise ServiceUnavailableError(kind, self.timeout) from None
        if msg.headers and naming.ERROR_HEADER in msg.headers:
            error = decode(msg.data, ErrorReply)
            raise RequestRejectedError(error.code, error.error)
        return decode(msg.data, reply_type)

    async def watch(
        self,
        scope: str,
        *,
        since_position: int | None = None,
        since_time: float | None = None,
        from_start: bool = False,
    ) -> ChangeFeed:
        """Subscribe to the changes of a scope (``task:t42:*``, ``user:u1``, ``task:*``):
        only new ones by default; after ``since_position`` (an event's ``position``) or
        from ``since_time`` to resume after a disconnect. Iterate it, or ``await
        feed.next(timeout)``; ``await feed.close()`` when done."""
        return await ChangeFeed(
            self.nc,
            self.tenant,
            scope,
            since_position=since_position,
            since_time=since_time,
            from_start=from_start,
        ).start()

    async def audit(
        self, *, key: str | None = None, agent: str | None = None, since: float | None = None
    ) -> builtins.list[AuditEntry]:
        """This tenant's audit trail, in order: every applied, conflicting and rejected
        command and every read, filtered by key and / or agent (sensitive values redacted)."""
        from zeromem.lifecycle.audit import read_audit

        return await read_audit(self.nc, self.tenant, key=key, agent=agent, since=since)


def _owner_of_prefix(prefix: str) -> tuple[str, ...] | None:
    """The one owner a key prefix lies within (``user:u1:`` and ``user:u1:pref`` are
    ``user:u1``'s), or None when it may span several (``user:u1`` also starts
    ``user:u10``'s keys)."""
    parts = prefix.split(":", 2)
    return (f"{parts[0]}:{parts[1]}",) if len(parts) == 3 and parts[0] and parts[1] else None


def _owner_of_key(key: str) -> tuple[str, ...]:
    """The owner of ``key``; none for a key the service will refuse anyway."""
    try:
        return (MemoryKey.parse(key).owner,)
    except ValueError:
        return ()
