"""Command messages as the worker takes them in: where each sits in the stream, whose it
is, and each command admitted (``intake.admit``) or refused with its reason.

``Admitted`` carries a command through apply and publish; ``Dead`` is a refusal on its way
to the dead-letter stream.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nats.aio.msg import Msg

from zeromem import naming
from zeromem.limits import Limits, refusal
from zeromem.schemas import AuditEntry, Command, Result, batch_length, split_batch
from zeromem.schemas.commands import TENANT_FULL_PATTERN
from zeromem.worker.faults import describe
from zeromem.worker.intake import Invalid, admit


@dataclass(slots=True)
class Admitted:
    msg: Msg
    command: Command
    key: str
    sequence: int
    timestamp: float
    raw: bytes  # the command as it came (one part of a batch message)
    index: int | None = None  # its place in a batch message
    # The stream position the shard may record once this command is applied: set on a
    # message's last command only (a batch message carries several), 0 on the others.
    position: int = 0
    # Prepared with its decision: the result, its encoding and its audit entry (what is
    # published after the commit if the commit keeps this result).
    result: Result | None = None
    payload: bytes = b""
    entry: AuditEntry | None = None
    importing: bool = False  # it came on the import subject: a put may be backdated


@dataclass(frozen=True, slots=True)
class Dead:
    msg: Msg
    raw: bytes  # the refused command (the whole message, or one command of a batch)
    reason: str
    sequence: int
    index: int | None = None  # its place in a batch message
    # Tell a caller waiting on the command (Zm-Reply) why it was refused. Not when the
    # command's own rejected result goes out with the others (it failed after admission).
    reply: bool = True
    # Bytes of ``raw`` its dead letter carries (None: all). A message refused whole before
    # admission stays whole in the command log, at ``sequence``, where its dead letter
    # points: a copy only costs (``Limits.quota_refusal_raw_bytes``).
    raw_kept: int | None = None


def admit_messages(
    shard: int,
    msgs: Sequence[Msg],
    positions: dict[int, int] | None,
    *,
    shards: int,
    limits: Limits,
    resolve_key: Callable[[Command], str],
) -> tuple[list[Admitted], list[Dead]]:
    """Every command of ``msgs`` admitted, or refused with its reason."""
    admitted: list[Admitted] = []
    dead: list[Dead] = []
    batch_header = naming.BATCH_HEADER
    for msg in msgs:
        seq, ts = stream_position(msg.reply)
        try:
            subject_tenant, _, subject_agent = subject_identity(msg.subject)
        except ValueError as exc:
            dead.append(Dead(msg, msg.data, f"invalid: {exc}", seq))
            continue
        importing = naming.is_import_subject(msg.subject)
        headers = msg.headers
        batched = headers is not None and batch_header in headers
        if batched:
            count = batch_length(msg.data)
            if count is None:
                dead.append(
                    Dead(
                        msg,
                        msg.data,
                        "invalid: not a command batch: bytes are not a msgpack array",
                        seq,
                    )
                )
                continue
            if count > limits.batch_commands:
                # Refused whole, once: one dead letter, not one per command.
                dead.append(
                    Dead(
                        msg,
                        msg.data,
                        refusal(
                            "batch_commands",
                            f"{count} commands in one batch message, limit {limits.batch_commands}",
                        ),
                        seq,
                    )
                )
                continue
        else:
            count = 1
        if batched:
            try:
                parts = split_batch(msg.data)
            except Exception as exc:
                dead.append(Dead(msg, msg.data, f"invalid: not a command batch: {exc}", seq))
                continue
            last = len(parts) - 1
        else:
            parts, last = [msg.data], 0
        position = seq if positions is None else positions.get(seq, seq)
        for index, data in enumerate(parts):
            try:
                verdict = admit(
                    subject_tenant,
                    data,
                    shard=shard,
                    shards=shards,
                    limits=limits,
                    subject_agent=subject_agent,
                )
            except Exception as exc:  # never let one message stop the shard
                verdict = Invalid(f"invalid: {describe(exc)}")
            if isinstance(verdict, Invalid):
                dead.append(Dead(msg, data, verdict.reason, seq, index if batched else None))
                continue
            admitted.append(
                Admitted(
                    msg,
                    verdict,
                    resolve_key(verdict),
                    seq,
                    ts,
                    data,
                    index if batched else None,
                    position if index == last else 0,
                    importing=importing,
                )
            )
    return admitted, dead


def stream_position(reply: str) -> tuple[int, float]:
    """(stream sequence, stream timestamp in seconds) from a JetStream message's reply
    subject; cheaper than ``Msg.metadata``, which builds a datetime per message."""
    tokens = reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(tokens[5]), int(tokens[7]) / 1e9
    return int(tokens[Msg.Ack.StreamSeq]), int(tokens[Msg.Ack.Timestamp]) / 1e9


def delivery_sequence(reply: str) -> int:
    """The consumer's delivery sequence from a JetStream message's reply subject: one more
    for every message the consumer hands out, first deliveries and redeliveries alike."""
    tokens = reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(tokens[6])
    return int(tokens[Msg.Ack.ConsumerSeq])


class DeliveryGapError(RuntimeError):
    """A delivery of the shard's consumer never reached this worker (it was in flight on a
    connection that broke). The consumer counts it delivered, and an acknowledgement of a
    later message (AckPolicy.ALL) would count it done: applying past it could lose it, or
    apply an owner's later command before it. The shard's consumer is opened again where
    Redis says the shard stands, which delivers it again, in order."""


def declared_commands(msg: Msg) -> int:
    """Commands a message says it carries, for the window's accounting (admission checks
    the truth)."""
    headers = msg.headers
    if not headers or naming.BATCH_HEADER not in headers:
        return 1
    count = batch_length(msg.data)
    return max(1, count or 1)


_TENANT_OK = re.compile(TENANT_FULL_PATTERN).match


def tenant_label(subject: str) -> str:
    """The tenant a command subject names, if it is one a tenant can have (anything may be
    published on a command subject when the server does not check credentials): it names
    dead-letter and audit subjects and metric attributes."""
    tenant = _tenant_of(subject)
    return tenant if _TENANT_OK(tenant) else "_invalid"


@functools.lru_cache(maxsize=65536)
def subject_identity(subject: str) -> tuple[str, int, str]:
    """(tenant, shard, agent) of a command subject: the identity the server vouched for.
    Cached: a shard sees the same few subjects again and again."""
    return naming.parse_command_subject(subject)


def _tenant_of(subject: str) -> str:
    try:
        return subject_identity(subject)[0]
    except ValueError:
        return naming.tenant_of_command_subject(subject)
