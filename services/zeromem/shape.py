"""What a free-form value may look like: a memory's value, a patch, a recall's strategy.

The wire contract types these ``Any`` (an agent stores whatever structure it likes), so
msgspec decodes every msgpack shape into them, including those that broke the services
further down: maps with integer or mixed keys (sorting their keys raised TypeError
outside any guard), extension types (a timestamp arrives as a ``datetime``), hundreds of
levels of nesting (RecursionError in code that walks a value), NaN. The rule here is
JSON's: maps with string keys, arrays, strings, finite numbers, booleans and nil, nested
at most ``Limits.nesting_depth`` deep. One iterative walk, no recursion: a value is at
most ``Limits.value_bytes`` long, so the walk is bounded by the size already admitted.
"""

from __future__ import annotations

import functools
import math
import re

from zeromem.limits import AGENT_CHARSET, refusal

_SCALARS = (str, int, bool, type(None))


def shape_refusal(value: object, *, depth_limit: int, where: str) -> str | None:
    """Why ``value`` is not an acceptable free-form value (a refusal naming the rule or
    the limit), or None if it is."""
    kind = type(value)
    if kind in _SCALARS:
        return None
    if kind is float:
        return None if math.isfinite(value) else _non_finite(where)  # type: ignore[arg-type]
    if kind is not dict and kind is not list:
        return _foreign(value, where)
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > depth_limit:
            return refusal(
                "nesting_depth", f"{where} nests lists and maps more than {depth_limit} deep"
            )
        if type(node) is dict:
            for key in node:
                if type(key) is not str:
                    return refusal(
                        "map_keys",
                        f"{where} has a map key of type {type(key).__name__}: map keys are strings",
                    )
            children = node.values()
        else:
            children = node  # type: ignore[assignment]
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is float:
                if not math.isfinite(child):
                    return _non_finite(where)
            elif kind not in _SCALARS:
                return _foreign(child, where)
    return None


def finite_refusal(where: str, *numbers: float | None) -> str | None:
    """A refusal if any of ``numbers`` is NaN or infinite."""
    for number in numbers:
        if number is not None and not math.isfinite(number):
            return _non_finite(where)
    return None


def _non_finite(where: str) -> str:
    return refusal("non_finite", f"{where} holds a NaN or infinite number")


def _foreign(value: object, where: str) -> str:
    if isinstance(value, bytes):
        return refusal(
            "ext_types", f"{where} holds binary data (msgpack bin): values are JSON-like"
        )
    return refusal(
        "ext_types",
        f"{where} holds a msgpack extension type ({type(value).__name__}): values are JSON-like",
    )


_agent_ok = re.compile(AGENT_CHARSET).match


@functools.lru_cache(maxsize=65536)
def agent_refusal(agent: str, limit: int, what: str = "agent") -> str | None:
    """Why ``agent`` (an agent id, or a reader) is not an acceptable id, or None. Cached:
    the services see the same few agents again and again."""
    if len(agent) > limit:
        return refusal("agent_chars", f"{what} is {len(agent)} characters, limit {limit}")
    if not _agent_ok(agent):
        return refusal(
            "agent_chars",
            f"{what} {agent[:40]!r} has a character outside letters, digits and _ - . : @ / + =",
        )
    return None
