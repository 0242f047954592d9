"""The LangGraph store's key mapping: a namespace label or item key written in zeromem's
key alphabet, reversibly (``_XX`` per UTF-8 byte outside ``[A-Za-z0-9-]``, ``__`` for
``_``; see :mod:`zeromem.integrations.langgraph_store`)."""

from __future__ import annotations

_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_HEX = frozenset("0123456789ABCDEF")


def escape(component: str) -> str:
    """One namespace label or key in the key alphabet; reversible by :func:`unescape`."""
    if component == "":
        return "_"
    out: list[str] = []
    for char in component:
        if char in _PLAIN:
            out.append(char)
        elif char == "_":
            out.append("__")
        else:
            out.extend(f"_{b:02X}" for b in char.encode("utf-8"))
    return "".join(out)


def unescape(text: str) -> str:
    if text == "_":
        return ""
    raw = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char != "_":
            raw += char.encode()
            i += 1
        elif text[i + 1 : i + 2] == "_":
            raw += b"_"
            i += 2
        else:
            pair = text[i + 1 : i + 3]
            if len(pair) != 2 or not set(pair) <= _HEX:
                raise ValueError(f"bad escape in {text!r}")
            raw.append(int(pair, 16))
            i += 3
    return raw.decode("utf-8")
