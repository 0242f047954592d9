"""Stage 1: a long text prepared for extraction: JSON flattened, lines cut into units.

Owns the prepared text (:class:`Doc`), which both the scanner and the scoring read, so the
survival guarantee holds on exactly the text the content is composed from: JSON objects and
arrays flattened to ``key: value`` lines (with a weight per key), NDJSON events to one line
each, and lines cut into sentence, clause or word-run units of at most ``MAX_UNIT_CHARS``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Final

from zeromem.encoding.text import safe_cut, word_list
from zeromem.schemas.memory import CONTENT_MAX_CHARS

MAX_UNIT_CHARS: Final = 120
"""Sentences longer than this are cut into clauses so that several can fit in the content."""

# Sentence ends within a line: ASCII punctuation followed by a space (so "3.14", "a.b.com"
# and "t42." at the end stay whole) or CJK punctuation. It starts with a character class for
# the same skip-ahead reason as the scanner.
_SENTENCE_END_RE: Final = re.compile(
    r"[.!?;…。！？；]"
    r"(?:(?<=[.!?;…])[.!?;…]*+[\"')\]]? |(?<=[。！？；])[。！？；]*+[”」』）)\"']? ?)"
)
# Preferred places to cut an over-long sentence, best first.
_CLAUSE_SEPARATORS: Final = ("；", "; ", "，", ", ", "、", "：", ": ", " - ", " | ", " ")
_JSON_FIELD_LINE_RE: Final = re.compile(r'"((?:[^"\\]|\\.){0,80})" ?: ?(.*)')
_KEY_LINE_RE: Final = re.compile(r"([A-Za-z_$@][\w.$@-]{0,40}|[\u4e00-\u9fff]{1,8}) ?[:=] ?\S")
_INFORMATIVE_KEY_PARTS: Final = frozenset(
    word_list(
        """
        id name title subject status state total amount price cost sum balance date time
        created updated due deadline email user customer client order invoice error message msg
        reason result summary note type code sku currency city address phone decision preference
        request action owner assignee account ticket issue number level
        """
    )
)
_NOISE_KEY_PARTS: Final = frozenset(
    word_list(
        """
        url urls href link links uri avatar icon image img thumbnail etag hash sha signature
        token cursor checksum schema html css agent headers header cookie base64 blob gravatar
        node trace span md5 nonce
        """
    )
)
_KEY_SPLIT_RE: Final = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])")


class Doc:
    """The prepared text, its units (sentence/clause spans) and a weight per unit."""

    __slots__ = ("starts", "text", "units", "weights")

    def __init__(self, text: str, units: list[tuple[int, int]], weights: list[float]) -> None:
        self.text = text
        self.units = units
        self.starts = [start for start, _ in units]
        self.weights = weights


def prepare(text: str) -> Doc | None:
    """Prepare a long text; ``None`` when its whitespace-normalised form fits after all."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        words = stripped.split()
        if sum(map(len, words)) + len(words) - 1 <= CONTENT_MAX_CHARS:
            return None
        flat = _flatten_json_text(stripped)
        if flat is not None and flat[0]:
            return _build(*flat)
    normalised = [line for line in (" ".join(raw.split()) for raw in text.splitlines()) if line]
    if sum(map(len, normalised)) + len(normalised) - 1 <= CONTENT_MAX_CHARS:
        return None
    events = _flatten_json_lines(normalised)
    lines: list[str] = []
    weights: list[float] = []
    for i, line in enumerate(normalised):
        first = line[0]
        if i in events:
            # A JSON object per log line (NDJSON): its fields on one line, one unit per event.
            line = events[i]
        elif first == '"':
            # A line of JSON that did not parse as a whole (a tool result cut off mid-way).
            line = _clean_json_line(line)
            if not line:
                continue
        elif first in "{}[]" and not line.strip("{}[], "):
            continue  # only brackets: nothing to remember
        match = _KEY_LINE_RE.match(line)
        lines.append(line)
        weights.append(_key_weight(match.group(1)) if match else 1.0)
    if not lines:  # nothing but brackets: keep the text as it is rather than nothing
        return _build([" ".join(text.split())], [1.0])
    return _build(lines, weights)


_MAX_JSON_DEPTH: Final = 100


class _TooDeep(Exception):
    """JSON nested deeper than ``_MAX_JSON_DEPTH``: treated as plain text instead."""


