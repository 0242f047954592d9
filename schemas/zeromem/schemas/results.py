"""Results of applying a command: what the workers report on the change feed and to a
caller that asked to wait."""

from __future__ import annotations

from typing import Literal, cast

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


class Applied(_Result, tag="applied", frozen=True):
    version: int = 0
    previous_version: int = 0
    item: MemoryItem | None = None  # the memory after the change; None after a delete
    # forget / archive: the memories the command removed or moved (each got a new version)
    keys: tuple[str, ...] = ()


class Conflict(_Result, tag="conflict", frozen=True):
    expected_version: int = 0
    current_version: int = 0


class Rejected(_Result, tag="rejected", frozen=True):
    reason: str = ""


Result = Applied | Conflict | Rejected

# A result's ``status`` on the wire: its msgspec tag.
ResultStatus = Literal["applied", "conflict", "rejected"]
_STATUSES: dict[type[_Result], ResultStatus] = {
    cls: cast(ResultStatus, cls.__struct_config__.tag) for cls in (Applied, Conflict, Rejected)
}


def status_of(result: Result) -> ResultStatus:
    """The result's ``status``, read from its tag."""
    return _STATUSES[type(result)]


class Throttle(msgspec.Struct, frozen=True, omit_defaults=True):
    """A worker to an agent whose commands it refuses over a rate quota: wait this long
    before sending more to the shard. Core NATS, at most a few a second per agent and
    shard, on the agent's own inbox (``naming.throttle_subject``); a client that honours
    it (the SDK does) stops losing writes to the quota, and stops costing the deployment
    the refusals (README, quotas)."""

    tenant: str
    shard: int
    limit: str  # the limit's setting (``tenant_commands_per_s``)
    rate: float  # its value: commands per second of the tenant on the shard
    retry_after_s: float  # until the refused message's commands would be admitted
    refused: int = 0  # commands of the agent's this notice is about


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
