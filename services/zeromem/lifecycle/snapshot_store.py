"""Durable snapshots of the state the command log determines, in a JetStream object store.

A snapshot is a consistent cut of Redis (``store.rdb`` says why it is one) reduced to the
keys ``store.keys.derived_from_log`` names: each key's ``DUMP`` payload and absolute
expiry, so a rebuild puts it back with ``RESTORE`` exactly as it was, whatever its type.
The leases, recall's usage ledgers, the master key's check and the owners' **data keys
are never in a snapshot**: a forget that shreds an owner's key leaves the snapshot's
sealed copies of its memories unreadable, as it does the append-only file's. What a
snapshot keeps of a memory is what Redis kept: ciphertext for an encrypted one, the value
and content in clear for the others (as the command log does), until the snapshot is
deleted by retention (``SnapshotSettings.keep``) or rewritten by ``erase-tenant``.

Each snapshot records, per shard, the applied position its copy holds (``positions``,
the copy's own ``zm:shard-seq``: written by the same script as the commands it counts)
and how far the log is covered (``covered``: for a shard whose consumer had nothing
pending just before the copy, the command stream's last sequence then; otherwise its
position). ``zeromem rebuild`` restores the latest snapshot and replays, per shard, only
the commands after its position; the log may have lost everything at or below the
smallest ``covered``.

The object: ``MAGIC``, then frames (4-byte big-endian length, zlib of msgpack) of up to
``RECORDS_PER_FRAME`` records ``[name, expiry ms since the epoch or 0, payload]``, then
the header as the last frame: a snapshot cut short is refused (no header). The header is
also the object's description (JSON), so finding the latest reads no data.

One Redis master per snapshot today; on a Redis Cluster (one master per group of shards)
a snapshot is one copy per master, each recording the positions of the shards it holds,
taken in any order: shards are independent (an owner lives in one), so a rebuild
restores each master's copy and replays each shard after its own position.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.api import ObjectInfo, ObjectMeta, ObjectStoreConfig, StorageType
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.object_store import ObjectStore
from redis.asyncio import Redis

from zeromem import naming
from zeromem.settings import Settings
from zeromem.store import scripts
from zeromem.store.keys import DATA_KEY_FIELD, shard_sequence_key, snapshot_scratch_key

MAGIC = b"ZMSNAP1\n"
FORMAT = 1
RECORDS_PER_FRAME = 1000
# zlib's fastest level: a snapshot's text compresses about 3x at a fraction of the CPU
# the higher levels spend (the records are written once and read once).
COMPRESSION = 1
_LENGTH = struct.Struct(">I")


class SnapshotHeader(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: int
    taken_at: float  # epoch seconds when the copy was taken
    shards: int
    positions: dict[int, int]  # shard -> last applied stream sequence in the copy
    covered: dict[int, int]  # shard -> every command of the shard up to here is in it
    stream_last: int  # the command stream's last sequence just before the copy
    keys: int  # records in the snapshot
    erased_tenants: int = 0  # tenants removed from it since (erase-tenant)
    record_frames: int = 0  # frames of records; the data keys' fingerprints follow
    data_keys: int = 0  # fingerprints recorded

    def replay_from(self, shard: int) -> int:
        """The replay applies this shard's commands after this sequence."""
        return self.positions.get(shard, 0)


Record = tuple[bytes, int, bytes]  # name, absolute expiry in ms (0: none), DUMP payload
# A data key's name and a digest of its wrapped value: never the key itself (a forget
# must shred every copy), only what tells whether Redis still holds the same one.
Fingerprint = tuple[bytes, bytes]


def fingerprint(wrapped: bytes) -> bytes:
    return hashlib.sha256(wrapped).digest()[:16]


@dataclass(frozen=True, slots=True)
class Snapshot:
    name: str  # the object's name
    header: SnapshotHeader
    size: int  # bytes stored


class SnapshotFormatError(RuntimeError):
    """A stored snapshot that is not one, or was cut short."""


class SnapshotWriter:
    """Writes records to ``path`` in frames; ``close(header)`` ends the file with it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._out: IO[bytes] = open(path, "wb")  # noqa: SIM115 (closed by close())
        self._out.write(MAGIC)
        self._batch: list[Record] = []
        self.records = 0
        self.frames = 0

    def add(self, record: Record) -> None:
        self._batch.append(record)
        self.records += 1
        if len(self._batch) >= RECORDS_PER_FRAME:
            self._flush()

    def _frame(self, obj: Any) -> None:
        data = zlib.compress(msgspec.msgpack.encode(obj), COMPRESSION)
        self._out.write(_LENGTH.pack(len(data)))
        self._out.write(data)

    def _flush(self) -> None:
        if self._batch:
            self._frame(self._batch)
            self.frames += 1
            self._batch = []

    def close(self, header: SnapshotHeader, fingerprints: list[Fingerprint]) -> SnapshotHeader:
        """End with the data keys' fingerprints and the header; the header as written."""
        self._flush()
        header = msgspec.structs.replace(
            header, keys=self.records, record_frames=self.frames, data_keys=len(fingerprints)
        )
        for start in range(0, len(fingerprints), RECORDS_PER_FRAME):
            self._frame(fingerprints[start : start + RECORDS_PER_FRAME])
        self._frame(header)
        self._out.close()
        return header

    def abort(self) -> None:
        self._out.close()


