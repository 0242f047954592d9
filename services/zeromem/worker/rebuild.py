"""``zeromem rebuild``: reconstruct Redis from the retained command stream.

Redis holds a view of the log. To rebuild it (after Redis lost its data, or to repair a
tenant), this takes every shard's lease away from the running workers (the commit script
fences them from that moment), clears the state being rebuilt, and replays the command
stream through the workers' own code path (admission, decisions, the commit script) in
stream order. Every memory is stamped with its command's JetStream timestamp, never the
clock, so the replay decides exactly what the workers decided the first time (it drives
the workers' ``Applier`` directly, with no outbox: nothing is published). The commit
records each shard's last applied sequence atomically with the apply (``zm:shard-seq``);
when the leases are released the workers read it and skip what the rebuild applied, so
nothing is applied twice. Finally memories whose time to live passed are reaped, with
the same tombstones the reaper made before (named after what expired).

What is not derived from the log is kept: the leases, and recall's usage ledger.

With a snapshot (``zeromem snapshot``, ``lifecycle.snapshot_store``) the rebuild starts
from the latest one: it clears the state, restores the snapshot's keys (each shard's
applied position among them), and replays each shard's commands after that position only
(those at or before it are in the snapshot already). The log may then have lost every
command the snapshot covers (an age limit, ``ZEROMEM_STREAM_MAX_AGE_S``). Any other gap
is refused before anything is cleared (``TruncatedLogError``): a replay of what is left
would rebuild a state without the missing commands and call it done. The one removal it
accepts is a tenant erasure's (``lifecycle.erasure``), which records how many commands it
purged (and removes the tenant from the snapshots too): the replay then rebuilds every
other tenant whole. Without a snapshot (or with ``use_snapshot=False``) the log must hold
every command from sequence 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from redis.asyncio import Redis

from zeromem import naming
from zeromem.bus import connect_nats, connect_redis
from zeromem.lifecycle import snapshot_store
from zeromem.lifecycle.erasure import erased_commands
from zeromem.lifecycle.redact import Redactor
from zeromem.lifecycle.vault import check_master_key, vault_of
from zeromem.settings import Settings
from zeromem.store import scripts
from zeromem.store.keys import derived_from_log, scope_pattern, shard_lease_key
from zeromem.telemetry import Telemetry
from zeromem.worker.analysis import default_engine
from zeromem.worker.applier import Applier
from zeromem.worker.jobs import reap_expired
from zeromem.worker.messages import (
    DeliveryGapError,
    admit_messages,
    delivery_sequence,
    stream_position,
)
from zeromem.worker.pull import PullFeed
from zeromem.worker.store import Store

log = logging.getLogger(__name__)

REPLAY_BATCH = 1024


class TruncatedLogError(RuntimeError):
    """The command log lost commands no snapshot holds: a replay cannot rebuild the state."""

    def __init__(self, first_sequence: int, missing: int = 0, covered: int = 0) -> None:
        self.first_sequence = first_sequence
        self.missing = missing
        self.covered = covered
        cover = (
            f"the latest snapshot covers the log up to sequence {covered} only"
            if covered
            else "no snapshot covers them (zeromem snapshot)"
        )
        super().__init__(
            f"the command log starts at sequence {first_sequence} and misses {missing} "
            f"commands no tenant erasure accounts for, and {cover}: they were removed "
            "(ZEROMEM_STREAM_MAX_AGE_S, or a purge), so a replay would rebuild "
            "a state without them. Nothing was changed; Redis keeps its state"
        )


class SnapshotUnusableError(RuntimeError):
    """The latest snapshot cannot start this rebuild; nothing was changed."""


class SnapshotPredatesShreddingError(SnapshotUnusableError):
    """The latest snapshot holds memories sealed under data keys destroyed since."""

    def __init__(self, snapshot: str, keys: int) -> None:
        self.snapshot = snapshot
        self.keys = keys
        super().__init__(
            f"snapshot {snapshot} holds memories sealed under {keys} data key(s) destroyed "
            "since (their owners were forgotten after it): those copies can no longer be "
            "opened, so the replay could not decide the commands that followed them. "
            "Nothing was changed; Redis keeps its state"
        )


def missing_commands(first: int, last: int, messages: int, covered: int) -> int:
    """Commands after ``covered`` that the log ``[first, last]`` holding ``messages``
    no longer has. Below ``first`` everything was removed; inside the range, the holes
    (whichever side of ``covered`` they are on: a conservative count)."""
    if not last:
        return 0
    if first > covered + 1:
        return (last - covered) - messages
    return (last - first + 1) - messages


@dataclass(frozen=True, slots=True)
class RebuildReport:
    tenant: str  # "" for everything
    commands: int  # commands replayed
    applied: int
    conflicts: int
    rejected: int
    reaped: int
    last_sequence: int
    seconds: float
    snapshot: str = ""  # the snapshot it started from ("": the whole log)
    restored: int = 0  # keys restored from it


async def _clear(redis: Redis, tenant: str | None) -> int:
    """Delete the state a rebuild reconstructs; keep leases and usage ledgers."""
    pattern = scope_pattern(tenant)
    removed = 0
    batch: list[bytes] = []
    async for raw in redis.scan_iter(match=pattern, count=2000):
        name = raw.decode()
        if not derived_from_log(name):
            continue
        batch.append(raw)
        if len(batch) >= 1000:
            removed += await redis.unlink(*batch)
            batch = []
    if batch:
        removed += await redis.unlink(*batch)
    return removed


async def _replay(applier: Applier, settings: Settings, shard: int, msgs: list[Msg]) -> int:
    """Admit and apply one shard's messages, in order; how many commands they carried.
    Refused commands are skipped: their dead letters are on the stream already."""
    admitted, dead = admit_messages(
        shard,
        msgs,
        None,
        shards=settings.shards,
        limits=settings.limits,
        resolve_key=applier.engine.resolve_key,
    )
    await applier.apply(shard, admitted)
    return len(admitted) + len(dead)


async def rebuild(
    settings: Settings,
    *,
    tenant: str | None = None,
    nc: NatsClient | None = None,
    redis: Redis | None = None,
    progress: Callable[[int, int], None] | None = None,
    use_snapshot: bool = True,
) -> RebuildReport:
    """Rebuild ``tenant``'s state (or everything) from the latest snapshot and the command
    stream after it (the whole stream with ``use_snapshot=False`` or no snapshot).
    ``progress`` is called with (messages replayed, messages to replay); a batch message
    counts once."""
    started = time.perf_counter()
    own_nc, own_redis = nc is None, redis is None
    nc = nc or await connect_nats(settings, name="zeromem-rebuild")
    redis = redis or connect_redis(settings)
    js = nc.jetstream()
    token = f"rebuild-{uuid.uuid4().hex}"
    shards = list(range(settings.shards))
    ttl_ms = int(settings.worker.lease_ttl_s * 1000)
    telemetry = Telemetry()
    telemetry.bound(settings.limits.metric_tenants, settings.limits.metric_agents)
    # The workers' own applier under the rebuild's token, reporting nothing (no results,
    # change feed or audit: those went out when the commands were first applied).
    # The workers' data keys and policy: the replay seals what they sealed, byte for byte
    # (the keys are kept; a forgotten owner's is gone and is made again while its old
    # commands replay, then destroyed again by its forget).
    vault = vault_of(settings, redis)
    applier = Applier(
        # the workers' bounds on stored results too: the replay keeps the same ones
        Store(
            redis,
            result_ttl_s=settings.store.result_ttl_s,
            tombstone_ttl_s=settings.store.tombstone_ttl_s,
            result_records=settings.limits.idempotency_records,
            result_bytes=settings.limits.idempotency_bytes,
            vault=vault,
        ),
        # the workers' rules, redaction of derived content included: the same decisions
        default_engine(
            settings.worker.max_clock_skew_s,
            Redactor(settings.lifecycle.sensitive_pattern),
            None if vault is None else vault.policy,
        ),
        token=token,
        limits=settings.limits,
        batch_size=settings.worker.batch_size,
        telemetry=telemetry,
    )
    consumer = f"zm-rebuild-{uuid.uuid4().hex[:12]}"

    async def hold_leases() -> None:
        while True:
            async with redis.pipeline(transaction=False) as pipe:
                for shard in shards:  # taken from any worker holding it: fenced from now on
                    pipe.set(shard_lease_key(shard), token, px=ttl_ms)
                await pipe.execute()
            await asyncio.sleep(settings.worker.lease_ttl_s / 3)

    await check_master_key(redis, vault)  # seals as the workers do, or refuses
    keeper = asyncio.create_task(hold_leases())
    feed: PullFeed | None = None
    replayed = 0  # messages (a batch message carries several commands)
    commands = 0
    try:
        await asyncio.sleep(0)  # the first lease write goes out before anything else
        info = await js.stream_info(naming.COMMAND_STREAM)
        snapshot = await snapshot_store.latest(js) if use_snapshot else None
        header = snapshot.header if snapshot is not None else None
        if header is not None and header.shards != settings.shards:
            raise SnapshotUnusableError(
                f"snapshot {snapshot.name if snapshot else ''} was taken with {header.shards} "
                f"shards and this deployment has {settings.shards}: its positions name other "
                "shards. Take a new snapshot (zeromem snapshot); nothing was changed"
            )
        # Every shard's commands up to here are in the snapshot (0: none without one).
        covered = min(header.covered.get(s, 0) for s in shards) if header else 0
        first, last = info.state.first_seq or 1, info.state.last_seq or 0
        # Every command removed from the log after what the snapshot covers must be an
        # erased tenant's: the replay then rebuilds the others whole (and nothing of the
        # erased ones, as the live state).
        missing = missing_commands(first, last, info.state.messages or 0, covered)
        erased = await erased_commands(nc)
        if missing > erased:
            raise TruncatedLogError(first, missing - erased, covered)
        start = max(first, covered + 1)
        # Per shard, the commands at or before the snapshot's position are in it.
        done_up_to = {s: header.replay_from(s) for s in shards} if header else {}
        total = min(info.state.messages or 0, max(0, last - start + 1))
        if tenant:
            total = 0
            for subjects in (
                naming.command_tenant_subject(tenant),
                naming.import_tenant_subject(tenant),
            ):
                filtered = await js.stream_info(naming.COMMAND_STREAM, subjects_filter=subjects)
                total += sum((filtered.state.subjects or {}).values())
        restored = 0
        if snapshot is not None:
            work = Path(tempfile.mkdtemp(prefix="zeromem-rebuild-"))
            try:
                # fetched and checked before anything is cleared: a refusal changes nothing
                path = work / "snapshot.zms"
                await snapshot_store.fetch(js, snapshot, path)
                prefix = scope_pattern(tenant).rstrip("*")
                ours: Callable[[str], bool] = lambda name: name.startswith(prefix)  # noqa: E731
                shredded = await snapshot_store.shredded_since(redis, path, ours)
                if shredded:
                    raise SnapshotPredatesShreddingError(snapshot.name, shredded)
                await _clear(redis, tenant)
                restored = await snapshot_store.restore(redis, path, ours)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        else:
            await _clear(redis, tenant)
        if last >= start:
            await js.add_consumer(
                naming.COMMAND_STREAM,
                ConsumerConfig(
                    name=consumer,
                    deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                    opt_start_seq=start,
                    ack_policy=AckPolicy.NONE,
                    filter_subjects=[
                        naming.command_tenant_subject(tenant),
                        naming.import_tenant_subject(tenant),
                    ]
                    if tenant
                    else [naming.COMMAND_SUBJECTS, naming.IMPORT_SUBJECTS],
                    inactive_threshold=60.0,
                    mem_storage=True,
                ),
            )
            feed = await PullFeed(nc, naming.COMMAND_STREAM, consumer).start()
            position = 0
            next_delivery = 1
            while position < last:
                try:
                    msgs = await feed.fetch(REPLAY_BATCH, timeout=2.0)
                except TimeoutError:
                    break  # nothing more within the filter
                by_shard: dict[int, list[Msg]] = {}
                for msg in msgs:
                    # Without acknowledgements nothing is delivered twice: a delivery lost
                    # in transit would leave its command out of the rebuilt state.
                    if delivery_sequence(msg.reply) != next_delivery:
                        raise DeliveryGapError(
                            f"rebuild: delivery {next_delivery} of the replay never arrived "
                            "(a connection broke); run the rebuild again"
                        )
                    next_delivery += 1
                    position = stream_position(msg.reply)[0]
                    try:
                        shard = naming.parse_command_subject(msg.subject)[1]
                    except ValueError:
                        continue  # never delivered to a shard, so never applied
                    if position > last:
                        break  # published after the rebuild began: the workers apply it
                    if position <= done_up_to.get(shard % settings.shards, 0):
                        continue  # in the snapshot already
                    by_shard.setdefault(shard, []).append(msg)
                # Shards are independent (an owner lives in one): each is applied in order.
                for shard, shard_msgs in by_shard.items():
                    commands += await _replay(
                        applier, settings, shard % settings.shards, shard_msgs
                    )
                    replayed += len(shard_msgs)
                if progress is not None:
                    progress(replayed, total)
        reaped = await reap_expired(applier, redis, shards, settings.shards, limit=1_000_000)
    finally:
        keeper.cancel()
        with contextlib.suppress(BaseException):
            await keeper
        if feed is not None:
            with contextlib.suppress(Exception):
                await feed.stop()
        with contextlib.suppress(Exception):
            await js.delete_consumer(naming.COMMAND_STREAM, consumer)
        for shard in shards:
            with contextlib.suppress(Exception):
                await scripts.LEASE_RELEASE(redis, [shard_lease_key(shard)], [token])
        if own_nc:
            await nc.drain()
        if own_redis:
            await redis.aclose()
    stats = applier.stats
    return RebuildReport(
        tenant or "",
        commands,
        stats.applied,
        stats.conflicts,
        stats.rejected,
        reaped,
        last,
        time.perf_counter() - started,
        snapshot.name if snapshot is not None else "",
        restored,
    )
