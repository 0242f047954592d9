"""Bulk import: a JSON Lines file of memories, written with their original times.

One memory per line, the fields of a put::

    {"key": "conv:c1:s01-t003", "value": "Mara: I finally signed up for ...",
     "type": "message", "created_at": "2023-03-14T18:02:00Z"}

``key`` is required (a key without a name, ``conv:c1``, appends); ``value``, ``content``,
``type``, ``tags``, ``references``, ``source``, ``confidence``, ``sensitive`` and
``index_key`` are optional as on ``MemoryClient.put``; ``created_at`` and ``updated_at``
are ISO 8601 (a time without an offset is UTC) or epoch seconds. Any other field, or a
value the contract refuses, stops the import at that line with its number and the reason;
everything before it is sent.

The commands go to the tenant's *import* subjects (``naming.import_subject``), where the
workers accept times older than their clock-skew bound, through the SDK's batched
fire-and-forget path (full write speed). Each command's id is derived from the tenant,
the line's number and the line's bytes (``ids.stable_command_id``, time-ordered by
``created_at``): sending a line twice is recognised as a duplicate, so an import is
idempotent. Every ``CHECKPOINT_LINES`` lines the client waits until JetStream has stored
everything sent, then records how far it got in a small state file; an interrupted import
run again with the same state directory resumes there (a file whose size or modification
time changed starts over, which is safe for the same reason).

With ``wait_applied`` the last command of each shard is sent waiting for its result: a
shard applies in order, so once each has answered, the workers have applied the whole
file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from zeromem.ids import stable_command_id
from zeromem.schemas import Put
from zeromem.sdk.client import MemoryClient, Wait

CHECKPOINT_LINES = 5000
_FIELDS = frozenset(
    {
        "key",
        "value",
        "content",
        "type",
        "tags",
        "references",
        "source",
        "confidence",
        "sensitive",
        "index_key",
        "created_at",
        "updated_at",
    }
)


class ImportLineError(ValueError):
    """A line that cannot be imported; nothing from it on was sent."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass(slots=True)
class ImportReport:
    lines: int = 0  # lines of the file done (sent now or in an earlier run)
    sent: int = 0  # commands sent by this run
    resumed_at: int = 0  # lines skipped as done by an earlier run
    blank: int = 0
    applied: int = 0  # shards whose last command was confirmed applied
    rejected: list[str] = field(default_factory=list)  # reasons, for the confirmed ones


def parse_time(raw: Any, name: str) -> float | None:
    """Epoch seconds from epoch seconds or an ISO 8601 string (UTC without an offset)."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ValueError(f"{name} must be ISO 8601 or epoch seconds, got {raw!r}")
    if isinstance(raw, str):
        try:
            at = datetime.fromisoformat(raw)
        except ValueError:
            raise ValueError(f"{name} {raw!r} is not ISO 8601") from None
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        return at.timestamp()
    if not math.isfinite(raw) or raw < 0:
        raise ValueError(f"{name} must be a non-negative number of seconds, got {raw!r}")
    return float(raw)


def command_of(line: bytes, number: int, tenant: str, agent: str) -> Put:
    """The put a line stands for (its id derived from tenant, number and bytes)."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ImportLineError(number, f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ImportLineError(number, "expected a JSON object")
    unknown = sorted(set(record) - _FIELDS)
    if unknown:
        raise ImportLineError(
            number, f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}"
        )
    if "key" not in record:
        raise ImportLineError(number, "no key")
    try:
        created = parse_time(record.get("created_at"), "created_at")
        updated = parse_time(record.get("updated_at"), "updated_at")
    except ValueError as exc:
        raise ImportLineError(number, str(exc)) from None
    at = created if created is not None else updated
    seed = b"%s\x00%d\x00%s" % (tenant.encode(), number, line)
    fields = {
        **record,
        "created_at": created,
        "updated_at": updated,
        "id": stable_command_id(int((at or 0.0) * 1000), seed),
        "tenant": tenant,
        "agent": agent,
        "ts": at or 0.0,
    }
    try:
        return msgspec.convert(fields, Put)
    except (msgspec.ValidationError, ValueError) as exc:
        raise ImportLineError(number, str(exc)) from None


class _State:
    """How far an import of one file into one tenant got, kept in ``directory``."""

    def __init__(self, directory: Path, path: Path, tenant: str) -> None:
        stat = path.stat()
        self.stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        name = hashlib.sha1(f"{path.resolve()}\x00{tenant}".encode()).hexdigest()[:20]
        self.file = directory / f"import-{name}.json"

    def load(self) -> tuple[int, int]:
        """(lines done, byte offset) of an earlier run of the same file, else (0, 0)."""
        try:
            saved = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return 0, 0
        if saved.get("file") != self.stamp:
            return 0, 0  # the file changed: start over (ids make that safe)
        return int(saved["lines"]), int(saved["offset"])

    def save(self, lines: int, offset: int) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"file": self.stamp, "lines": lines, "offset": offset}))
        tmp.replace(self.file)


async def import_file(
    client: MemoryClient,
    path: Path,
    *,
    state_dir: Path,
    wait_applied: bool = True,
    restart: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import ``path`` into the client's tenant (see the module docstring).
    ``on_progress(bytes_done, bytes_total)`` is called as lines go out; ``restart``
    ignores an earlier run's state."""
    state = _State(state_dir, path, client.tenant)
    report = ImportReport()
    done, offset = (0, 0) if restart else state.load()
    report.resumed_at = done
    total = state.stamp["size"]
    # Per subject, its latest command, held back until the next one (or the end) so the
    # very last of each shard can be sent waiting for its result.
    held: dict[str, Put] = {}
    number = done
    with path.open("rb") as handle:
        handle.seek(offset)
        since_checkpoint = 0
        for raw in handle:
            number += 1
            offset += len(raw)
            line = raw.strip()
            if not line:
                report.blank += 1
            else:
                try:
                    command = command_of(line, number, client.tenant, client.agent)
                except ImportLineError:
                    # Everything before this line goes out and counts as done.
                    for command in held.values():
                        await client.send(command, importing=True)
                    await client.flush()
                    state.save(number - 1, offset - len(raw))
                    raise
                subject, _ = client.route(
                    command.tenant, command.agent, command.key, importing=True
                )
                previous = held.get(subject)
                if previous is not None:
                    await client.send(previous, importing=True)
                    report.sent += 1
                held[subject] = command
            since_checkpoint += 1
            if since_checkpoint >= CHECKPOINT_LINES:
                for command in held.values():
                    await client.send(command, importing=True)
                    report.sent += 1
                held.clear()
                await client.flush()
                state.save(number, offset)
                since_checkpoint = 0
            if on_progress is not None and number % 256 == 0:
                on_progress(offset, total)
    last = list(held.values())
    if wait_applied and last:
        receipts = await asyncio.gather(
            *(client.send(c, Wait.APPLIED, importing=True) for c in last)
        )
        for receipt in receipts:
            if receipt.status == "applied" or receipt.duplicate:
                report.applied += 1
            else:
                report.rejected.append(f"{receipt.key}: {receipt.status} {receipt.reason}")
    else:
        for command in last:
            await client.send(command, importing=True)
    report.sent += len(last)
    await client.flush()
    state.save(number, offset)
    report.lines = number
    if on_progress is not None:
        on_progress(offset, total)
    return report


__all__ = [
    "CHECKPOINT_LINES",
    "ImportLineError",
    "ImportReport",
    "command_of",
    "import_file",
    "parse_time",
]
