"""What a worker publishes about the commands it applied or refused: each result to a
waiting caller and to the change feed (one message per owner per batch), the audit
trail, dead letters; each message fitted under the broker's payload limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import PubAck

from zeromem import naming
from zeromem.lifecycle.audit import dead_letter_entry, write_entry
from zeromem.lifecycle.redact import Redactor
from zeromem.lifecycle.vault import EncryptionPolicy
from zeromem.limits import Limits
from zeromem.logs import BoundedLog
from zeromem.schemas import (
    Applied,
    AuditBatch,
    AuditEntry,
    DeadLetter,
    Rejected,
    Result,
    chunks,
    encode,
    encode_batch,
    split_batch,
    status_of,
)
from zeromem.telemetry import Telemetry
from zeromem.worker.applier import WorkerStats
from zeromem.worker.faults import CommandFailed, Fault, classify, describe
from zeromem.worker.messages import Admitted, Dead, subject_identity, tenant_label

log = logging.getLogger(__name__)

# A publication whose acknowledgement failed is sent again after this long.
RESEND_DELAY_S = 0.1


@dataclass(slots=True, eq=False)
class Publication:
    """A message published to a stream whose acknowledgement is awaited later (the shard
    goes on meanwhile): kept whole, so that one whose acknowledgement failed or never
    came is sent again under the same message id (stored once)."""

    subject: str
    data: bytes
    headers: dict[str, str]
    ack: asyncio.Future[PubAck]
    sent_at: float
    attempts: int = 0  # acknowledgements that failed other than by an outage
    resends: int = 0  # times sent again (late or failed by an outage)

    def patience(self, first_s: float) -> float:
        """How long its acknowledgement is waited for before it is sent again: ``first_s``
        at first, doubled with each resend up to 16 times that. A broker that is slow, not
        gone, answers late; sending every late message again at once doubles what it must
        take in, and with dead letters of a few hundred kilobytes the resends kept a busy
        broker's answers late for good (issue 12's hostile scenario on a loaded machine)."""
        return first_s * float(2 ** min(self.resends, 4))


class Outbox:
    def __init__(
        self,
        nc: NatsClient,
        *,
        limits: Limits,
        ack_wait_s: float,
        redactor: Redactor,
        telemetry: Telemetry,
        stats: WorkerStats,
        encryption: EncryptionPolicy | None = None,
    ) -> None:
        self.nc = nc
        # Memories encrypted at rest reach the change feed without their item (key,
        # version, op: a reader gets the memory itself) and the audit trail redacted.
        self.encryption = encryption
        self.js = nc.jetstream()
        self.limits = limits
        self.ack_wait_s = ack_wait_s
        self.redactor = redactor
        self.telemetry = telemetry
        self.stats = stats
        self._log = BoundedLog(log, limits.log_interval_s)
        # What one message this worker publishes may carry: the broker's limit (1 MiB by
        # default), less room for headers and the envelope.
        self.payload_limit = max(
            64 * 1024, (getattr(nc, "max_payload", 0) or 1024 * 1024) - 64 * 1024
        )

    async def _publish_stored(
        self, subject: str, data: bytes, headers: dict[str, str]
    ) -> Publication:
        """Publish to a stream; the acknowledgement is the caller's to confirm."""
        ack = await self.js.publish_async(subject, data, headers=headers)
        return Publication(subject, data, headers, ack, time.monotonic())

    async def confirm(self, publications: list[Publication]) -> bool:
        """Whether every one of ``publications`` is stored; the stored ones at its head are
        removed from the list (all of them once it is confirmed). One whose acknowledgement
        failed is sent again (same message id: stored once) after ``RESEND_DELAY_S``, one
        whose acknowledgement has not come within the ack wait (lost in a broker restart)
        then; each later resend of the same one waits twice as long
        (``Publication.patience``); while the broker is unreachable, at the next check
        after that delay. One the broker keeps refusing for another reason is given up
        after ``Limits.message_attempts`` (logged): a record is lost, the shard goes on.

        Cheap however long the list: the loop asks after a window's publications every
        time it acknowledges, and looking through all of them each time (a backlog of
        refused messages holds thousands, each with its dead letter) took 70% of a
        worker's CPU draining issue 12's hostile backlog. So the stored head is dropped as
        it is found, and the look stops at the first one still awaited and not yet due:
        the ones after it were sent after it (a resend is looked at again once the one
        before it is done)."""
        stored = 0
        for pub in publications:
            ack = pub.ack
            if not ack.done() or ack.cancelled() or ack.exception() is not None:
                break
            stored += 1
        if stored:
            del publications[:stored]
        now = time.monotonic()
        confirmed = True
        for n, pub in enumerate(publications):
            ack = pub.ack
            if not ack.done():
                waited = now - pub.sent_at
                if waited < self.ack_wait_s or waited < pub.patience(self.ack_wait_s):
                    confirmed = False
                    break
                ack.cancel()  # frees its place among the client's pending publishes
                self._log.warning(
                    ("late", pub.subject.split(".", 2)[1]),
                    "%s: no acknowledgement in %.1fs; sending it again (resend %d)",
                    pub.subject,
                    now - pub.sent_at,
                    pub.resends + 1,
                )
            elif ack.cancelled() or (
                (exc := ack.exception()) is not None and classify(exc) is Fault.OUTAGE
            ):
                if now - pub.sent_at < pub.patience(RESEND_DELAY_S):
                    confirmed = False
                    continue
            elif exc is not None:
                pub.attempts += 1
                if pub.attempts >= self.limits.message_attempts:
                    self._log.error(
                        ("unstored", type(exc)),
                        "%s refused %d times, given up: %s",
                        pub.subject,
                        pub.attempts,
                        describe(exc),
                    )
                    continue
            else:
                continue  # stored
            confirmed = False
            try:
                again = await self._publish_stored(pub.subject, pub.data, pub.headers)
            except Exception as exc:
                if classify(exc) is not Fault.OUTAGE:
                    raise
                self._log.warning(
                    ("resend", type(exc)), "%s not stored yet: %s", pub.subject, describe(exc)
                )
                pub.sent_at = now  # its ack is done (failed or cancelled): tried again later
                continue
            again.attempts, again.resends = pub.attempts, pub.resends + 1
            self.stats.resent += 1
            publications[n] = again
        if confirmed:
            publications.clear()
        return confirmed

    def prepare(self, item: Admitted, result: Result) -> None:
        """Encode a decided command's result and build its audit entry before the commit
        (what is published after it, if the commit keeps this result). Raises
        ``CommandFailed`` naming the stage that failed."""
        try:
            item.entry = write_entry(
                item.command, item.sequence, result, self.redactor, self._encrypts(result)
            )
        except Exception as exc:
            raise CommandFailed("audit entry", exc) from exc
        try:
            item.payload = self.fitting(result)
        except Exception as exc:
            raise CommandFailed("result encoding", exc) from exc
        item.result = result

    async def announce(self, tenant: str, shard: int, key: str, result: Result) -> None:
        """A change made outside any command (the reaper's expiry) on the change feed."""
        namespace, owner_id, _ = key.split(":", 2)
        await self.nc.publish(
            naming.change_subject(tenant, shard, namespace, owner_id), encode(result)
        )

    async def publish_audit(
        self, shard: int, batch: list[Admitted], results: list[Result | None]
    ) -> list[Publication]:
        """One audit message per tenant in the batch (nearly always one): every applied,
        conflicting and rejected command, redacted. Returns them, to be confirmed before
        the batch's messages are acknowledged."""
        by_tenant: dict[str, list[object]] = {}
        for item, result in zip(batch, results, strict=True):
            if result is None:
                continue
            entries = by_tenant.get(item.command.tenant)
            if entries is None:
                entries = by_tenant[item.command.tenant] = []
            entry = item.entry if result is item.result else None
            entries.append(entry or self.entry_of(item, result))
        acks = []
        last_sequence = batch[-1].sequence if batch else 0
        # A batch message may be applied over several calls: each call's record is named
        # by its last command (sequence and place in its message).
        last_index = (batch[-1].index or 0) if batch else 0
        for tenant, entries in by_tenant.items():
            # Several messages when one would pass the broker's payload limit (a batch of
            # batch messages can hold thousands of commands).
            parts = fit(
                entries,
                lambda part: _encode(AuditBatch(entries=tuple(part))),
                self.payload_limit,
            )
            for n, data in enumerate(parts):
                # a batch retried after a lost ack is recorded once
                part = last_index + n * (self.limits.batch_commands + 1)
                once = naming.audit_dedupe_id(tenant, shard, last_sequence, part)
                acks.append(
                    await self._publish_stored(
                        naming.audit_write_subject(tenant, shard),
                        data,
                        {naming.MSG_ID_HEADER: once},
                    )
                )
        return acks

    async def publish_results(
        self, shard: int, batch: list[Admitted], results: list[Result | None]
    ) -> None:
        publish = self.nc.publish
        reply_header = naming.REPLY_HEADER
        # The change feed gets one message per owner per batch: a single result as it is,
        # several as a batch message (an array, in apply order). Under bulk writes that is
        # a fraction of the messages the broker stores; an agent writing now and then
        # still gets one result per message.
        by_owner: dict[tuple[str, str, str], list[bytes]] = {}
        for item, result in zip(batch, results, strict=True):
            if result is None:
                continue
            data = item.payload if result is item.result else self.payload_of(item, result)
            if not data:
                continue
            namespace, owner_id = item.key.split(":", 2)[:2]
            feed = data if self.encryption is None else self._feed_form(result, data)
            by_owner.setdefault((item.command.tenant, namespace, owner_id), []).append(feed)
            headers = item.msg.headers
            if (
                headers
                and (reply_to := headers.get(reply_header))
                and reply_allowed(item.msg.subject, reply_to)
            ):
                try:
                    await publish(reply_to, data)
                except Exception as exc:
                    if classify(exc) is Fault.OUTAGE:
                        raise
                    # A reply subject the broker refuses is the caller's: its result still
                    # goes to the change feed.
                    self._log.warning(
                        ("reply", shard, type(exc)),
                        "shard %d: could not reply to %.60r: %s",
                        shard,
                        reply_to,
                        describe(exc),
                    )
        for (tenant, namespace, owner_id), encoded in by_owner.items():
            subject = naming.change_subject(tenant, shard, namespace, owner_id)
            for chunk in chunks(encoded, self.payload_limit, naming.MAX_BATCH_RESULTS):
                if len(chunk) == 1:
                    await publish(subject, chunk[0])
                else:
                    await publish(
                        subject, encode_batch(chunk), headers={naming.BATCH_HEADER: str(len(chunk))}
                    )

    def _encrypts(self, result: Result) -> bool:
        encryption = self.encryption
        return encryption is not None and encryption.tenant_encrypts(result.tenant)

    def _feed_form(self, result: Result, data: bytes) -> bytes:
        """What the change feed (a retained stream) keeps of a result: an encrypted
        memory's result without the memory (the caller's own reply keeps it)."""
        assert self.encryption is not None
        if (
            type(result) is Applied
            and result.item is not None
            and self.encryption.seals(result.tenant, result.item)
        ):
            return _encode(msgspec.structs.replace(result, item=None))
        return data

    def fitting(self, result: Result) -> bytes:
        """``result`` encoded; without its memory if that would not fit in one message
        (admission keeps values far smaller, so this is only a guarantee)."""
        data = _encode(result)
        if len(data) > self.payload_limit and type(result) is Applied:
            data = _encode(msgspec.structs.replace(result, item=None))
        return data

    def entry_of(self, item: Admitted, result: Result) -> AuditEntry:
        """The audit entry of a result not prepared with its decision (a stored result
        answering a redelivery): a bare one if the full one cannot be built."""
        try:
            return write_entry(
                item.command, item.sequence, result, self.redactor, self._encrypts(result)
            )
        except Exception as exc:
            self._log.warning(
                ("entry", type(exc)), "audit entry of %s: %s", item.command.id, describe(exc)
            )
            return AuditEntry(
                kind="write",
                at=result.applied_at,
                tenant=result.tenant,
                op=result.op,
                key=result.key,
                status=status_of(result),
                command_id=item.command.id,
                seq=item.sequence,
                reason=f"audit entry incomplete: {type(exc).__name__}",
            )

    def payload_of(self, item: Admitted, result: Result) -> bytes:
        try:
            return self.fitting(result)
        except Exception as exc:
            self._log.warning(
                ("payload", type(exc)),
                "result of %s not published: %s",
                item.command.id,
                describe(exc),
            )
            return b""

    async def dead_letter(self, shard: int, dead: list[Dead]) -> None:
        """Dead-letter ``dead`` and wait until the stream has stored them."""
        sent = await self.send_dead_letters(shard, dead)
        # stored before the originals are acked: nothing is lost (bounded, like the audit)
        await asyncio.wait_for(asyncio.gather(*(pub.ack for pub in sent)), self.ack_wait_s)

    async def send_dead_letters(self, shard: int, dead: list[Dead]) -> list[Publication]:
        """Publish ``dead`` (each with its audit record); returns the acknowledgements to
        wait for before the originals are acknowledged."""
        now = time.time()
        acks = []
        for letter in dead:
            msg, seq = letter.msg, letter.sequence
            where = f"seq {seq}"
            if letter.index is not None:
                where += f" (batch index {letter.index})"
            self._log.warning(
                ("dead", shard, letter.reason.split(":", 1)[0]),
                "dead-lettered command at %s on %s: %s",
                where,
                msg.subject,
                letter.reason[:300],
            )
            tenant = tenant_label(msg.subject)
            once = naming.dead_letter_dedupe_id(tenant, seq, letter.index)
            raw, reason = letter.raw, letter.reason
            kept = letter.raw_kept
            if kept is not None and len(raw) > kept:
                reason += (
                    f" (whole in the command log at seq {seq}; the first {kept} of its "
                    f"{len(raw)} bytes here)"
                )
                raw = raw[:kept]
            if len(raw) > self.payload_limit:  # kept whole it could not be stored at all
                reason += f" (raw bytes cut to the first {self.payload_limit} of {len(raw)})"
                raw = raw[: self.payload_limit]
            acks.append(
                await self._publish_stored(
                    naming.dead_letter_subject(tenant, shard),
                    encode(
                        DeadLetter(
                            reason=reason[:2000],
                            subject=msg.subject,
                            raw=raw,
                            received_at=now,
                            stream_seq=seq,
                            batch_index=letter.index,
                        )
                    ),
                    {
                        naming.DEAD_REASON_HEADER: _header_text(letter.reason),
                        naming.MSG_ID_HEADER: once,
                    },  # once, even when retried
                )
            )
            headers = msg.headers
            if (
                letter.reply
                and headers
                and (reply_to := headers.get(naming.REPLY_HEADER))
                and reply_allowed(msg.subject, reply_to)
            ):
                whole_batch = letter.index is None and naming.BATCH_HEADER in headers
                try:
                    for rejected in _rejections(
                        msg, letter.raw, reply_to, letter.reason, whole_batch, self.limits
                    ):
                        await self.nc.publish(reply_to, encode(rejected))
                except Exception as exc:
                    if classify(exc) is Fault.OUTAGE:
                        raise
        by_tenant: dict[str, list[AuditEntry]] = {}
        for letter in dead:
            tenant = tenant_label(letter.msg.subject)
            by_tenant.setdefault(tenant, []).append(
                dead_letter_entry(
                    tenant, letter.msg.subject, letter.reason, letter.sequence, self.redactor
                )
            )
        last = dead[-1]
        for tenant, entries in by_tenant.items():
            parts = fit(
                entries, lambda part: _encode(AuditBatch(entries=tuple(part))), self.payload_limit
            )
            for n, data in enumerate(parts):
                # Parts after the first: past the index range a batch message can have.
                part = (last.index or 0) + 1 + n * (self.limits.batch_commands + 1)
                acks.append(
                    await self._publish_stored(
                        naming.audit_write_subject(tenant, shard),
                        data,
                        {
                            naming.MSG_ID_HEADER: naming.audit_dedupe_id(
                                tenant, shard, last.sequence, part, kind="dead"
                            )
                        },
                    )
                )
        self.stats.dead_lettered += len(dead)
        counts = Counter(tenant_label(letter.msg.subject) for letter in dead)
        for tenant, count in counts.items():
            label = self.telemetry.tenant(tenant)
            self.telemetry.commands.add(
                count, {"zeromem.tenant": label, "zeromem.op": "", "zeromem.outcome": "dead_letter"}
            )
        return acks


