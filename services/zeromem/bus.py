"""Connections and the JetStream layout (streams and the workers' shard consumers).

``provision`` is idempotent: every process calls it at start, so the first one to run on
a fresh server creates the layout and the others find it in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from typing import Any, cast

from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError, ServiceUnavailableError
from redis.asyncio import Connection, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from zeromem import naming
from zeromem.settings import Settings
from zeromem.store.keys import Layout, use_layout

log = logging.getLogger(__name__)


class _Client(NatsClient):
    """nats-py's client with a cheaper parse of message headers (every command carries
    some). nats-py checks each character of each header name with a generator expression
    (``any(c.isspace() for c in key)``), which cost the worker about a tenth of its time;
    this is the same parse with one ``str.split`` per name. Same input, same dict."""

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in raw.split(b"\r\n"):
            if not line:
                continue
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            try:
                key = name.strip().decode("ascii")
            except UnicodeDecodeError:
                continue
            # A name with whitespace inside is invalid and skipped: ``split()`` returns the
            # name unchanged exactly when it has no whitespace character (str.isspace).
            if key and key.split() != [key]:
                continue
            out[key] = value.strip().decode("utf-8", "replace")
        return out


class _Connection(Connection):
    """redis-py's connection with a one-pass pack of a command's arguments. redis-py
    encodes each argument through a chain of ``isinstance`` tests and appends it to a
    growing buffer, near a microsecond an argument: packing recall's survey call (46
    arguments at 12 query terms: its keys, limits, term factors) took 38 µs of the 160-210
    µs of the read service's CPU the whole call takes, 14 µs this way (timeit, load
    average 6). The write path's commit calls pack as many arguments per command.
    This packs the usual arguments (str, bytes, int, float, none longer than redis-py's
    buffer cutoff) into one buffer with a single join, byte for byte what redis-py sends
    (tests/unit/test_bus_packing.py); any other argument leaves the command to redis-py."""

    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        if type(head) is str:
            command = (*head.encode().split(), *args[1:])
        elif type(head) is bytes:
            command = (*head.split(), *args[1:]) if b" " in head else args
        else:
            return super().pack_command(*args)
        encoding, errors = self.encoder.encoding, self.encoder.encoding_errors
        cutoff = self._buffer_cutoff
        parts = [b"*%d\r\n" % len(command)]
        for arg in command:
            kind = type(arg)
            if kind is bytes:
                value = arg
            elif kind is str:
                value = arg.encode(encoding, errors)
            elif kind is int or kind is float:
                value = repr(arg).encode()
            else:  # bool (refused), memoryview, subclasses: redis-py's own way
                return super().pack_command(*args)
            if len(value) > cutoff:  # sent in pieces, uncopied: redis-py's own way
                return super().pack_command(*args)
            parts.append(b"$%d\r\n%b\r\n" % (len(value), value))
        return [b"".join(parts)]


def nats_connect_options(settings: Settings) -> dict[str, Any]:
    """A service's credential (``settings.bus.nats_creds`` or ``nats_token``), its inbox
    prefix and TLS, as ``nats.connect`` keyword arguments."""
    from zeromem.auth.credentials import Identity, credential_from_settings, nats_options

    credential = credential_from_settings(settings)
    return nats_options(settings, credential, inbox_prefix=Identity.of(credential).inbox_prefix())


def connection_events(name: str, client: NatsClient | None = None) -> dict[str, Any]:
    """Callbacks that log a service connection's losses and returns, one line each.
    nats-py's default logs a traceback per failed reconnect attempt (four a second with a
    broker down), which buried the one line that said when the service was back. nats-py
    also reports its own ``close()`` as a disconnection: given the ``client``, that one is
    not logged."""

    async def on_error(error: Exception) -> None:
        log.warning("%s: NATS: %s", name, error or type(error).__name__)

    async def on_disconnected() -> None:
        if client is None or not client.is_closed:
            log.warning("%s: disconnected from NATS, reconnecting", name)

    async def on_reconnected() -> None:
        log.warning("%s: reconnected to NATS", name)

    return {
        "error_cb": on_error,
        "disconnected_cb": on_disconnected,
        "reconnected_cb": on_reconnected,
    }


async def connect_nats(settings: Settings, name: str) -> NatsClient:
    nc = _Client() if hasattr(NatsClient, "_parse_header_lines") else NatsClient()
    await nc.connect(
        settings.bus.nats_servers,
        name=name,
        max_reconnect_attempts=-1,  # a service outlives a broker restart
        # nats-py sleeps this float between attempts; its annotation says int
        reconnect_time_wait=0.25,  # type: ignore[arg-type]
        pending_size=64 * 1024 * 1024,
        **connection_events(name, nc),
        **nats_connect_options(settings),
    )
    return nc


def redis_options(settings: Settings) -> dict[str, Any]:
    """User, password and TLS for ``Redis.from_url`` (when not in the URL itself)."""
    options: dict[str, Any] = {}
    if settings.store.redis_username:
        options["username"] = settings.store.redis_username
    if settings.store.redis_password:
        options["password"] = settings.store.redis_password
    if settings.store.server_url.startswith("rediss://"):  # TLS is chosen by the URL's scheme
        options["ssl_ca_certs"] = settings.store.redis_tls_ca or None
        options["ssl_certfile"] = settings.store.redis_tls_cert or None
        options["ssl_keyfile"] = settings.store.redis_tls_key or None
    return options


# The read services' bound on one Redis command (connect included). Without one a read
# waited as long as the socket did: a Redis that stops answering without closing it (a
# paused process, a partition) held a slot of the read gate, and the tenant's turn,
# for ever. A read that takes this long has outlived its caller's timeout (the SDK's
# default is 5 s) anyway; it now fails (``internal``, logged) and frees its slot.
READ_COMMAND_TIMEOUT_S = 5.0


def key_layout(settings: Settings) -> Layout:
    """How the Redis of ``settings`` names its keys (``store.keys.Layout``)."""
    return Layout(cluster=settings.store.cluster, shards=settings.shards)


def connect_redis(settings: Settings, command_timeout_s: float | None = None) -> Redis:
    """The Redis client; ``command_timeout_s`` bounds each command (None: unbounded, for
    the write path, whose scripts and rebuilds may run long). On a Redis Cluster
    (``StoreSettings.cluster``) redis-py's cluster client, typed as ``Redis``: zeromem
    calls only what both answer alike (single-slot commands and scripts, pipelines
    without transactions, and ``store.pieces`` for the rest); the process names its keys
    in the cluster's layout from now on (``store.keys.use_layout``)."""
    store = settings.store
    use_layout(key_layout(settings))
    if store.cluster:
        return cast(
            Redis,
            RedisCluster.from_url(
                store.server_url,
                decode_responses=False,
                health_check_interval=10,
                socket_timeout=command_timeout_s,
                socket_connect_timeout=command_timeout_s,
                **redis_options(settings),
            ),
        )
    return Redis.from_url(
        store.server_url,
        # a TLS (rediss://) or Unix socket URL picks redis-py's connection class instead
        connection_class=_Connection,
        # A pooled connection that Redis closed (a restart, a client kill, an idle cut by
        # a proxy) fails its next command; redis-py's default tries none again, so after
        # a Redis restart every read service failed one request per pooled connection
        # ("internal"). Once more, on a new connection: a Redis that is down refuses that
        # at once too. Not on a timeout, which would double a read's bound.
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        decode_responses=False,
        health_check_interval=10,
        socket_timeout=command_timeout_s,
        socket_connect_timeout=command_timeout_s,
        **redis_options(settings),
    )


