"""Results of applying a command: what the workers report on the change feed and to a
caller that asked to wait."""

from __future__ import annotations

import msgspec

from zeromem.schemas.memory import MemoryItem


class _Result(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="status"
):
    command_id: str
    tenant: str
    key: str
    op: str
    agent: str = ""
    applied_at: float = 0.0


class Applied(_Result, tag="applied"):
    version: int = 0
    previous_version: int = 0
    item: MemoryItem | None = None  # the memory after the change; None after a delete
    # forget / archive: the memories the command removed or moved (each got a new version)
    keys: tuple[str, ...] = ()


class Conflict(_Result, tag="conflict"):
    expected_version: int = 0
    current_version: int = 0


class Rejected(_Result, tag="rejected"):
    reason: str = ""


Result = Applied | Conflict | Rejected


class DeadLetter(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A message that could not be decoded or validated, kept with its raw bytes."""

    reason: str
    subject: str
    raw: bytes
    received_at: float
    stream_seq: int = 0
    # Set when the message was a batch: the refused command's place in it (``raw`` is
    # that command alone; the others were applied).
    batch_index: int | None = None
