"""JSON merge patch (RFC 7396): the semantics of the ``patch`` command."""

from __future__ import annotations

from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """Return ``target`` with ``patch`` applied; neither argument is modified.

    A patch that is not an object replaces the target; ``None`` in an object removes that
    member; nested objects merge recursively.
    """
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result
