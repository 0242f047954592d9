"""``ToolDispatcher``: run a model's memory tool call against zeromem, answer compact JSON.

The dispatcher sits inside an agent loop, so it never raises: bad arguments, a key outside
the grammar, an unreachable service and a refused write all come back as
``{"error": ...}``, which the model can read and correct. A read that finds nothing is an
ordinary answer (``{"found": false}`` or the caller's default), not an error.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from zeromem.schemas import MemoryKey, MemoryType
from zeromem.sdk.client import MemoryClient, Receipt, Wait
from zeromem.sdk.errors import ZeromemError
from zeromem.tools.definitions import (
    LIST_LIMIT_MAX,
    RECALL_BUDGET_DEFAULT,
    SEARCH_LIMIT_MAX,
    compact_json,
    tool_definitions,
)

log = logging.getLogger(__name__)

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "object": (dict,),
    "array": (list,),
    "boolean": (bool,),
}


class ToolArgumentError(ValueError):
    """Arguments that do not fit the tool's schema; reported to the model, never raised."""


def check_arguments(schema: dict[str, Any], args: dict[str, Any]) -> None:
    """Validate ``args`` against the subset of JSON Schema the definitions use.

    Hand-written rather than ``jsonschema`` so the runtime needs no extra dependency; the
    unit tests check the definitions themselves against the real meta-schema.
    """
    props: dict[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", ()) if name not in args]
    if missing:
        raise ToolArgumentError(f"missing argument(s): {', '.join(missing)}")
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(args) - set(props))
        if unknown:
            raise ToolArgumentError(
                f"unknown argument(s): {', '.join(unknown)}; expected {', '.join(props)}"
            )
    for name, value in args.items():
        _check_value(name, props.get(name, {}), value)


def _check_value(name: str, spec: dict[str, Any], value: Any) -> None:
    kind = spec.get("type")
    if kind is not None:
        ok = isinstance(value, _JSON_TYPES[kind]) and not (
            isinstance(value, bool) and kind in ("integer", "number")
        )
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            ok = True
        if not ok:
            raise ToolArgumentError(f"{name} must be {kind}, got {type(value).__name__}")
        if kind == "number" and not math.isfinite(value):
            raise ToolArgumentError(f"{name} must be a finite number")
    if "enum" in spec and value not in spec["enum"]:
        raise ToolArgumentError(f"{name} must be one of {', '.join(map(str, spec['enum']))}")
    if "maxLength" in spec and len(value) > spec["maxLength"]:
        raise ToolArgumentError(f"{name} is longer than {spec['maxLength']} characters")
    if "minimum" in spec and value < spec["minimum"]:
        raise ToolArgumentError(f"{name} must be >= {spec['minimum']}")
    if "maximum" in spec and value > spec["maximum"]:
        raise ToolArgumentError(f"{name} must be <= {spec['maximum']}")
    if "exclusiveMinimum" in spec and value <= spec["exclusiveMinimum"]:
        raise ToolArgumentError(f"{name} must be > {spec['exclusiveMinimum']}")
    if kind == "array" and "items" in spec:
        for i, element in enumerate(value):
            _check_value(f"{name}[{i}]", spec["items"], element)


