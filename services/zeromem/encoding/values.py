"""JSON-like values (dicts, lists, sets, scalars) as the text ``encode_value`` works from."""

from __future__ import annotations

from typing import Any


def scalar_text(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # beyond Python's int-to-decimal digit limit
            return hex(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def value_pairs(value: Any) -> list[str]:
    """``path=value`` strings for the leaves of a JSON-like value, in input order."""
    containers = (dict, list, tuple, set, frozenset)
    pairs: list[str] = []
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            children = [(v, f"{path}.{k}" if path else str(k)) for k, v in item.items()]
            stack.extend(reversed(children))
        elif isinstance(item, containers):
            members = sorted(item, key=repr) if isinstance(item, set | frozenset) else list(item)
            if all(not isinstance(x, containers) for x in members):
                joined = ", ".join(" ".join(scalar_text(x).split()) for x in members)
                pairs.append(f"{path}={joined}" if path else joined)
            else:
                stack.extend((x, path) for x in reversed(members))
        else:
            rendered = " ".join(scalar_text(item).split())
            pairs.append(f"{path}={rendered}" if path else rendered)
    return pairs
