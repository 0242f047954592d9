"""Erasing a whole tenant: every copy of its memories, the command log's included.

Forgetting an owner shreds its data key but leaves its commands in the log (docs/
security.md says why). A tenant is different: its commands travel on subjects of their
own (``zm.cmd.<tenant>.*.*``, ``zm.imp.<tenant>.>``), so the log can drop exactly them
without touching another tenant's, and a rebuild of what remains is a rebuild without the
tenant, which is what the live state becomes too. ``erase_tenant``:

1. purges the tenant's subjects from the command log, the change feed, the audit trail and
   the dead letters (JetStream's purge by subject);
2. records how many commands it purged in a key-value bucket (``naming.ERASURE_BUCKET``),
   so ``zeromem rebuild`` can tell a log with erased tenants from a truncated one;
3. deletes every Redis key of the tenant, its owners' data keys with them (what sealed
   copies remain in Redis's history are unreadable from then on), and drops it from the
   tenant sets;
4. rewrites every stored snapshot without the tenant (``lifecycle.snapshot_store``): its
   keys dropped, its name taken out of the tenant sets, each snapshot put back under its
   own name (the old object's chunks are purged), so a rebuild from a snapshot taken
   before the erasure brings nothing of it back;
5. asks Redis to rewrite its append-only file, so even the ciphertext leaves the disk.

The operator revokes the tenant's credentials first (``zeromem auth revoke --tenant``): a
command published during the erasure would otherwise be applied after it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client as NatsClient
from nats.js.errors import BucketNotFoundError, NotFoundError
from redis.asyncio import Redis

from zeromem import naming
from zeromem.lifecycle import snapshot_store
from zeromem.store.keys import RedisKeys, expiring_tenants_key, layout, tenants_key
from zeromem.store.pieces import rewrite_append_only_files, scan_keys

_SCAN_COUNT = 1000


@dataclass(frozen=True, slots=True)
class Erasure:
    tenant: str
    commands: int  # messages purged from the command log
    changes: int
    audit: int
    dead_letters: int
    redis_keys: int
    snapshots: int = 0  # stored snapshots rewritten without the tenant


def tenant_sets() -> list[str]:
    """The sets that name tenants (not under a tenant's own prefix; one piece per shard on
    a cluster): an erasure takes the tenant out of them, in Redis and in every snapshot."""
    return [name(p) for p in layout().pieces for name in (tenants_key, expiring_tenants_key)]


async def erase_tenant(nc: NatsClient, redis: Redis, tenant: str) -> Erasure:
    await _check_room(nc)
    purged = {
        stream: sum([await _purge(nc, stream, subject) for subject in subjects])
        for stream, subjects in (
            (
                naming.COMMAND_STREAM,
                (naming.command_tenant_subject(tenant), naming.import_tenant_subject(tenant)),
            ),
            (naming.CHANGE_STREAM, (naming.change_tenant_subject(tenant),)),
            (naming.AUDIT_STREAM, (naming.audit_tenant_subject(tenant),)),
            (naming.DEAD_LETTER_STREAM, (naming.dead_letter_tenant_subject(tenant),)),
        )
    }
    commands = purged[naming.COMMAND_STREAM]
    if commands:
        await _record(nc, tenant, commands)
    deleted = 0
    async for name in scan_keys(redis, RedisKeys(tenant).tenant_pattern(), _SCAN_COUNT):
        deleted += await redis.unlink(name)
    sets = tenant_sets()
    for set_name in sets:
        await redis.srem(set_name, tenant)
    prefix = RedisKeys(tenant).tenant_pattern().rstrip("*")
    work = Path(tempfile.mkdtemp(prefix="zeromem-erase-"))
    try:
        snapshots = await snapshot_store.rewrite_all(
            nc,
            redis,
            work,
            keep=lambda name: not name.startswith(prefix),
            drop_members={name: tenant.encode() for name in sets},
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    await rewrite_append_only_files(redis)
    return Erasure(
        tenant,
        commands,
        purged[naming.CHANGE_STREAM],
        purged[naming.AUDIT_STREAM],
        purged[naming.DEAD_LETTER_STREAM],
        deleted,
        snapshots,
    )


async def _purge(nc: NatsClient, stream: str, subject: str) -> int:
    """Purge ``subject`` from ``stream``; the count purged (nats-py's purge_stream drops it)."""
    reply = await nc.request(
        naming.stream_purge_subject(stream), json.dumps({"filter": subject}).encode(), timeout=30
    )
    answer = json.loads(reply.data)
    if "error" in answer:
        if answer["error"].get("err_code") == 10059:  # stream not found: nothing to purge
            return 0
        raise RuntimeError(f"purge of {subject} from {stream}: {answer['error']}")
    return int(answer.get("purged", 0))


class ErasureRecordRefusedError(RuntimeError):
    """The record of erasures is full (``ZEROMEM_ERASURES_MAX_BYTES``)."""


async def _record(nc: NatsClient, tenant: str, commands: int) -> None:
    js = nc.jetstream()
    try:
        bucket = await js.key_value(naming.ERASURE_BUCKET)
    except BucketNotFoundError:
        bucket = await js.create_key_value(bucket=naming.ERASURE_BUCKET, history=1)
    earlier = await _erased(bucket, tenant)
    record = {"commands": earlier + commands, "at": time.time()}
    await bucket.put(tenant, json.dumps(record).encode())


# Room the record of one erasure takes in the bucket, at most (a JetStream message's
# headers and subject around a tenant name and a short JSON record).
_RECORD_ROOM = 1024


async def _check_room(nc: NatsClient) -> None:
    """Refuse an erasure whose record would not fit (``ZEROMEM_ERASURES_MAX_BYTES``),
    before anything is purged: a purge without its record would make a rebuild refuse
    the log as truncated."""
    try:
        info = await nc.jetstream().stream_info(f"KV_{naming.ERASURE_BUCKET}")
    except NotFoundError:
        return  # made with the first record
    cap = info.config.max_bytes or -1
    if cap > 0 and info.state.bytes + _RECORD_ROOM > cap:
        raise ErasureRecordRefusedError(
            f"the record of erasures holds {info.state.bytes} of its {cap} bytes "
            "(ZEROMEM_ERASURES_MAX_BYTES): raise it; nothing was erased"
        )


async def _erased(bucket: object, tenant: str) -> int:
    try:
        entry = await bucket.get(tenant)  # type: ignore[attr-defined]
    except NotFoundError:
        return 0
    return int(json.loads(entry.value)["commands"]) if entry.value else 0


async def erased_commands(nc: NatsClient) -> int:
    """Commands purged from the log by tenant erasures, all tenants together (what a
    rebuild allows the log to be missing)."""
    js = nc.jetstream()
    try:
        bucket = await js.key_value(naming.ERASURE_BUCKET)
    except BucketNotFoundError:
        return 0
    return sum([await _erased(bucket, tenant) for tenant in await _recorded_tenants(nc)])


async def _recorded_tenants(nc: NatsClient) -> list[str]:
    """The tenants the record of erasures names, from the bucket's stream itself.

    Not ``KeyValue.keys()``: nats-py's watcher can end its initial replay before the
    entries already on their way arrive (nats-io/nats.py#842) and report an empty bucket,
    and a rebuild would then refuse a log whose holes the record accounts for. The
    stream's subject list is a request the server answers whole, a page at a time (the
    server pages it; nats-py's ``stream_info`` reads only the first page)."""
    prefix = f"$KV.{naming.ERASURE_BUCKET}."
    tenants: list[str] = []
    while True:
        request = {"subjects_filter": f"{prefix}>", "offset": len(tenants)}
        reply = await nc.request(
            naming.stream_info_subject(f"KV_{naming.ERASURE_BUCKET}"),
            json.dumps(request).encode(),
            timeout=30,
        )
        answer = json.loads(reply.data)
        if "error" in answer:
            if answer["error"].get("err_code") == 10059:  # no bucket stream: no erasure
                return []
            raise RuntimeError(f"listing the record of erasures: {answer['error']}")
        page = [subject[len(prefix) :] for subject in answer["state"].get("subjects") or {}]
        tenants += page
        if not page or len(tenants) >= int(answer.get("total", 0)):
            return tenants
