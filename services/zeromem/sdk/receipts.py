"""What a write returns (:class:`Receipt`) and how long it waits (:class:`Wait`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from zeromem.schemas import (
    Applied,
    Conflict,
    Rejected,
    Result,
    ResultStatus,
)


class Wait(str, Enum):
    NONE = "none"  # handed to the connection; JetStream's ack is checked in the background
    STORED = "stored"  # JetStream has persisted the command
    APPLIED = "applied"  # a worker applied it, or answered conflict / rejected


# "published" and "stored" before any worker answered; a result's status after.
ReceiptStatus = Literal["published", "stored"] | ResultStatus


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a write returns. ``status`` is ``published``, ``stored``, ``applied``,
    ``conflict`` or ``rejected``; the last three come with ``wait="applied"``."""

    command_id: str
    key: str
    status: ReceiptStatus
    stream_seq: int = 0
    duplicate: bool = False  # JetStream had already stored this command id
    result: Result | None = None

    @property
    def version(self) -> int:
        return self.result.version if isinstance(self.result, Applied) else 0

    @property
    def current_version(self) -> int:
        return self.result.current_version if isinstance(self.result, Conflict) else self.version

    @property
    def ok(self) -> bool:
        return self.status in ("published", "stored", "applied")

    @property
    def reason(self) -> str:
        return self.result.reason if isinstance(self.result, Rejected) else ""