# Numbers keep their original spelling ("1.50" stays "1.50"). One decoder for all calls:
# json.loads(..., parse_int=...) would build a new one every time.
_JSON_DECODER: Final = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str)


def _flatten_json_text(text: str) -> tuple[list[str], list[float]] | None:
    """``key: value`` lines and their weights for a JSON object or array, else ``None``.

    A leaf is labelled with its nearest dict key, list positions are dropped (the ``items``
    of an order read ``sku: A1``, ``sku: B2``), a list of short scalars becomes one line,
    empty strings and nulls are skipped. JSON nested deeper than ``_MAX_JSON_DEPTH`` is left
    to the plain-text path (``None``).
    """
    try:
        value = _JSON_DECODER.decode(text)
    except (ValueError, RecursionError):
        return None
    if type(value) is not dict and type(value) is not list:
        return None
    lines: list[str] = []
    weights: list[float] = []
    try:
        _walk_json(value, "", 0, lines, weights, {})
    except (_TooDeep, RecursionError):
        return None
    return lines, weights


def _clean_json_line(line: str) -> str:
    """``key: value`` for a line such as ``"id": "t42",``; ``""`` for a line that only
    opens a container (``"items": [``) or holds null; an array item loses its quotes."""
    match = _JSON_FIELD_LINE_RE.match(line)
    if match is None:
        if len(line) >= 2 and line.endswith(('"', '",')):
            return " ".join(line.rstrip(",")[1:-1].split())
        return line
    key, value = match.group(1), match.group(2).rstrip(",").rstrip()
    if value in ("{", "[", "{}", "[]", "null", '""'):
        return ""
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        value = value[1:-1]
    return " ".join((f"{key}: {value}" if key else value).split())


def _flatten_json_lines(lines: list[str]) -> dict[int, str]:
    """``key: value; key: value`` for the lines that hold a JSON object, by line index.

    All candidate lines are decoded in one call (the per-call overhead of the decoder is most
    of the cost for short log events); if that fails, line by line.
    """
    candidates = [
        i
        for i, line in enumerate(lines)
        if line[0] == "{" and line[-1] == "}" and len(line) <= 8192
    ]
    if not candidates:
        return {}
    values: list[Any] | None = None
    if len(candidates) > 1:
        try:
            values = _JSON_DECODER.decode("[" + ",".join([lines[i] for i in candidates]) + "]")
        except (ValueError, RecursionError):
            values = None
        if values is not None and len(values) != len(candidates):
            values = None  # a line held more than one value
    if values is None:
        values = []
        for i in candidates:
            try:
                values.append(_JSON_DECODER.decode(lines[i]))
            except (ValueError, RecursionError):
                values.append(None)
    flattened: dict[int, str] = {}
    for i, value in zip(candidates, values, strict=True):
        if type(value) is dict:
            line = _flatten_event(value)
            if line:
                flattened[i] = line
    return flattened


def _flatten_event(value: dict[str, Any]) -> str | None:
    """One decoded JSON object as ``key: value; key: value``."""
    if set(map(type, value.values())) <= _STR_ONLY:
        # The usual log event: flat, every value a string or a number (numbers arrive as str).
        # One whitespace normalisation for the whole line is cheaper than one per field.
        line = "; ".join(
            [f"{k}: {v}" if k else v for k, v in value.items() if v and not v.isspace()]
        )
        return " ".join(line.split())
    lines: list[str] = []
    try:
        _walk_json(value, "", 0, lines, [], {})
    except (_TooDeep, RecursionError):
        return None
    return "; ".join(lines)


_STR_ONLY: Final = frozenset({str})


