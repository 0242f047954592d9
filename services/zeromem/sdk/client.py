"""``MemoryClient``: the agent's side of zeromem.

Writes are commands published to JetStream; by default the call returns as soon as the
message is handed to the connection (fire-and-forget), and the publish acknowledgement is
tracked in the background. ``wait="stored"`` returns once JetStream has the command,
``wait="applied"`` once a worker has applied it (new version) or refused it (conflict).

Reads go over NATS request-reply to the query service, so an agent never needs Redis.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import APIError, NoStreamResponseError
from opentelemetry import propagate, trace

from zeromem import naming
from zeromem.auth.authority import Credential
from zeromem.ids import new_command_id
from zeromem.schemas import (
    CONTENT_MAX_CHARS,
    WIRE_VERSION,
    Archive,
    Command,
    Delete,
    Expire,
    Feedback,
    FeedbackKind,
    Forget,
    InfoReply,
    MemoryKey,
    MemoryType,
    Patch,
    Put,
    Restore,
    Result,
    Touch,
    decode_result,
    encode,
    status_of,
)
from zeromem.sdk.acks import AckCounter
from zeromem.sdk.batching import CommandBatcher
from zeromem.sdk.connection import ErrorAwareJetStream, connect_or_refused, embedded_nats_url
from zeromem.sdk.errors import (
    CommandRefusedError,
    NoStreamError,
    ServiceUnavailableError,
    WaitTimeoutError,
    ZeromemError,
)
from zeromem.sdk.pacing import ShardPacer
from zeromem.sdk.reads import ReadMethods
from zeromem.sdk.receipts import Receipt, ReceiptStatus, Wait
from zeromem.settings import Settings
from zeromem.telemetry import Telemetry

__all__ = ["MemoryClient", "Receipt", "ReceiptStatus", "Wait"]


# by member or by value (a str enum hashes as its value); an enum call costs more
_MEMORY_TYPES: dict[str, MemoryType] = {t.value: t for t in MemoryType}
_OPS = {
    Put: "put",
    Patch: "patch",
    Delete: "delete",
    Expire: "expire",
    Feedback: "feedback",
    Touch: "touch",
    Forget: "forget",
    Archive: "archive",
    Restore: "restore",
}


class MemoryClient(ReadMethods):
    """An async client bound to one tenant and one agent identity."""

    def __init__(
        self,
        nc: NatsClient,
        *,
        tenant: str = "default",
        agent: str = "agent",
        shards: int = naming.DEFAULT_SHARDS,
        timeout: float = 5.0,
        own_connection: bool = False,
        telemetry: Telemetry | None = None,
        batch: bool = True,
        dedupe_secret: bytes = b"",
        read_your_writes: bool = True,
        pace_writes: bool = True,
    ) -> None:
        """A client on an open connection ``nc``. With authentication on, ``nc`` must be
        connected with this agent's credential and inbox prefix (``connect`` does both):
        the server refuses any other agent's subjects."""
        self.nc = nc
        self.js = ErrorAwareJetStream(nc)
        self.tenant = tenant
        self.agent = agent
        self.shards = shards
        self.timeout = timeout
        self.read_your_writes = read_your_writes
        self._own_connection = own_connection
        self._inbox = f"{naming.agent_inbox_prefix(tenant, agent)}.{uuid.uuid4().hex}"
        # The key of the dedupe ids' hash (see ``_dedupe_id``): the credential's secret,
        # so an id is the same for every process of this agent and nobody else's.
        self._dedupe_key = hashlib.blake2b(dedupe_secret or os.urandom(32), digest_size=32).digest()
        self._waiting: dict[str, asyncio.Future[Result]] = {}
        self._reply_sub: Any = None
        self._acks = AckCounter(nc, self._inbox)
        # Over its tenant's write quota, a shard's commands wait as the workers say.
        self.pacer = ShardPacer(nc, naming.throttle_subject(tenant, agent)) if pace_writes else None
        # fire-and-forget commands to one shard, issued back to back, share a message
        self._batcher = (
            CommandBatcher(self._acks, dedupe_id=self._dedupe_id, pacer=self.pacer)
            if batch
            else None
        )
        self.telemetry = telemetry or Telemetry()
        self._published = self.telemetry.commands_published
        # An agent writes the same keys again and again, and parsing and hashing each was
        # 8% of its cost per write: each key's route is kept.
        self._route = functools.lru_cache(maxsize=4096)(self._find_route)

    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        *,
        tenant: str | None = None,
        agent: str | None = None,
        creds: str | Path | Credential | None = None,
        token: str | None = None,
        shards: int | Literal["auto"] | None = None,
        timeout: float = 5.0,
        telemetry: Telemetry | None = None,
        batch: bool = True,
        settings: Settings | None = None,
        read_your_writes: bool = True,
        pace_writes: bool = True,
    ) -> MemoryClient:
        """Connect to ``url``; without one, ZEROMEM_NATS_URL / NATS_URL, then the embedded
        stack ``zeromem up`` runs in this directory. ``creds`` is a creds file (or
        ``token`` a bearer token) issued by ``zeromem auth issue``; without either, the
        environment's (ZEROMEM_CREDS, NATS_CREDS, ZEROMEM_TOKEN), then the local stack's
        authority (see ``zeromem.auth.credentials``). ``tenant`` and ``agent`` default to
        the credential's own. ``batch=False`` sends every fire-and-forget write as a
        message of its own (see ``zeromem.sdk.batching``). ``settings`` (default: from the
        environment) says where the local stack and its authority are. ``shards="auto"``
        asks the read services for the deployment's shard count (``discover``) instead of
        taking it from the settings. ``read_your_writes`` (on by default): a get, list or
        recall sees every write this client issued before it, fire-and-forget ones too
        (it names their positions in the command log, and the read service waits, a
        bounded time, until they are applied; ``zeromem.query.consistency``).
        ``pace_writes`` (on by default): while a worker says this agent's tenant is over
        its write quota on a shard, commands to it wait instead of being refused
        (``zeromem.sdk.pacing``)."""
        from zeromem.auth.credentials import agent_credential, check_identity, nats_options

        settings = settings or Settings.from_env()
        if not url:
            url = settings.bus.nats_url or embedded_nats_url(settings)
        credential = agent_credential(settings, tenant or "default", agent or "agent", creds, token)
        tenant, agent = check_identity(credential, tenant or "", agent or "")
        tenant, agent = tenant or "default", agent or "agent"
        made: list[MemoryClient] = []

        async def on_reconnect() -> None:
            for client in made:
                client._acks.forget_outstanding()

        options = nats_options(
            settings.with_urls(url, settings.store.redis_url),
            credential,
            inbox_prefix=naming.agent_inbox_prefix(tenant, agent),
        )
        nc = await connect_or_refused(
            url,
            name=f"zeromem-sdk-{agent}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            reconnected_cb=on_reconnect,
            **options,
        )
        secret = (credential.seed or credential.jwt).encode() if credential else b""
        client = cls(
            nc,
            tenant=tenant,
            agent=agent,
            shards=settings.shards if shards in (None, "auto") else shards,  # type: ignore[arg-type]
            timeout=timeout,
            own_connection=True,
            telemetry=telemetry,
            batch=batch,
            dedupe_secret=secret,
            read_your_writes=read_your_writes,
            pace_writes=pace_writes,
        )
        made.append(client)
        if shards == "auto":
            try:
                await client.discover()
            except BaseException:
                await nc.close()
                raise
        return client

    @property
    def publish_failures(self) -> int:
        """Fire-and-forget writes that JetStream refused or that could not be sent
        (each is also logged)."""
        return self._acks.failures + (self._batcher.unsent if self._batcher else 0)

    async def close(self) -> None:
        await self.flush()
        await self._acks.close()
        if self.pacer is not None:
            await self.pacer.stop()
        if self._reply_sub is not None:
            with contextlib.suppress(Exception):
                await self._reply_sub.unsubscribe()
        if self._own_connection:
            await self.nc.drain()

    async def __aenter__(self) -> MemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every fire-and-forget write so far is stored by JetStream."""
        if self._batcher is not None:
            await self._batcher.send_all()
        await self.nc.flush()
        await asyncio.wait_for(self._acks.drained(), timeout or self.timeout * 6)

    # --- writes --------------------------------------------------------------------------

    async def put(
        self,
        key: str,
        value: Any = None,
        *,
        content: str | None = None,
        type: MemoryType | str = MemoryType.FACT,
        tags: Iterable[str] = (),
        references: Iterable[str] = (),
        source: str | None = None,
        confidence: float = 1.0,
        ttl: float | None = None,
        expected_version: int | None = None,
        wait: Wait | str = Wait.NONE,
        refresh_on_read: bool = False,
        sensitive: bool = False,
        created_at: float | None = None,
        updated_at: float | None = None,
        index_key: bool = False,
    ) -> Receipt:
        """Create or replace the memory at ``key`` (``namespace:owner:name``); a key with
        no name (``task:t42``) appends a new memory under a generated, time-ordered name.
        ``refresh_on_read``: every read pushes the expiry ``ttl`` further (sliding TTL).
        ``sensitive``: content and value never appear in the audit trail or a log line.
        ``created_at`` / ``updated_at``: the memory's own times (epoch seconds), within the
        workers' ``max_clock_skew_s`` of now (older ones: ``zeromem import``).
        ``index_key``: recall matches the key's name too."""
        return await self.send(
            Put(
                **self._envelope(key, expected_version),
                value=value,
                content=_fit_content(content),
                type=_MEMORY_TYPES.get(type) or MemoryType(type),  # the call raises on a bad one
                tags=tuple(tags),
                references=tuple(references),
                source=source,
                confidence=confidence,
                ttl_s=ttl,
                refresh_on_read=refresh_on_read,
                sensitive=sensitive,
                created_at=created_at,
                updated_at=updated_at,
                index_key=index_key,
            ),
            wait,
        )

    async def patch(
        self,
        key: str,
        patch: dict[str, Any],
        *,
        content: str | None = None,
        tags: Iterable[str] | None = None,
        expected_version: int | None = None,
        wait: Wait | str = Wait.NONE,
    ) -> Receipt:
        """Merge ``patch`` into the memory's value (JSON merge patch: ``None`` removes)."""
        return await self.send(
            Patch(
                **self._envelope(key, expected_version),
                patch=patch,
                content=_fit_content(content),
                tags=None if tags is None else tuple(tags),
            ),
            wait,
        )

    async def delete(
        self, key: str, *, expected_version: int | None = None, wait: Wait | str = Wait.NONE
    ) -> Receipt:
        return await self.send(Delete(**self._envelope(key, expected_version)), wait)

    async def expire(
        self,
        key: str,
        ttl: float | None,
        *,
        expected_version: int | None = None,
        wait: Wait | str = Wait.NONE,
        refresh_on_read: bool | None = None,
    ) -> Receipt:
        """Let the memory live ``ttl`` more seconds; ``ttl=None`` keeps it forever.
        ``refresh_on_read`` turns sliding expiry on or off (``None``: unchanged)."""
        return await self.send(
            Expire(
                **self._envelope(key, expected_version), ttl_s=ttl, refresh_on_read=refresh_on_read
            ),
            wait,
        )

    async def feedback(
        self, key: str, kind: FeedbackKind | str, *, wait: Wait | str = Wait.NONE
    ) -> Receipt:
        """Count ``liked``, ``disliked`` or ``important`` on a memory (weighs recall)."""
        return await self.send(Feedback(**self._envelope(key, None), kind=FeedbackKind(kind)), wait)

    async def forget(
        self,
        owner: str,
        *,
        prefix: str = "",
        since: float | None = None,
        until: float | None = None,
        last_seconds: float | None = None,
        wait: Wait | str = Wait.APPLIED,
    ) -> Receipt:
        """Delete, as one command, the memories of ``owner`` (``session:s1``) whose key
        starts with ``prefix`` and that were last updated within [since, until];
        ``last_seconds=600`` is "the last ten minutes". Atomic for the owner and ordered
        with its other commands; ``receipt.result.keys`` lists what was forgotten."""
        if last_seconds is not None:
            since = time.time() - last_seconds
        return await self.send(
            Forget(**self._envelope(owner, None), prefix=prefix, since=since, until=until), wait
        )

    async def archive(
        self, owner: str, *, older_than: float, prefix: str = "", wait: Wait | str = Wait.APPLIED
    ) -> Receipt:
        """Move the owner's memories last updated before ``older_than`` (epoch seconds)
        to the archive tier; ``receipt.result.keys`` lists them."""
        return await self.send(
            Archive(**self._envelope(owner, None), older_than=older_than, prefix=prefix), wait
        )

    async def restore(
        self, key: str, *, expected_version: int | None = None, wait: Wait | str = Wait.APPLIED
    ) -> Receipt:
        """Bring an archived memory back (its version continues past the archive's)."""
        return await self.send(Restore(**self._envelope(key, expected_version)), wait)

    def _envelope(self, key: str, expected_version: int | None) -> dict[str, Any]:
        return {
            "id": new_command_id(),
            "tenant": self.tenant,
            "agent": self.agent,
            "ts": time.time(),
            "key": key,
            "expected_version": expected_version,
        }

    async def send(
        self, command: Command, wait: Wait | str = Wait.NONE, *, importing: bool = False
    ) -> Receipt:
        """Publish any command (built by hand or by the helpers above). ``importing``:
        on the import subject, where a put may carry older times (``zeromem import``; a
        credential needs the right to publish there)."""
        wait = wait if type(wait) is Wait else Wait(wait)
        subject, named = self._route(command.tenant, command.agent, command.key, importing)
        owner_command = type(command) in (Forget, Archive)
        key = command.key if named or owner_command else f"{command.key}:{command.id}"
        headers = {naming.MSG_ID_HEADER: self._dedupe_id(command.id)}
        traced = trace.get_current_span().get_span_context().is_valid
        if traced:
            # W3C trace context rides in the headers: the worker's apply joins this trace.
            propagate.inject(headers)
        self._published.add(
            1,
            {
                "zeromem.tenant": command.tenant,
                "zeromem.agent": command.agent,
                "zeromem.op": _OPS[type(command)],
            },
        )
        batcher = self._batcher
        if batcher is not None:
            if wait is Wait.NONE and not traced:  # a traced write goes alone, with its context
                await batcher.add(subject, command.id, encode(command))
                return Receipt(command.id, key, "published")
            await batcher.send(subject)  # what was issued before this goes before it
        await self._pace(subject)
        if wait is Wait.NONE:
            await self._acks.publish(subject, encode(command), headers)
            return Receipt(command.id, key, "published")
        result_future: asyncio.Future[Result] | None = None
        if wait is Wait.APPLIED:
            await self._ensure_reply_subscription()
            headers[naming.REPLY_HEADER] = f"{self._inbox}.{command.id}"
            result_future = asyncio.get_running_loop().create_future()
            self._waiting[command.id] = result_future
        ack_future = await self.js.publish_async(subject, encode(command), headers=headers)
        try:
            ack = await asyncio.wait_for(ack_future, self.timeout)
        except TimeoutError:
            self._waiting.pop(command.id, None)
            raise ServiceUnavailableError("JetStream", self.timeout) from None
        except NoStreamResponseError:
            self._waiting.pop(command.id, None)
            raise NoStreamError(subject, self.shards) from None
        except APIError as exc:  # the stream refused it (full: see CommandRefusedError)
            self._waiting.pop(command.id, None)
            raise CommandRefusedError(subject, exc.description or str(exc)) from None
        self._acks.note_position(naming.parse_command_subject(subject)[1], ack.seq)
        if result_future is None or ack.duplicate:
            # A duplicate was stored before: this publish delivers nothing to a worker, so
            # no result would come for it (it was, or will be, applied as it was then).
            self._waiting.pop(command.id, None)
            return Receipt(command.id, key, "stored", ack.seq, bool(ack.duplicate))
        try:
            result = await asyncio.wait_for(result_future, self.timeout)
        except TimeoutError:
            raise WaitTimeoutError(command.id, self.timeout) from None
        finally:
            self._waiting.pop(command.id, None)
        self._acks.note_applied(naming.parse_command_subject(subject)[1], ack.seq)
        return Receipt(command.id, key, status_of(result), ack.seq, bool(ack.duplicate), result)

    async def _pace(self, subject: str) -> None:
        """Until a command to ``subject``'s shard may go (sdk.pacing); counted as sent."""
        pacer = self.pacer
        if pacer is not None:
            shard = naming.parse_command_subject(subject)[1]
            await pacer.wait(shard)
            pacer.spent(shard, 1)

    def route(self, tenant: str, agent: str, key: str, importing: bool = False) -> tuple[str, bool]:
        """(the subject a command on ``key`` goes to, whether the key names a memory)."""
        return self._route(tenant, agent, key, importing)

    def _find_route(
        self, tenant: str, agent: str, key: str, importing: bool = False
    ) -> tuple[str, bool]:
        """(the command or import subject, whether the key names a memory)."""
        parsed = MemoryKey.parse(key)  # fail fast, in the agent, on a bad key
        shard = naming.shard_for(tenant, parsed.owner, self.shards)
        subject = naming.import_subject if importing else naming.command_subject
        return subject(tenant, shard, agent), parsed.name is not None

    def _dedupe_id(self, command_id: str) -> str:
        """JetStream's dedupe id of a command: scoped to this tenant and agent, and a keyed
        hash of the command id, so another client can neither collide with it by chance
        nor publish it first to have this command dropped as a duplicate."""
        digest = hashlib.blake2b(command_id.encode(), key=self._dedupe_key, digest_size=15)
        return naming.command_dedupe_id(
            self.tenant, self.agent, base64.b32encode(digest.digest()).decode()
        )

    async def _ensure_reply_subscription(self) -> None:
        if self._reply_sub is None:
            self._reply_sub = await self.nc.subscribe(f"{self._inbox}.*", cb=self._on_result)

    async def _on_result(self, msg: Msg) -> None:
        future = self._waiting.get(msg.subject.rsplit(".", 1)[-1])
        if future is not None and not future.done():
            future.set_result(decode_result(msg.data))

    async def discover(self) -> InfoReply:
        """Take the shard count from the deployment (``info``), so commands reach the right
        shard whatever this process's settings say; refuses another contract version."""
        info = await self.info()
        if info.version != WIRE_VERSION:
            raise ZeromemError(
                f"the deployment speaks wire contract v{info.version}, this SDK v{WIRE_VERSION}"
            )
        if info.shards != self.shards:
            self.shards = info.shards
            self._route.cache_clear()
        return info


def _fit_content(content: str | None) -> str | None:
    """Content over the limit is summarised by the encoder rather than rejected."""
    if content is None or len(content) <= CONTENT_MAX_CHARS:
        return content
    from zeromem.encoding import default_encoder

    return default_encoder().encode(content)