def read_snapshot(path: Path) -> tuple[SnapshotHeader, Iterator[list[Record]]]:
    """The header of a snapshot file, and its record batches in order."""
    header, frames = _frames(path)
    return header, (
        msgspec.msgpack.decode(f, type=list[tuple[bytes, int, bytes]])
        for f in frames(0, header.record_frames)
    )


def read_fingerprints(path: Path) -> list[Fingerprint]:
    header, frames = _frames(path)
    return [
        fp
        for f in frames(header.record_frames, None)
        for fp in msgspec.msgpack.decode(f, type=list[tuple[bytes, bytes]])
    ]


def _frames(
    path: Path,
) -> tuple[SnapshotHeader, Callable[[int, int | None], Iterator[bytes]]]:
    """The header, and a reader of the frames before it (decompressed), by index."""
    header: SnapshotHeader | None = None
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise SnapshotFormatError(f"{path.name} is not a zeromem snapshot")
        offsets: list[tuple[int, int]] = []
        while raw := f.read(_LENGTH.size):
            (length,) = _LENGTH.unpack(raw)
            offsets.append((f.tell(), length))
            f.seek(length, 1)
        if not offsets:
            raise SnapshotFormatError("the snapshot holds nothing, not even its header")
        start, length = offsets.pop()
        f.seek(start)
        try:
            header = msgspec.msgpack.decode(zlib.decompress(f.read(length)), type=SnapshotHeader)
        except (zlib.error, msgspec.DecodeError) as exc:
            raise SnapshotFormatError(f"the snapshot was cut short: {exc}") from None

    def frames(first: int, end: int | None) -> Iterator[bytes]:
        with open(path, "rb") as f:
            for start, length in offsets[first:end]:
                f.seek(start)
                yield zlib.decompress(f.read(length))

    return header, frames


# --- the bucket ------------------------------------------------------------------------------


def bucket_config(settings: Settings) -> ObjectStoreConfig:
    return ObjectStoreConfig(
        bucket=naming.SNAPSHOT_BUCKET,
        description="zeromem snapshots of the Redis state (lifecycle.snapshot_store)",
        max_bytes=settings.snapshot.max_bytes or None,
        storage=StorageType.FILE,
        replicas=settings.bus.stream_replicas,
    )


async def open_bucket(js: JetStreamContext, settings: Settings | None = None) -> ObjectStore | None:
    """The snapshots' bucket; created when missing and ``settings`` are given, else None."""
    try:
        return await js.object_store(naming.SNAPSHOT_BUCKET)
    except BucketNotFoundError:
        if settings is None:
            return None
        return await js.create_object_store(naming.SNAPSHOT_BUCKET, config=bucket_config(settings))


async def snapshots(js: JetStreamContext) -> list[Snapshot]:
    """The stored snapshots, oldest first."""
    bucket = await open_bucket(js)
    if bucket is None:
        return []
    try:
        infos = await bucket.list(ignore_deletes=True)
    except NotFoundError:  # nats-py: an empty bucket
        return []
    found = [_snapshot(info) for info in infos if naming.is_snapshot_object(info.name or "")]
    return sorted(found, key=lambda s: s.name)


def _snapshot(info: ObjectInfo) -> Snapshot:
    header = msgspec.json.decode(info.description or "", type=SnapshotHeader)
    return Snapshot(info.name or "", header, info.size or 0)


async def latest(js: JetStreamContext) -> Snapshot | None:
    found = await snapshots(js)
    return found[-1] if found else None


async def store(
    js: JetStreamContext, settings: Settings, path: Path, header: SnapshotHeader, name: str
) -> Snapshot:
    """Put the snapshot file at ``path`` in the bucket, then keep the newest
    ``settings.snapshot.keep``."""
    bucket = await open_bucket(js, settings)
    assert bucket is not None
    with open(path, "rb") as data:  # noqa: ASYNC230 (a local file of ours)
        meta = ObjectMeta(name=name, description=msgspec.json.encode(header).decode())
        info = await bucket.put(name, data, meta=meta)
    stored = sorted(s.name for s in await snapshots(js))
    for old in stored[: -settings.snapshot.keep]:
        await bucket.delete(old)
    return Snapshot(name, header, info.size or 0)