def _walk_json(
    item: Any,
    key: str,
    depth: int,
    lines: list[str],
    weights: list[float],
    keys: dict[str, tuple[str, float]],
) -> None:
    """Append the leaves of a decoded JSON value (``keys`` caches key name and weight)."""
    if depth > _MAX_JSON_DEPTH:
        raise _TooDeep
    if type(item) is dict:
        for k, v in item.items():
            kind = type(v)
            if kind is dict or kind is list:
                _walk_json(v, k, depth + 1, lines, weights, keys)
                continue
            if kind is str:  # numbers are str too (parse_int=str, parse_float=str)
                rendered = " ".join(v.split())
                if not rendered:
                    continue
            elif v is None:
                continue
            else:
                rendered = "true" if v else "false"
            known = keys.get(k)  # _emit_field, inlined: this is the hot loop
            if known is None:
                name = " ".join(k.split())
                known = keys[k] = (name, _key_weight(name))
            lines.append(f"{known[0]}: {rendered}" if known[0] else rendered)
            weights.append(known[1])
        return
    # A list: short scalars on one line, anything else item by item under the same key.
    if item and all(type(x) is str or type(x) is bool for x in item):
        joined = " ".join(", ".join(_json_scalar(x) for x in item).split())
        if len(joined) <= MAX_UNIT_CHARS:
            if joined.strip(", "):
                _emit_field(key, joined, lines, weights, keys)
            return
    for x in item:
        kind = type(x)
        if kind is dict or kind is list:
            _walk_json(x, key, depth + 1, lines, weights, keys)
        elif x is not None:
            rendered = _json_scalar(x)
            if rendered:
                _emit_field(key, rendered, lines, weights, keys)


def _emit_field(
    key: str,
    rendered: str,
    lines: list[str],
    weights: list[float],
    keys: dict[str, tuple[str, float]],
) -> None:
    known = keys.get(key)
    if known is None:
        name = " ".join(key.split())
        known = keys[key] = (name, _key_weight(name))
    lines.append(f"{known[0]}: {rendered}" if known[0] else rendered)
    weights.append(known[1])


def _json_scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return ""
    return " ".join(str(value).split())


@lru_cache(maxsize=4096)
def _key_weight(key: str) -> float:
    """Weight of a field by its key: informative keys up, noise keys (links, hashes) down."""
    if not key:
        return 1.0
    parts = [p.lower() for p in _KEY_SPLIT_RE.split(key.rsplit(".", 1)[-1]) if p]
    if any(p in _NOISE_KEY_PARTS for p in parts):
        return 0.35
    if any(p in _INFORMATIVE_KEY_PARTS for p in parts) or key.lower().endswith("id"):
        return 1.5
    return 1.0


def _build(lines: list[str], line_weights: list[float]) -> Doc:
    """Join the (normalised, non-empty) lines into the prepared text and cut it into units.

    A line of at most ``MAX_UNIT_CHARS`` is one unit as it is (a log event, a JSON field, a
    short message line), which keeps the common case free of regex work; longer lines are
    cut at sentence ends and then, if still too long, at clause separators.
    """
    text = "\n".join(lines)
    units: list[tuple[int, int]] = []
    weights: list[float] = []
    offset = 0
    for line, weight in zip(lines, line_weights, strict=True):
        end = offset + len(line)
        if end - offset <= MAX_UNIT_CHARS:
            units.append((offset, end))
            weights.append(weight)
        else:
            before = len(units)
            start = offset
            for match in _SENTENCE_END_RE.finditer(text, offset, end):
                stop = match.end()  # the match takes the space after the sentence, if any
                piece_end = stop - 1 if text[stop - 1] == " " else stop
                if piece_end - start <= MAX_UNIT_CHARS:
                    if piece_end > start:
                        units.append((start, piece_end))
                else:
                    _add_piece(text, start, piece_end, units)
                start = stop
            _add_piece(text, start, end, units)
            weights.extend([weight] * (len(units) - before))
        offset = end + 1
    return Doc(text, units, weights)


def _add_piece(text: str, start: int, end: int, units: list[tuple[int, int]]) -> None:
    """Add ``text[start:end]`` (trimmed) as units no longer than ``MAX_UNIT_CHARS``."""
    while start < end and text[start] == " ":
        start += 1
    while end > start and text[end - 1] == " ":
        end -= 1
    while end - start > MAX_UNIT_CHARS:
        limit = start + MAX_UNIT_CHARS
        low = start + MAX_UNIT_CHARS // 3  # no tiny leading fragments
        cut = -1
        for separator in _CLAUSE_SEPARATORS:
            i = text.rfind(separator, low, limit)
            if i >= 0:
                cut = i + len(separator)
                break
        if cut < 0:
            cut = safe_cut(text, limit, start)
        piece_end = cut
        while piece_end > start and text[piece_end - 1] == " ":
            piece_end -= 1
        if piece_end > start:
            units.append((start, piece_end))
        start = cut
        while start < end and text[start] == " ":
            start += 1
    if end > start:
        units.append((start, end))