class ToolDispatcher:
    """Executes the memory tools of :func:`tool_definitions` with a :class:`MemoryClient`.

    ``wait`` is the write level for memory_write/update/delete. It defaults to ``applied``:
    unlike a hook, a tool's answer is read by the model, which may read the key back next or
    must learn of a version conflict; waiting costs milliseconds, never tokens. Pass
    ``wait="none"`` for fire-and-forget tool writes.
    """

    def __init__(
        self,
        client: MemoryClient,
        *,
        wait: Wait | str = Wait.APPLIED,
        tools: list[dict[str, Any]] | None = None,
        max_value_chars: int = 2000,
        encoding: str = "cl100k_base",
    ) -> None:
        self.client = client
        self.wait = Wait(wait)
        self.tools = tools if tools is not None else tool_definitions()
        self.max_value_chars = max_value_chars
        self.encoding = encoding
        self._schemas = {t["function"]["name"]: t["function"]["parameters"] for t in self.tools}
        self._handlers = {
            "memory_write": self._write,
            "memory_read": self._read,
            "memory_update": self._update,
            "memory_delete": self._delete,
            "memory_list": self._list,
            "memory_search": self._search,
            "memory_recall": self._recall,
        }

    @property
    def names(self) -> list[str]:
        return list(self._schemas)

    async def call(self, name: str, arguments: dict[str, Any] | str | None = None) -> str:
        """Run tool ``name``; ``arguments`` as the model sent them (a JSON string or a dict)."""
        return compact_json(await self.call_json(name, arguments))

    async def call_json(
        self, name: str, arguments: dict[str, Any] | str | None = None
    ) -> dict[str, Any]:
        """:meth:`call`, before serialisation (for callers that embed the result)."""
        try:
            if name not in self._schemas or name not in self._handlers:
                return {"error": f"unknown tool {name!r}; tools: {', '.join(self._schemas)}"}
            args = _parse_arguments(arguments)
            check_arguments(self._schemas[name], args)
            return await self._handlers[name](args)
        except (ToolArgumentError, ValueError) as exc:  # InvalidKeyError is a ValueError
            return {"error": str(exc)}
        except ZeromemError as exc:
            return {"error": f"memory service: {exc}"}
        except Exception as exc:  # the agent loop must survive anything a tool does
            log.exception("memory tool %s failed", name)
            return {"error": f"{type(exc).__name__}: {exc}"}

    async def call_openai(self, tool_call: dict[str, Any]) -> dict[str, Any]:
        """Answer one OpenAI ``tool_calls`` entry with the matching ``role: tool`` message."""
        function = tool_call.get("function", {})
        content = await self.call(function.get("name", ""), function.get("arguments"))
        return {"role": "tool", "tool_call_id": tool_call.get("id", ""), "content": content}

    # --- handlers ------------------------------------------------------------------------

    async def _write(self, a: dict[str, Any]) -> dict[str, Any]:
        key = _key(a, a.get("name"))
        receipt = await self.client.put(
            key,
            a["value"],
            content=a.get("content"),
            type=MemoryType(a.get("type", "fact")),
            tags=a.get("tags", ()),
            ttl=a.get("ttl_s"),
            wait=self.wait,
        )
        return _receipt(receipt)

    async def _read(self, a: dict[str, Any]) -> dict[str, Any]:
        key = _key(a, a["name"])
        item = await self.client.get(key)
        if item is None:
            return {"found": False, "value": a["default"]} if "default" in a else {"found": False}
        out: dict[str, Any] = {"found": True, "value": item.value, "version": item.version}
        if item.value is None or len(compact_json(item.value)) > self.max_value_chars:
            # Large values would flood the context; the encoder's content keeps the gist.
            out["value"] = None
            out["content"] = item.content
            out["value_omitted"] = item.value is not None
        return out

    async def _update(self, a: dict[str, Any]) -> dict[str, Any]:
        key = _key(a, a["name"])
        receipt = await self.client.patch(
            key,
            a["patch"],
            content=a.get("content"),
            expected_version=a.get("expected_version"),
            wait=self.wait,
        )
        return _receipt(receipt)

    async def _delete(self, a: dict[str, Any]) -> dict[str, Any]:
        receipt = await self.client.delete(_key(a, a["name"]), wait=self.wait)
        return _receipt(receipt)

    async def _list(self, a: dict[str, Any]) -> dict[str, Any]:
        owner = _key(a, None)
        prefix = f"{owner}:{a.get('prefix', '')}"
        page = await self.client.list(prefix, limit=int(a.get("limit", 20)))
        out: dict[str, Any] = {
            "items": [{"key": i.key, "content": i.content} for i in page.items][:LIST_LIMIT_MAX]
        }
        if page.next_cursor:
            out["more"] = True
        return out

    async def _search(self, a: dict[str, Any]) -> dict[str, Any]:
        owner = _key(a, None)
        found = await self.client.search(
            a["query"], owners=[owner], limit=min(int(a.get("limit", 5)), SEARCH_LIMIT_MAX)
        )
        return {
            "results": [
                {"key": m.key, "content": m.content, "score": round(m.score, 2)} for m in found
            ]
        }

    async def _recall(self, a: dict[str, Any]) -> dict[str, Any]:
        owner = _key(a, None)
        reply = await self.client.recall(
            a["query"],
            owners=[owner],
            budget=int(a.get("budget", RECALL_BUDGET_DEFAULT)),
            k=10,
            encoding=self.encoding,
        )
        return {
            "context": reply.context,
            "keys": [m.key for m in reply.memories],
            "tokens": reply.tokens,
            "saved_tokens": max(reply.baseline_tokens - reply.tokens, 0),
        }


def _parse_arguments(arguments: dict[str, Any] | str | None) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(f"arguments are not valid JSON: {exc.msg}") from None
    if not isinstance(arguments, dict):
        raise ToolArgumentError("arguments must be a JSON object")
    return arguments


def _key(a: dict[str, Any], name: str | None) -> str:
    """Assemble and check ``namespace:owner[:name]`` (the SDK would also refuse a bad key,
    but this message tells the model which part to fix)."""
    key = f"{a['namespace']}:{a['owner']}" + (f":{name}" if name else "")
    MemoryKey.parse(key)
    return key


def _receipt(receipt: Receipt) -> dict[str, Any]:
    out: dict[str, Any] = {"ok": receipt.ok, "key": receipt.key}
    if receipt.status == "applied":
        out["version"] = receipt.version
    elif receipt.status == "conflict":
        out["conflict"] = True
        out["current_version"] = receipt.current_version
    elif receipt.status == "rejected":
        reason = receipt.reason
        if reason.startswith("not_found"):
            out["found"] = False
        out["error"] = reason
    else:
        out["status"] = receipt.status
    return out
