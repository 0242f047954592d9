"""Function-calling tool definitions (OpenAI ``tools`` format) for zeromem memory.

Why they look like this: the model pays for these definitions on every request, so they are
short; and a model handed a vague ``key: string`` parameter invents keys, so a key is split
into ``namespace`` (an enum), ``owner`` and ``name``, and every description shows a real key.
Each description starts with *when* to use the tool, which is what a model needs to pick one.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Final

from zeromem.schemas import CONTENT_MAX_CHARS, KNOWN_NAMESPACES, MemoryType

TOOL_NAMES: Final = (
    "memory_write",
    "memory_read",
    "memory_update",
    "memory_delete",
    "memory_list",
    "memory_search",
    "memory_recall",
)

RECALL_BUDGET_DEFAULT: Final = 500
RECALL_BUDGET_MAX: Final = 4000
LIST_LIMIT_MAX: Final = 50
SEARCH_LIMIT_MAX: Final = 20


def _key_params(namespaces: tuple[str, ...], *, with_name: bool = True) -> dict[str, Any]:
    # Property descriptions are left out on purpose: each tool's description already shows
    # a full key, which teaches the parts better than words, and costs no extra tokens.
    params: dict[str, Any] = {
        "namespace": {"type": "string", "enum": list(namespaces)},
        "owner": {"type": "string"},
    }
    if with_name:
        params["name"] = {"type": "string"}
    return params


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def tool_definitions(namespaces: tuple[str, ...] = KNOWN_NAMESPACES) -> list[dict[str, Any]]:
    """The seven memory tools, as a fresh list a caller may modify."""
    key = _key_params(namespaces)
    owner_only = _key_params(namespaces, with_name=False)
    return copy.deepcopy(
        [
            _function(
                "memory_write",
                "Save a fact, preference, decision or task state worth keeping beyond this turn. "
                "Key is namespace:owner:name, e.g. user:u10086:pref_lang, task:t42:status. "
                "Overwrites that key; omit name to append a log entry.",
                {
                    **owner_only,
                    "name": {"type": "string"},
                    "value": {"description": "any JSON"},
                    "content": {
                        "type": "string",
                        "maxLength": CONTENT_MAX_CHARS,
                        "description": "one-line summary for recall",
                    },
                    "type": {"type": "string", "enum": [t.value for t in MemoryType]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "ttl_s": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "description": "forget after seconds",
                    },
                },
                ["namespace", "owner", "value"],
            ),
            _function(
                "memory_read",
                "Read one memory when you know its exact key, e.g. user:u10086:pref_lang. "
                'Returns {"found":false} (or your default) when absent.',
                {**key, "default": {"description": "returned when absent"}},
                ["namespace", "owner", "name"],
            ),
            _function(
                "memory_update",
                "Change some fields of an existing memory, e.g. task:t42:status to done "
                "(JSON merge patch; null removes a field). expected_version guards against "
                "overwriting someone else's change.",
                {
                    **key,
                    "patch": {"type": "object"},
                    "content": {"type": "string", "maxLength": CONTENT_MAX_CHARS},
                    "expected_version": {"type": "integer", "minimum": 0},
                },
                ["namespace", "owner", "name", "patch"],
            ),
            _function(
                "memory_delete",
                "Forget a memory that is wrong or no longer true, by exact key, "
                "e.g. user:u10086:pref_lang.",
                key,
                ["namespace", "owner", "name"],
            ),
            _function(
                "memory_list",
                "List an owner's keys with one-line summaries, e.g. everything under task:t42, "
                "to find the key to read.",
                {
                    **owner_only,
                    "prefix": {"type": "string", "description": "of the name"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT_MAX},
                },
                ["namespace", "owner"],
            ),
            _function(
                "memory_search",
                "Find an owner's memories (e.g. user:u10086) by keywords when you do not know "
                "the key.",
                {
                    "query": {"type": "string"},
                    **owner_only,
                    "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT_MAX},
                },
                ["query", "namespace", "owner"],
            ),
            _function(
                "memory_recall",
                "Get an owner's memories most relevant to a question (e.g. for task:t42) as a "
                "short context block; use at the start of a task or when you lack context.",
                {
                    "query": {"type": "string"},
                    **owner_only,
                    "budget": {
                        "type": "integer",
                        "minimum": 50,
                        "maximum": RECALL_BUDGET_MAX,
                        "description": "max tokens",
                    },
                },
                ["query", "namespace", "owner"],
            ),
        ]
    )


def compact_json(value: Any) -> str:
    """JSON without spaces, non-ASCII kept (a CJK character is cheaper than its escape)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def tool_definitions_tokens(
    tools: list[dict[str, Any]] | None = None, encoding: str = "cl100k_base"
) -> int:
    """Tokens of the tool definitions serialised as compact JSON.

    Providers render tools into the prompt in their own layout, so this is an estimate of
    the fixed per-request cost, comparable across versions of these definitions.
    """
    from zeromem.store.tokens import count_tokens

    return count_tokens(compact_json(tool_definitions() if tools is None else tools), encoding)
