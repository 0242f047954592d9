"""Generate the published contract for clients in other languages: the JSON Schema files
under ``schemas/json`` and the AsyncAPI document ``schemas/asyncapi.yaml`` (see
``zeromem.schemas.asyncapi``). ``python -m zeromem.schemas.export [DIR]`` rewrites them; a
test fails when the committed files drift from the code.

Each schema is JSON Schema 2020-12 as msgspec writes it, with two changes so that strict
validators accept it (jsonschema's metaschema check, Ajv in strict mode): ``$schema`` is
set, and msgspec's ``discriminator`` (an OpenAPI keyword, unknown to JSON Schema) is left
out. A union stays exact without it: every variant fixes its tag (``op``, ``status`` or a
strategy's ``name``) to one value. And a recall request's strategy may also be the empty
map (``zeromem.schemas.strategies.EMPTY_STRATEGY``), which no msgspec type says.
"""

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
    ErrorReply,
    GetReply,
    GetRequest,
    InfoReply,
    InfoRequest,
    ListReply,
    ListRequest,
    OwnersReply,
    OwnersRequest,
    RecallReply,
    RecallRequest,
    StatsReply,
    StatsRequest,
)
from zeromem.schemas.results import DeadLetter, Result, Throttle
from zeromem.schemas.strategies import EMPTY_STRATEGY

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

SCHEMAS: dict[str, Any] = {
    "command.v1.json": Command,
    # several commands in one message (header Zm-Batch: <count>), each applied on its own
    "command_batch.v1.json": list[Command],
    "result.v1.json": Result,
    # several results of one owner in one change-feed message (header Zm-Batch: <count>)
    "result_batch.v1.json": list[Result],
    "memory_item.v1.json": MemoryItem,
    "info_request.v1.json": InfoRequest,
    "info_reply.v1.json": InfoReply,
    "get_request.v1.json": GetRequest,
    "get_reply.v1.json": GetReply,
    "list_request.v1.json": ListRequest,
    "list_reply.v1.json": ListReply,
    "recall_request.v1.json": RecallRequest,
    "recall_reply.v1.json": RecallReply,
    # any request refused (header Zm-Error: <code>), instead of the kind's reply
    "error_reply.v1.json": ErrorReply,
    "dead_letter.v1.json": DeadLetter,
    # a worker to an agent over its tenant's write quota: wait before sending more
    "throttle.v1.json": Throttle,
    "stats_request.v1.json": StatsRequest,
    "stats_reply.v1.json": StatsReply,
    "owners_request.v1.json": OwnersRequest,
    "owners_reply.v1.json": OwnersReply,
    "archived_request.v1.json": ArchivedRequest,
    "archived_reply.v1.json": ArchivedReply,
    "audit_entry.v1.json": AuditEntry,
    "audit_batch.v1.json": AuditBatch,
}

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / "json"


def _without_discriminator(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_discriminator(v) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [_without_discriminator(v) for v in node]
    return node


def _with_empty_strategy(schema: dict[str, Any]) -> dict[str, Any]:
    """A recall request's strategy may also be the empty map (the default, as the first
    clients sent it): the services take it, so the schema says so (msgspec's union
    cannot)."""
    request = schema.get("$defs", {}).get("RecallRequest")
    if request is not None:
        request["properties"]["strategy"]["anyOf"].append(EMPTY_STRATEGY)
    return schema


def schema_of(type_: Any) -> dict[str, Any]:
    schema = _with_empty_strategy(_without_discriminator(msgspec.json.schema(type_)))
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


def render(type_: Any) -> str:
    return json.dumps(schema_of(type_), indent=2, sort_keys=True) + "\n"


def write_all(directory: Path = DEFAULT_DIR) -> list[Path]:
    """Write every JSON Schema into ``directory`` and the AsyncAPI document beside it."""
    from zeromem.schemas.asyncapi import ASYNCAPI_FILE, render_asyncapi

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for stale in directory.glob("*.v*.json"):
        if stale.name not in SCHEMAS:
            stale.unlink()
    for filename, type_ in SCHEMAS.items():
        path = directory / filename
        path.write_text(render(type_))
        written.append(path)
    document = directory.parent / ASYNCAPI_FILE
    document.write_text(render_asyncapi())
    written.append(document)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR
    for path in write_all(target):
        print(path)
