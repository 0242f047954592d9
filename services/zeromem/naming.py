"""Every NATS subject, stream and consumer name, in one place (Redis keys: ``store.keys``).

Nothing else in the code base writes such a string inline: a change of layout is a change
of this file. Sharding lives here too, because the shard is part of the subject.
"""

from __future__ import annotations

import zlib

# --- NATS ------------------------------------------------------------------------------

COMMAND_STREAM = "ZM_COMMANDS"
DEAD_LETTER_STREAM = "ZM_DEAD_LETTERS"

_PREFIX = "zm"


def command_subject(tenant: str, shard: int, agent: str) -> str:
    """Where agent ``agent`` publishes its commands: ``zm.cmd.{tenant}.{shard}.{agent}``.
    The server lets an agent publish only where tenant and agent are its own (see
    ``zeromem.auth.permissions``), so the worker takes the agent from here, never from
    the payload."""
    return f"{_PREFIX}.cmd.{tenant}.{shard}.{agent}"


COMMAND_SUBJECTS = f"{_PREFIX}.cmd.*.*.*"  # every command subject (permissions, rebuild)


def command_stream_subjects(shards: int) -> list[str]:
    """What the command stream captures: the command and import subjects of each shard
    0..shards-1 and nothing else. A publish to any other shard token (a client with a
    wrong shard count, a token that is not a number) reaches no stream and fails at once
    (no responders), instead of being stored where no shard consumer ever reads it."""
    return [
        *(shard_filter_subject(shard) for shard in range(shards)),
        *(import_shard_filter_subject(shard) for shard in range(shards)),
    ]


def shard_filter_subject(shard: int) -> str:
    """The commands of one shard, for every tenant and agent."""
    return f"{_PREFIX}.cmd.*.{shard}.*"


def parse_command_subject(subject: str) -> tuple[str, int, str]:
    """(tenant, shard, agent) of a subject made by ``command_subject`` or
    ``import_subject``; ValueError for any other."""
    parts = subject.split(".")
    if (
        len(parts) != 5
        or parts[0] != _PREFIX
        or parts[1] not in ("cmd", "imp")
        or not parts[3].isdigit()
    ):
        raise ValueError(f"not a command subject: {subject!r}")
    return parts[2], int(parts[3]), parts[4]


def tenant_of_command_subject(subject: str) -> str:
    return subject.split(".", 3)[2]


def shard_consumer(shard: int, tenure: str) -> str:
    """The pull consumer of one tenure of ``shard``'s lease. Each new owner opens its own
    where the shard stands (``bus.open_shard_consumer``) and deletes the previous owner's:
    a former owner that was paused past its lease can then neither take the new owner's
    commands nor have its own fetched ones covered by the new owner's cumulative
    acknowledgement (both pull requests and acks name the consumer)."""
    return f"zm-shard-{shard}-{tenure}"


def shard_of_consumer(name: str) -> int | None:
    """The shard a consumer named by ``shard_consumer`` reads (None for any other). The
    per-shard durable of earlier versions, ``zm-shard-<n>``, counts too: a new tenure
    starts from its acknowledged floor and then deletes it."""
    prefix = "zm-shard-"
    if not name.startswith(prefix):
        return None
    shard = name[len(prefix) :].split("-", 1)[0]
    return int(shard) if shard.isdigit() else None


# Imports: commands that may carry a memory's original, older times (``Put.created_at``).
# A subject of their own, beside the command subjects and in the same stream, so that the
# right to backdate is a permission on a subject (granted to an importer's credential
# only), never a claim inside a message. A shard's consumer reads both kinds in stream
# order, so an owner's imported and ordinary commands still apply in publish order.
# The agent is the last token, as on a command subject: the worker takes it from there.
IMPORT_SUBJECTS = f"{_PREFIX}.imp.*.*.*"


def import_subject(tenant: str, shard: int, agent: str) -> str:
    """Where ``zeromem import`` publishes: ``zm.imp.{tenant}.{shard}.{agent}``."""
    return f"{_PREFIX}.imp.{tenant}.{shard}.{agent}"


def import_shard_filter_subject(shard: int) -> str:
    """The imports of one shard, for every tenant and agent."""
    return f"{_PREFIX}.imp.*.{shard}.*"


def import_tenant_subject(tenant: str) -> str:
    """Every import of one tenant (replayed by a tenant's rebuild with its commands)."""
    return f"{_PREFIX}.imp.{tenant}.>"


def is_import_subject(subject: str) -> bool:
    return subject.startswith(_IMPORT_PREFIX)


_IMPORT_PREFIX = f"{_PREFIX}.imp."


