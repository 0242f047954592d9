"""Generate the JSON Schema files committed under ``schemas/json`` for agents in other
languages. ``python -m zeromem.schemas.export [DIR]`` rewrites them; a test fails when the
committed files drift from the code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from zeromem.schemas.audit import AuditBatch, AuditEntry
from zeromem.schemas.commands import Command
from zeromem.schemas.memory import MemoryItem
from zeromem.schemas.queries import (
    ArchivedReply,
    ArchivedRequest,
    GetReply,
    GetRequest,
    ListReply,
    ListRequest,
    OwnersReply,
    OwnersRequest,
    RecallReply,
    RecallRequest,
    StatsReply,
    StatsRequest,
)
from zeromem.schemas.results import DeadLetter, Result

SCHEMAS: dict[str, Any] = {
    "command.v1.json": Command,
    # several commands in one message (header Zm-Batch: <count>), each applied on its own
    "command_batch.v1.json": list[Command],
    "result.v1.json": Result,
    "memory_item.v1.json": MemoryItem,
    "get_request.v1.json": GetRequest,
    "get_reply.v1.json": GetReply,
    "list_request.v1.json": ListRequest,
    "list_reply.v1.json": ListReply,
    "recall_request.v1.json": RecallRequest,
    "recall_reply.v1.json": RecallReply,
    "dead_letter.v1.json": DeadLetter,
    "stats_request.v1.json": StatsRequest,
    "stats_reply.v1.json": StatsReply,
    "owners_request.v1.json": OwnersRequest,
    "owners_reply.v1.json": OwnersReply,
    "archived_request.v1.json": ArchivedRequest,
    "archived_reply.v1.json": ArchivedReply,
    "audit_entry.v1.json": AuditEntry,
    "audit_batch.v1.json": AuditBatch,
}

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "json"


def render(type_: Any) -> str:
    return json.dumps(msgspec.json.schema(type_), indent=2, sort_keys=True) + "\n"


def write_all(directory: Path = DEFAULT_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, type_ in SCHEMAS.items():
        path = directory / filename
        path.write_text(render(type_))
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR
    for path in write_all(target):
        print(path)