_encode = msgspec.msgpack.Encoder().encode  # schemas.encode's bytes, one call less


def fit(items: list[Any], encode_part: Callable[[list[Any]], bytes], limit: int) -> list[bytes]:
    """``items`` encoded as one message, or halved until each part fits in ``limit`` bytes
    (one item too large on its own goes as it is: the broker then refuses it loudly)."""
    data = encode_part(items)
    if len(data) <= limit or len(items) < 2:
        return [data]
    half = len(items) // 2
    return fit(items[:half], encode_part, limit) + fit(items[half:], encode_part, limit)


def _header_text(text: str) -> str:
    # A header value is one line of printable ASCII: a reason quotes what the agent sent.
    # Most reasons are that already (a quota's refusal, every time): checked in C, where
    # the character loop alone was 5% of a worker's CPU under a flood of refusals.
    text = text[:200]
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if " " <= c <= "~" else "?" for c in text)


class _Named(msgspec.Struct):
    """What a refused command's bytes may still tell, read leniently: its id, key, op."""

    id: str = ""
    key: str = ""
    op: str = ""


_named_decoder = msgspec.msgpack.Decoder(_Named)


def _rejections(
    msg: Msg, raw: bytes, reply_to: str, reason: str, whole_batch: bool, limits: Limits
) -> list[Result]:
    """The ``rejected`` results a caller waiting on a refused message gets: one per
    command (a batch refused whole, one per command it holds, up to the batch limit),
    each with the command's own id, key and op when its bytes still say them. Otherwise
    the id is the reply subject's last token (the SDK waits on {inbox}.{command id})."""
    parts = [raw]
    if whole_batch:
        with contextlib.suppress(Exception):
            parts = split_batch(raw)[: limits.batch_commands] or [raw]
    tenant, fallback = tenant_label(msg.subject), reply_to.rsplit(".", 1)[-1]
    now = time.time()
    rejected: list[Result] = []
    for part in parts:
        try:
            named = _named_decoder.decode(part)
        except Exception:
            named = _Named()
        good = 0 < len(named.id) <= 64 and len(named.key) <= limits.key_chars
        rejected.append(
            Rejected(
                command_id=named.id if good else fallback,
                tenant=tenant,
                key=named.key[:256] if good else "",
                op=named.op[:16] if good else "",
                reason=reason,
                applied_at=now,
            )
        )
    return rejected


@functools.lru_cache(maxsize=65536)
def _reply_prefix(subject: str) -> str:
    tenant, _, agent = subject_identity(subject)
    return naming.agent_inbox_prefix(tenant, agent) + "."


def reply_allowed(subject: str, reply_to: str) -> bool:
    """Whether a command that came on ``subject`` may have its result sent to
    ``reply_to``: only inside the inbox of the agent the subject names (which only that
    agent can subscribe to). Anything else (another tenant's inbox, an audit or command
    subject) is ignored, so a header cannot make the worker publish where it chooses."""
    try:
        return (
            reply_to.startswith(_reply_prefix(subject))
            and "*" not in reply_to
            and ">" not in reply_to
        )
    except ValueError:
        return False