# A key-value bucket (tenant -> commands purged): what ``zeromem erase-tenant`` removed from
# the command log, so a rebuild tells a log with erased tenants from a truncated one.
ERASURE_BUCKET = "ZM_ERASURES"

# An object store: durable snapshots of the Redis state the command log determines
# (``lifecycle.snapshot_store``), one object per snapshot, named by ``snapshot_object``.
SNAPSHOT_BUCKET = "ZM_SNAPSHOTS"
_SNAPSHOT_OBJECT_PREFIX = "snapshot-"


def snapshot_object(taken_ms: int) -> str:
    """A snapshot's object name: its time in ms, zero-padded, so names sort by age."""
    return f"{_SNAPSHOT_OBJECT_PREFIX}{taken_ms:015d}"


def is_snapshot_object(name: str) -> bool:
    return name.startswith(_SNAPSHOT_OBJECT_PREFIX)


def stream_purge_subject(stream: str) -> str:
    """JetStream's API subject for purging a stream (all of it, or one subject)."""
    return f"$JS.API.STREAM.PURGE.{stream}"


def stream_info_subject(stream: str) -> str:
    """JetStream's API subject for a stream's information (its subjects, a page at a time)."""
    return f"$JS.API.STREAM.INFO.{stream}"


def pull_request_subject(stream: str, consumer: str) -> str:
    """JetStream's API subject for a pull request (a fetch) on a durable consumer."""
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"


def dead_letter_subject(tenant: str, shard: int) -> str:
    """A refused command of ``tenant`` (per tenant: one tenant's refusals are never
    delivered with another's). Only the workers publish here; no agent reads it."""
    return f"{_PREFIX}.dead.{tenant}.{shard}"


DEAD_LETTER_SUBJECTS = f"{_PREFIX}.dead.*.*"


def dead_letter_tenant_subject(tenant: str) -> str:
    """Every dead letter of one tenant (what the inspector's operator view filters on)."""
    return f"{_PREFIX}.dead.{tenant}.*"


