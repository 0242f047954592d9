"""A LangGraph ``BaseStore`` backed by zeromem: swap the store, keep the graph.

Mapping
-------
A LangGraph item ``(namespace, key)`` becomes the memory
``{prefix}:{esc(namespace[0])}:{esc(namespace[1])}/.../{esc(key)}``, for example
``("users", "u1", "prefs"), "theme"`` -> ``lg:users:u1/prefs/theme``. The first label is
the zeromem owner, so one first label is one ordering and sharding unit (its writes apply
in order); the remaining labels and the key form the memory name. The memory ``value`` is
the item's dict exactly; its ``content`` is derived by the workers' encoder from the value,
so a LangGraph item is also recallable by ``zeromem recall``.

Escaping: the key grammar allows ``[A-Za-z0-9_-]`` in owners and ``[A-Za-z0-9_-./@]`` in
names. Every character outside ``[A-Za-z0-9-]`` is written as ``_XX`` per UTF-8 byte
(``_`` itself as ``__``, the empty string as a lone ``_``), so the mapping is reversible and
``/`` never occurs inside a component.

Limits (honest)
---------------
* Length: the escaped first label must fit in 64 characters and the escaped rest of the
  namespace plus the key, joined by ``/``, in 128. Non-ASCII costs 3 characters per UTF-8
  byte (a CJK character is 9). Beyond that ``put``/``get`` raise ``ValueError``. Depth is
  otherwise unlimited.
* ``search`` and ``list_namespaces`` page through every memory under the prefix (1000 per
  request) and filter in the client: fine for thousands of items per prefix, not millions.
* ``query`` ranks by BM25 over the value's text (no embeddings): items matching a query
  term come first by score, then every other item that passes the filter with
  ``score=None``, in the order a search without a query gives. LangGraph's InMemoryStore
  without an index ignores the query, so the two return the same items, ranked differently.
* Order of results without a query follows InMemoryStore (namespaces in order of creation,
  items in order of creation; a rewrite keeps its place), approximated from ``created_at``:
  a namespace whose oldest item was deleted moves back to the position of its oldest live one.
* ``list_namespaces`` lists namespaces that hold at least one live item, as the Postgres
  store does. InMemoryStore also lists a namespace that was emptied by deletes, or only
  read from; that is the one deliberate difference.
* TTL (``supports_ttl = True``; minutes, as in LangGraph) maps to the memory's expiry. A
  read with ``refresh_ttl`` re-arms it with an ``expire`` command, which (unlike the
  Postgres store) also moves ``updated_at`` and the version.
* ``index`` arguments are accepted and ignored (there is no vector index).

Writes wait for ``applied`` by default so a read right after a write sees it, as with any
LangGraph store; ``wait="none"`` gives fire-and-forget writes for a store that only appends.

Many operations at once
-----------------------
LangGraph's own store tests start a thousand searches or namespace listings at once.
Sent as they come, each a full scan of pages, they queued at the read service past its
per-tenant limits and 18-39% failed with "no answer within 5.0s". Now reads share work
and take turns: concurrent scans of one prefix (search, list_namespaces) and gets of one
key share a single request (those asked for while one is under way share the next, so
each still sees every write that finished before it was asked), and at most
``read_concurrency`` requests are in flight, so the client's timeout (``timeout=``) runs
from when a request is sent, never while it waits its turn.

Any event loop
--------------
The client answers on the loop its connection was made on. A store used from another
loop (a ``connect_sync`` store awaited in async code, or a store shared between threads)
runs each batch on the client's loop and awaits it from the caller's.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable
from typing import Any, TypeVar

from zeromem.extras import require

require("langgraph", "langgraph", "zeromem's LangGraph store")
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from zeromem.integrations.langgraph_keys import escape, unescape
from zeromem.integrations.langgraph_semantics import (
    Row,
    bm25_scores,
    compare_values,
    does_match,
    insertion_order,
    utc_datetime,
)
from zeromem.schemas import MemoryItem, MemoryKey, MemoryType
from zeromem.sdk.client import MemoryClient, Wait
from zeromem.settings import Settings

try:  # newer langgraph validates the labels of ops handed straight to batch()
    from langgraph.store.base import validate_op_namespace as _validate_op
except ImportError:  # pragma: no cover - older langgraph

    def _validate_op(op: Op) -> None:
        return None


T = TypeVar("T")
TTL_TAG = "lgttl:"  # tag carrying the item's TTL in seconds, for refresh on read
_PAGE = 1000


class ZeromemStore(BaseStore):
    """LangGraph store over zeromem (see the module docstring for the mapping and limits).

    Async use (``aget``/``aput``/``asearch``...) needs only a connected ``MemoryClient``.
    Sync use (``get``/``put``...) needs the client's event loop running in another thread:
    build the store with :meth:`connect_sync`, or pass ``loop=`` yourself.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        client: MemoryClient,
        *,
        prefix: str = "lg",
        ttl: TTLConfig | None = None,
        wait: Wait | str = Wait.APPLIED,
        loop: asyncio.AbstractEventLoop | None = None,
        read_concurrency: int = 16,
    ) -> None:
        MemoryKey.parse(f"{prefix}:x")  # the prefix must be a valid zeromem namespace
        if read_concurrency < 1:
            raise ValueError("read_concurrency must be at least 1")
        self.client = client
        self.prefix = prefix
        self.ttl_config = ttl
        self.wait = Wait(wait)
        self.read_concurrency = read_concurrency
        self._loop = loop
        self._thread: threading.Thread | None = None
        self._home: asyncio.AbstractEventLoop | None
        # The loop the client answers on: ``loop``, else the one the store was made on.
        try:
            self._home = loop or asyncio.get_running_loop()
        except RuntimeError:
            self._home = None
        # Per event loop (a store built outside any loop may be used from several).
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._shared: dict[tuple[asyncio.AbstractEventLoop, Hashable], _Shared] = {}

    @classmethod
    def connect_sync(
        cls,
        url: str | None = None,
        *,
        tenant: str | None = None,
        agent: str | None = None,
        shards: int | None = None,
        creds: str | None = None,
        timeout: float = 5.0,
        **kwargs: Any,
    ) -> ZeromemStore:
        """A store usable from synchronous code (and from any event loop): its client
        lives on a daemon loop thread. ``creds``: the agent's creds file (else
        ZEROMEM_CREDS / NATS_CREDS, or the local stack's authority, as
        ``MemoryClient.connect``); tenant and agent default to the credential's, else
        ``default`` and ``langgraph``. ``timeout``: seconds per request once sent."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True, name="zeromem-store")
        thread.start()
        settings = Settings.from_env()
        if creds is None and not settings.bus.nats_creds:
            tenant, agent = tenant or "default", agent or "langgraph"
        connect = MemoryClient.connect(
            url,
            tenant=tenant,
            agent=agent,
            shards=shards,
            creds=creds,
            timeout=timeout,
            settings=settings,
        )
        client = asyncio.run_coroutine_threadsafe(connect, loop).result()
        store = cls(client, loop=loop, **kwargs)
        store._thread = thread
        return store

    def close(self) -> None:
        """Close a store made by :meth:`connect_sync` (its client and loop thread)."""
        if self._thread is None or self._loop is None:
            return
        self._run(self.client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
        self._thread, self._loop = None, None

    # --- the two entry points ------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._run(self.abatch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Reads see the store as it was before this batch's writes; of several writes to
        one item the last wins (the InMemoryStore semantics)."""
        ops = list(ops)
        home = self._home
        if home is not None and home.is_running():
            try:
                here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                here = None
            if here is not home:  # the client's futures live there: run it there
                done = asyncio.run_coroutine_threadsafe(self._abatch(ops), home)
                return await asyncio.wrap_future(done)
        return await self._abatch(ops)

    async def _abatch(self, ops: list[Op]) -> list[Result]:
        for op in ops:
            _validate_op(op)
        results: list[Result] = [None] * len(ops)
        reads: list[tuple[int, Coroutine[Any, Any, Result]]] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                reads.append((i, self._get(op)))
            elif isinstance(op, SearchOp):
                reads.append((i, self._search(op)))
            elif isinstance(op, ListNamespacesOp):
                reads.append((i, self._list_namespaces(op)))
            elif isinstance(op, PutOp):
                self.key_for(op.namespace, op.key)  # refuse an unmappable item up front
                puts[(op.namespace, op.key)] = op
            else:  # the types say it cannot happen; a caller's Python can still do it
                for _, coro in reads:  # type: ignore[unreachable]
                    coro.close()
                raise ValueError(f"Unknown operation type: {type(op)}")
        if reads:
            answers = await asyncio.gather(*(coro for _, coro in reads))
            for (i, _), answer in zip(reads, answers, strict=True):
                results[i] = answer
        if puts:
            await asyncio.gather(*(self._put(op) for op in puts.values()))
        return results

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coro.close()
            raise RuntimeError(
                "sync calls need ZeromemStore.connect_sync() or loop=; "
                "in async code use aget/aput/asearch"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise RuntimeError(
                "a sync store call on the store's own loop would deadlock; use the a* methods there"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # --- mapping ------------------------------------------------------------------------

    def key_for(self, namespace: tuple[str, ...], key: str) -> str:
        """The zeromem key of a LangGraph item (``ValueError`` when it cannot fit)."""
        if not namespace:
            raise ValueError("a LangGraph namespace has at least one label")
        owner = escape(namespace[0])
        name = "/".join([*(escape(label) for label in namespace[1:]), escape(str(key))])
        if len(owner) > 64 or len(name) > 128:
            raise ValueError(
                f"namespace {namespace!r} / key {key!r} is too long for a zeromem key once "
                "escaped (first label <= 64 chars, the rest <= 128; non-ASCII takes 3 per byte)"
            )
        return f"{self.prefix}:{owner}:{name}"

    def parse_key(self, zm_key: str) -> tuple[tuple[str, ...], str]:
        parsed = MemoryKey.parse(zm_key)
        parts = (parsed.name or "").split("/")
        labels = (unescape(parsed.owner_id), *(unescape(p) for p in parts[:-1]))
        return labels, unescape(parts[-1])

    def _list_prefix(self, namespace_prefix: tuple[str, ...]) -> str:
        if not namespace_prefix:
            return f"{self.prefix}:"
        rest = "".join(f"{escape(label)}/" for label in namespace_prefix[1:])
        return f"{self.prefix}:{escape(namespace_prefix[0])}:{rest}"

    # --- operations ---------------------------------------------------------------------

    # --- reads, shared and taking turns -------------------------------------------------

    async def _turn(self, request: Callable[[], Awaitable[T]]) -> T:
        """``request()`` once one of ``read_concurrency`` places is free."""
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = asyncio.Semaphore(self.read_concurrency)
        async with turns:
            return await request()

    async def _share(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        """The answer of one ``read()`` shared by every caller that asked for ``key``
        while it waited; callers arriving while it runs share the next one."""
        loop = asyncio.get_running_loop()
        slot = (loop, key)
        shared = self._shared.get(slot)
        if shared is None:
            shared = self._shared[slot] = _Shared()
        if shared.next is None:
            shared.next = loop.create_future()
            if shared.runner is None:
                shared.runner = loop.create_task(self._serve(slot, shared, read))
        return await asyncio.shield(shared.next)

    async def _serve(
        self, slot: tuple[asyncio.AbstractEventLoop, Hashable], shared: _Shared, read: Any
    ) -> None:
        try:
            while shared.next is not None:
                answer, shared.next = shared.next, None
                try:
                    answer.set_result(await read())
                except Exception as exc:
                    answer.set_exception(exc)
                except BaseException:  # cancelled (the loop is closing): nobody waits on
                    answer.cancel()
                    raise
        finally:
            shared.runner = None
            if shared.next is not None:  # asked for after a cancellation: not served
                shared.next.cancel()
                shared.next = None
            if self._shared.get(slot) is shared:
                del self._shared[slot]

    async def _get(self, op: GetOp) -> Item | None:
        key = self.key_for(op.namespace, op.key)
        found = await self._share(("get", key), lambda: self._turn(lambda: self.client.get(key)))
        if found is None:
            return None
        if op.refresh_ttl:
            await self._refresh([found])
        return self._item(found, op.namespace, op.key)

    async def _put(self, op: PutOp) -> None:
        key = self.key_for(op.namespace, op.key)
        if op.value is None:
            # Deleting what is not there is not an error for a LangGraph store.
            await self.client.delete(key, wait=self.wait)
            return
        ttl_s = None if op.ttl is None else float(op.ttl) * 60.0
        tags = () if ttl_s is None else (f"{TTL_TAG}{ttl_s:g}",)
        await self.client.put(
            key,
            dict(op.value),
            type=MemoryType.FACT,
            tags=tags,
            ttl=ttl_s,
            source="langgraph",
            wait=self.wait,
        )

    async def _scan(self, namespace_prefix: tuple[str, ...]) -> list[Row]:
        """Every live item under the prefix, parsed and in insertion order, shared by the
        concurrent scans of it (a thousand searches parse and sort once, not each)."""
        prefix = self._list_prefix(namespace_prefix)
        return await self._share(("scan", prefix), lambda: self._rows(prefix))

    async def _rows(self, prefix: str) -> list[Row]:
        found: list[MemoryItem] = []
        cursor = ""
        while True:
            page = await self._turn(
                lambda: self.client.list(prefix, cursor=cursor, limit=_PAGE)  # noqa: B023
            )
            found += page.items
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        rows = [Row(*self.parse_key(item.key), item) for item in found]
        return insertion_order(rows)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        rows = [
            row
            for row in await self._scan(prefix)
            if row.namespace[: len(prefix)] == prefix
            and isinstance(row.item.value, dict)
            and (
                not op.filter
                or all(compare_values(row.item.value.get(k), v) for k, v in op.filter.items())
            )
        ]
        scores: list[float | None] = [None] * len(rows)
        if op.query:
            scores = bm25_scores(
                op.query, [json.dumps(r.item.value, ensure_ascii=False, default=str) for r in rows]
            )
            order = sorted(
                range(len(rows)), key=lambda i: (scores[i] is None, -(scores[i] or 0), i)
            )
            rows = [rows[i] for i in order]
            scores = [scores[i] for i in order]
        start = max(op.offset, 0)
        window = slice(start, start + max(op.limit, 0))
        kept, kept_scores = rows[window], scores[window]
        if op.refresh_ttl:
            await self._refresh([r.item for r in kept])
        return [
            SearchItem(
                namespace=row.namespace,
                key=row.key,
                value=dict(row.item.value),
                created_at=row.created_at,
                updated_at=row.updated_at,
                score=score,
            )
            for row, score in zip(kept, kept_scores, strict=True)
        ]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = {row.namespace for row in await self._scan(())}
        if op.match_conditions:
            namespaces = {
                ns for ns in namespaces if all(does_match(c, ns) for c in op.match_conditions)
            }
        if op.max_depth is not None:
            namespaces = {ns[: op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    async def _refresh(self, items: Iterable[MemoryItem]) -> None:
        """Re-arm the TTL of items written with one (fire-and-forget: a read never waits)."""
        for item in items:
            ttl_s = _ttl_of(item)
            if ttl_s is not None:
                await self.client.expire(item.key, ttl_s)

    def _item(self, found: MemoryItem, namespace: tuple[str, ...], key: str) -> Item:
        return Item(
            value=dict(found.value),
            key=key,
            namespace=namespace,
            created_at=utc_datetime(found.created_at),
            updated_at=utc_datetime(found.updated_at),
        )


class _Shared:
    """One shared read's state: the answer the callers waiting now will get, and the task
    that runs the reads one after another while callers keep coming."""

    __slots__ = ("next", "runner")

    def __init__(self) -> None:
        self.next: asyncio.Future[Any] | None = None
        self.runner: asyncio.Task[None] | None = None


def _ttl_of(item: MemoryItem) -> float | None:
    for tag in item.tags:
        if tag.startswith(TTL_TAG):
            try:
                return float(tag[len(TTL_TAG) :])
            except ValueError:
                return None
    return None
