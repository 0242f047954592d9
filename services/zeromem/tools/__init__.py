"""Memory as function-calling tools: definitions in the OpenAI format and their dispatcher."""

from zeromem.tools.definitions import (
    TOOL_NAMES,
    compact_json,
    tool_definitions,
    tool_definitions_tokens,
)
from zeromem.tools.dispatcher import ToolArgumentError, ToolDispatcher, check_arguments

__all__ = [
    "TOOL_NAMES",
    "ToolArgumentError",
    "ToolDispatcher",
    "check_arguments",
    "compact_json",
    "tool_definitions",
    "tool_definitions_tokens",
]