def parse_dead_letter_subject(subject: str) -> tuple[str, int]:
    """(tenant, shard) of a subject made by ``dead_letter_subject``."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[0] != _PREFIX or parts[1] != "dead" or not parts[3].isdigit():
        raise ValueError(f"not a dead-letter subject: {subject!r}")
    return parts[2], int(parts[3])


def change_subject(tenant: str, shard: int, namespace: str, owner_id: str) -> str:
    """The change feed: an event per applied, conflicting or rejected command (one
    message may carry several of one owner's, see ``BATCH_HEADER``)."""
    return f"{_PREFIX}.chg.{tenant}.{shard}.{namespace}.{owner_id}"


def change_watch_subject(tenant: str, namespace: str = "*", owner_id: str = "*") -> str:
    """A subscription to the changes of an owner (``task``, ``t42``) or a whole tenant."""
    return f"{_PREFIX}.chg.{tenant}.*.{namespace}.{owner_id}"


def change_tenant_subject(tenant: str) -> str:
    """Every change of one tenant: the widest filter an agent's feed consumer may have."""
    return f"{_PREFIX}.chg.{tenant}.>"


CHANGE_STREAM = "ZM_CHANGES"  # retains the change feed so a subscriber can resume
CHANGE_SUBJECTS = f"{_PREFIX}.chg.>"

AUDIT_STREAM = "ZM_AUDIT"
AUDIT_SUBJECTS = f"{_PREFIX}.audit.>"


def audit_write_subject(tenant: str, shard: int) -> str:
    """One message per worker batch (and tenant): the batch's applied, conflicting and
    rejected commands."""
    return f"{_PREFIX}.audit.{tenant}.w.{shard}"


def audit_read_subject(tenant: str, kind: str) -> str:
    """Reads through the query and recall services: reader and keys, never values."""
    return f"{_PREFIX}.audit.{tenant}.r.{kind}"


def audit_tenant_subject(tenant: str) -> str:
    return f"{_PREFIX}.audit.{tenant}.>"


def command_tenant_subject(tenant: str) -> str:
    """Every command of one tenant (what a tenant's rebuild replays)."""
    return f"{_PREFIX}.cmd.{tenant}.*.*"


def query_subject(tenant: str, agent: str, kind: str) -> str:
    """Request-reply reads by ``agent``: ``kind`` is ``get``, ``list``, ``recall`` or
    ``stats``. As for commands, the server lets an agent request only its own, so the
    read services take the reader from here."""
    return f"{_PREFIX}.q.{tenant}.{agent}.{kind}"


def query_subject_all(kind: str) -> str:
    return f"{_PREFIX}.q.*.*.{kind}"


def parse_query_subject(subject: str) -> tuple[str, str, str]:
    """(tenant, agent, kind) of a subject made by ``query_subject``."""
    parts = subject.split(".")
    if len(parts) != 5 or parts[0] != _PREFIX or parts[1] != "q":
        raise ValueError(f"not a query subject: {subject!r}")
    return parts[2], parts[3], parts[4]


QUERY_QUEUE_GROUP = "zm-query"
RECALL_QUEUE_GROUP = "zm-recall"
# Where a caller that waits for the result wants it: honoured only inside the inbox of the
# agent named by the command's subject (``agent_inbox_prefix``), never anywhere else.
REPLY_HEADER = "Zm-Reply"
# JetStream's dedupe header. Its window spans the whole stream, so the value is scoped to
# the publisher: ``command_dedupe_id``.
MSG_ID_HEADER = "Nats-Msg-Id"
DEAD_REASON_HEADER = "Zm-Reason"
ERROR_HEADER = "Zm-Error"  # set by the read services on an ErrorReply, with its code
# On a message whose payload is a batch (a msgpack array of commands, or of one owner's
# results on the change feed): the count.
BATCH_HEADER = "Zm-Batch"
# Results per change-feed message at most: a change event's position is the message's
# stream sequence times this, plus the result's index in the message.
MAX_BATCH_RESULTS = 1000


def command_dedupe_id(tenant: str, agent: str, digest: str) -> str:
    """The ``Nats-Msg-Id`` of a command: the publisher's tenant and agent (so ids of two
    tenants or agents never collide) and ``digest``, the SDK's keyed hash of the command
    id (so nobody without the agent's secret can publish an id first and have the real
    command dropped as a duplicate)."""
    return f"{tenant}.{agent}.{digest}"


def audit_dedupe_id(tenant: str, shard: int, sequence: int, part: int = 0, kind: str = "w") -> str:
    """The ``Nats-Msg-Id`` of a worker's audit record (``kind`` ``w`` for writes,
    ``dead`` for refusals): the batch's position in the command stream. Predictable, and
    safe so: only the workers may publish on audit subjects, so nobody else can use one
    first (the dedupe window is per stream)."""
    return f"audit.{kind}.{tenant}.{shard}.{sequence}" + (f".{part}" if part else "")


def dead_letter_dedupe_id(tenant: str, sequence: int, index: int | None) -> str:
    """The ``Nats-Msg-Id`` of a dead letter (only the workers publish dead letters)."""
    return f"dead.{tenant}.{sequence}" + ("" if index is None else f".{index}")


def agent_inbox_prefix(tenant: str, agent: str) -> str:
    """Every reply to agent ``agent`` of ``tenant`` arrives under this prefix (its
    connection's ``inbox_prefix``): the only subjects the server lets it subscribe to."""
    return f"_INBOX.zm.{tenant}.{agent}"


def throttle_subject(tenant: str, agent: str) -> str:
    """Where a worker tells an agent it is over a rate quota (``schemas.Throttle``): in
    the agent's inbox, which only its own connections may subscribe to and only services
    may publish into."""
    return f"{agent_inbox_prefix(tenant, agent)}.throttle"


def service_inbox_prefix(role: str) -> str:
    """The inbox prefix of a service connection (``worker``, ``reader``)."""
    return f"_INBOX.zmsvc.{role}"


def consumer_create_subject(stream: str, consumer: str, filter_subject: str) -> str:
    """JetStream's API subject for creating a consumer whose filter is named in the
    subject itself, so a permission on this subject limits what the consumer may read."""
    return f"$JS.API.CONSUMER.CREATE.{stream}.{consumer}.{filter_subject}"


def consumer_delete_subject(stream: str, consumer: str) -> str:
    return f"$JS.API.CONSUMER.DELETE.{stream}.{consumer}"


JS_API_PREFIX = "$JS.API"
JS_ACK_PREFIX = "$JS.ACK"
SYS_CLAIMS_UPDATE = "$SYS.REQ.CLAIMS.UPDATE"  # where a changed account JWT is pushed


# --- Sharding --------------------------------------------------------------------------

DEFAULT_SHARDS = 16


def shard_for(tenant: str, owner: str, shards: int) -> int:
    """A stable hash of (tenant, owner) mod the shard count: the same in every process and
    every language (CRC-32 of ``tenant + NUL + owner`` in UTF-8)."""
    return zlib.crc32(f"{tenant}\x00{owner}".encode()) % shards


def shards_of_worker(index: int, count: int, shards: int) -> list[int]:
    """The shards worker ``index`` of ``count`` owns (a StatefulSet ordinal maps here)."""
    if not 0 <= index < count:
        raise ValueError(f"worker index {index} is outside 0..{count - 1}")
    return [s for s in range(shards) if s % count == index]