def command_stream_config(settings: Settings) -> StreamConfig:
    """The command log. Full (``stream_max_bytes``), it refuses new commands rather than
    dropping old ones: the log is the system of record and ``zeromem rebuild`` replays it
    from its first command, so losing the oldest would silently rebuild a state without
    them. A refused publish is an error the agent sees (``maximum bytes exceeded``) and
    an operator fixes by raising the cap; a dropped command would be noticed by nobody
    until a rebuild. Only an explicit ``stream_max_age_s`` drops history, and a rebuild
    then refuses to run (worker/rebuild.py)."""
    return StreamConfig(
        name=naming.COMMAND_STREAM,
        subjects=naming.command_stream_subjects(settings.shards),
        retention=RetentionPolicy.LIMITS,  # the log is kept: audit and rebuild read it
        storage=StorageType.FILE,
        discard=DiscardPolicy.NEW,
        max_age=settings.bus.stream_max_age_s or None,
        max_bytes=settings.bus.stream_max_bytes or None,
        duplicate_window=settings.bus.dedupe_window_s,
        num_replicas=settings.bus.stream_replicas,
    )


def dead_letter_stream_config(settings: Settings) -> StreamConfig:
    return StreamConfig(
        name=naming.DEAD_LETTER_STREAM,
        subjects=[naming.DEAD_LETTER_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=settings.bus.dead_letter_max_age_s or None,
        max_bytes=settings.bus.dead_letter_max_bytes or None,
        num_replicas=settings.bus.stream_replicas,
    )


def change_stream_config(settings: Settings) -> StreamConfig:
    """The change feed, retained for a while so a subscriber that was away resumes from
    where it stopped (a position or a time) instead of missing what happened."""
    return StreamConfig(
        name=naming.CHANGE_STREAM,
        subjects=[naming.CHANGE_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=settings.bus.change_max_age_s or None,
        max_bytes=settings.bus.change_max_bytes or None,
        num_replicas=settings.bus.stream_replicas,
    )


def audit_stream_config(settings: Settings) -> StreamConfig:
    return StreamConfig(
        name=naming.AUDIT_STREAM,
        subjects=[naming.AUDIT_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=settings.bus.audit_max_age_s or None,
        max_bytes=settings.bus.audit_max_bytes or None,
        num_replicas=settings.bus.stream_replicas,
    )


def erasure_bucket_config(settings: Settings) -> KeyValueConfig:
    """The record of tenant erasures (``lifecycle.erasure``): the latest record of each
    erased tenant, at most ``erasures_max_bytes`` (full, the bucket refuses a new record
    and ``erase-tenant`` fails naming the setting)."""
    return KeyValueConfig(
        bucket=naming.ERASURE_BUCKET,
        history=1,
        storage=StorageType.FILE,
        max_bytes=settings.bus.erasures_max_bytes or -1,
        replicas=settings.bus.stream_replicas,
    )


async def _ensure_erasure_bucket(js: JetStreamContext, settings: Settings) -> None:
    config = erasure_bucket_config(settings)
    try:
        info = await js.stream_info(f"KV_{naming.ERASURE_BUCKET}")
    except NotFoundError:
        await js.create_key_value(config=config)
        return
    if info.config.max_bytes != config.max_bytes:
        await js.update_stream(replace(info.config, max_bytes=config.max_bytes))


def shard_consumer_config(settings: Settings, name: str, shard: int, after: int) -> ConsumerConfig:
    """A shard consumer delivering the shard's commands from stream sequence ``after + 1``
    (everything when ``after`` is 0)."""
    return ConsumerConfig(
        durable_name=name,
        # the shard's commands and imports, in stream order
        filter_subjects=[
            naming.shard_filter_subject(shard),
            naming.import_shard_filter_subject(shard),
        ],
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE if after else DeliverPolicy.ALL,
        opt_start_seq=after + 1 if after else None,
        # One ack per batch covers every earlier message: a shard is applied strictly in
        # order, so acking the batch's last message is exactly "all of these are applied".
        ack_policy=AckPolicy.ALL,
        ack_wait=settings.bus.ack_wait_s,
        max_deliver=-1,  # a command is never dropped: a failing apply is retried, not lost
        # At least the shard's read-ahead window (Limits.shard_window), one command per
        # message at worst: the server must let the worker see past one tenant's backlog.
        max_ack_pending=max(4 * settings.worker.batch_size, 1024, settings.limits.shard_window),
        max_waiting=64,
        # The server removes a consumer nobody pulls from for this long (its owner died
        # and no other took the shard over). Losing one loses nothing: a new owner starts
        # its own from the position Redis holds.
        inactive_threshold=max(300.0, 10 * settings.worker.lease_ttl_s),
    )


async def open_shard_consumer(
    js: JetStreamContext, settings: Settings, shard: int, tenure: str, applied_through: int
) -> str:
    """Create this tenure's consumer of ``shard`` and delete every earlier tenure's. Call
    it only while holding the shard's lease.

    It starts after the earliest of: the last command Redis holds as applied
    (``applied_through``; a Redis that lost the unsynced tail of its append-only file
    stands further back, and the commands in between are delivered again) and each
    earlier consumer's acknowledged floor (a former owner that applied commands but died
    before acknowledging them: they come again, are recognised by their command ids, and
    their results go out as they never did)."""
    name = naming.shard_consumer(shard, tenure)
    earlier = [
        info
        for info in await _command_consumers(js)
        if naming.shard_of_consumer(info.name) == shard
    ]
    after = min([applied_through] + [i.ack_floor.stream_seq for i in earlier if i.ack_floor])
    config = shard_consumer_config(settings, name, shard, after)
    await js.add_consumer(naming.COMMAND_STREAM, config)
    for info in earlier:
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(naming.COMMAND_STREAM, info.name)
    return name


async def _command_consumers(js: JetStreamContext) -> list[ConsumerInfo]:
    # The server lists consumers a page (256) at a time.
    found: list[ConsumerInfo] = []
    while True:
        page = await js.consumers_info(naming.COMMAND_STREAM, offset=len(found) or None)
        found += page
        if len(page) < 256:
            return found


async def shard_backlogs(js: JetStreamContext, shards: int) -> dict[int, int | None]:
    """Commands each shard's current consumer has not had acknowledged (pending plus in
    flight). None where no consumer reads the shard yet but the stream holds commands for
    it: how many of those are applied only the next owner will know."""
    newest: dict[int, ConsumerInfo] = {}
    for info in await _command_consumers(js):
        shard = naming.shard_of_consumer(info.name)
        if shard is None or shard >= shards:
            continue
        if shard not in newest or (info.created and info.created > newest[shard].created):
            newest[shard] = info  # during a takeover, the new tenure's
    backlogs: dict[int, int | None] = {}
    for shard in range(shards):
        if shard in newest:
            info = newest[shard]
            backlogs[shard] = (info.num_pending or 0) + (info.num_ack_pending or 0)
            continue
        stored = False
        for subjects in (
            naming.shard_filter_subject(shard),
            naming.import_shard_filter_subject(shard),
        ):
            state = (await js.stream_info(naming.COMMAND_STREAM, subjects_filter=subjects)).state
            stored = stored or bool(state.subjects)
        backlogs[shard] = None if stored else 0
    return backlogs


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        info = await js.stream_info(config.name or "")
    except NotFoundError:
        await js.add_stream(config)
        return
    config = _keep_history(config, info.state.bytes, info.config.max_bytes)
    try:
        await js.update_stream(config)
    except (NatsTimeoutError, ServiceUnavailableError):
        raise  # not ready yet: provision waits and tries again
    except Exception as exc:  # an older layout stays usable if an update is refused
        log.warning("stream %s keeps its earlier settings: %s", config.name, exc)


def _keep_history(config: StreamConfig, stored: int, current_cap: int | None) -> StreamConfig:
    """``config``, except that a byte cap below what the command log already holds is
    not applied: the server would enforce it at once by deleting the oldest commands
    (whatever the discard policy), which is the loss ``command_stream_config`` avoids."""
    cap = config.max_bytes or 0
    if config.name != naming.COMMAND_STREAM or not cap or stored <= cap:
        return config
    log.error(
        "%s holds %d bytes, more than ZEROMEM_STREAM_MAX_BYTES=%d: the cap is not lowered "
        "(the server would delete the oldest commands to meet it, and rebuild needs them); "
        "raise the setting",
        config.name,
        stored,
        cap,
    )
    return replace(config, max_bytes=current_cap)


async def provision(js: JetStreamContext, settings: Settings) -> None:
    """Create (or update) the command, dead-letter, change and audit streams. The shard
    consumers are the workers' own (``open_shard_consumer``)."""
    configs = (
        command_stream_config(settings),
        dead_letter_stream_config(settings),
        change_stream_config(settings),
        audit_stream_config(settings),
    )
    # A cluster that has just started answers JetStream requests only once it has elected
    # its meta leader (about 5 s for three nodes here): wait that long, not for ever.
    deadline = time.monotonic() + settings.bus.jetstream_ready_s
    for config in configs:
        while True:
            try:
                await _ensure_stream(js, config)
                break
            except (NatsTimeoutError, ServiceUnavailableError) as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"JetStream did not answer within {settings.bus.jetstream_ready_s:g}s "
                        f"(ZEROMEM_JETSTREAM_READY_S): {exc or type(exc).__name__}"
                    ) from exc
                log.info("JetStream not ready yet (%s); waiting", exc or type(exc).__name__)
                await asyncio.sleep(0.5)
    await _ensure_erasure_bucket(js, settings)