async def fetch(js: JetStreamContext, snapshot: Snapshot, into: Path) -> None:
    bucket = await open_bucket(js)
    if bucket is None:
        raise SnapshotFormatError("the snapshots' bucket is gone")
    with open(into, "wb") as out:  # noqa: ASYNC230 (a local file of ours)
        await bucket.get(snapshot.name, writeinto=out)


# --- restoring and editing -------------------------------------------------------------------


async def restore(
    redis: Redis, path: Path, keep: Callable[[str], bool] = lambda _name: True
) -> int:
    """Put the snapshot's records (those whose name ``keep`` accepts) into ``redis``, each
    with its expiry (one already past is not created); how many were put."""
    _, batches = read_snapshot(path)
    restored = 0
    for batch in batches:
        chosen = [r for r in batch if keep(r[0].decode())]
        if chosen:
            args: list[int | bytes] = []
            for _, expires_ms, payload in chosen:
                args += [expires_ms, payload]
            restored += await scripts.SNAPSHOT_RESTORE(redis, [r[0] for r in chosen], args)
    return restored


async def shredded_since(
    redis: Redis, path: Path, keep: Callable[[str], bool] = lambda _name: True
) -> int:
    """Data keys the snapshot's sealed memories were written under that Redis no longer
    holds (or holds another one): their owners were forgotten after the snapshot, so its
    copies of their memories cannot be opened, and a replay of what followed (the forget
    among it) could not decide on them."""
    recorded = [(n, fp) for n, fp in read_fingerprints(path) if keep(n.decode())]
    gone = 0
    for start in range(0, len(recorded), RECORDS_PER_FRAME):
        chunk = recorded[start : start + RECORDS_PER_FRAME]
        async with redis.pipeline(transaction=False) as pipe:
            for name, _ in chunk:
                pipe.hget(name, DATA_KEY_FIELD)
            current = await pipe.execute()
        gone += sum(
            1
            for (_, fp), wrapped in zip(chunk, current, strict=True)
            if wrapped is None or fingerprint(wrapped) != fp
        )
    return gone


async def applied_positions(redis: Redis, shards: int) -> dict[int, int]:
    """Each shard's last applied stream sequence in ``redis`` (0: none yet)."""
    values = await redis.hmget(shard_sequence_key(), [str(s) for s in range(shards)])
    return {s: int(v or 0) for s, v in zip(range(shards), values, strict=True)}


async def rewrite_all(
    nc: NatsClient,
    redis: Redis,
    work_dir: Path,
    keep: Callable[[str], bool],
    drop_members: dict[str, bytes],
) -> int:
    """Rewrite every stored snapshot without the records ``keep`` refuses, and without
    ``drop_members[name]`` in the set ``name`` (edited through a scratch key of ``redis``:
    RESTORE, SREM, DUMP, DEL). Each is put back under its own name, which deletes the old
    object's chunks. How many snapshots were rewritten."""
    js = nc.jetstream()
    bucket = await open_bucket(js)
    if bucket is None:
        return 0
    rewritten = 0
    scratch = snapshot_scratch_key(uuid.uuid4().hex)
    for snapshot in await snapshots(js):
        source, target = work_dir / "old.zms", work_dir / "new.zms"
        await fetch(js, snapshot, source)
        header, batches = read_snapshot(source)
        writer = SnapshotWriter(target)
        changed = False
        try:
            for batch in batches:
                for name, expires_ms, payload in batch:
                    text = name.decode()
                    if not keep(text):
                        changed = True
                        continue
                    member = drop_members.get(text)
                    if member is not None:
                        await redis.restore(scratch, 0, payload, replace=True)
                        if await redis.srem(scratch, member):
                            changed = True
                            payload = await redis.dump(scratch) or b""
                        await redis.delete(scratch)
                        if not payload:  # the set held nothing else
                            continue
                    writer.add((name, expires_ms, payload))
        except BaseException:
            writer.abort()
            raise
        fingerprints = [fp for fp in read_fingerprints(source) if keep(fp[0].decode())]
        changed = changed or len(fingerprints) != header.data_keys
        header = writer.close(
            msgspec.structs.replace(header, erased_tenants=header.erased_tenants + int(changed)),
            fingerprints,
        )
        if changed:
            with open(target, "rb") as data:  # noqa: ASYNC230 (a local file of ours)
                meta = ObjectMeta(
                    name=snapshot.name, description=msgspec.json.encode(header).decode()
                )
                await bucket.put(snapshot.name, data, meta=meta)
            rewritten += 1
        source.unlink(missing_ok=True)
        target.unlink(missing_ok=True)
    return rewritten
