"""Deterministic, model-free encoder: long text in, at most 200 characters of memory content out.

Why this exists
---------------
A memory's ``content`` is what ranking and keyword recall look at and what gets injected into
prompts, so it must be short (``CONTENT_MAX_CHARS``) yet keep what a later query will name:
ids, numbers, dates, amounts, names and the request or decision itself. Writing it must cost
no tokens, so the default encoder is extractive and purely lexical: no model, no network, no
randomness, and nothing that depends on hash or set ordering. The same input always gives
the same output, in any process.

How the default encoder works
-----------------------------
1. Whitespace is normalised (runs of whitespace become one space). If the result fits in
   ``CONTENT_MAX_CHARS`` it *is* the content: nothing is dropped, so nothing is lost.
2. Otherwise the text is prepared: JSON (a text that parses as an object or array, or a log
   line that is a JSON object) is flattened into ``key: value`` lines; other text keeps its
   lines. Every line is cut into units: sentences (English and Chinese punctuation), and
   sentences longer than ``MAX_UNIT_CHARS`` into clauses, then word runs, then hard pieces.
3. Salient tokens are extracted from the prepared text (see "Salient tokens" below), and
   every unit is scored by information density: cue words of requests and decisions
   ("decided", "must", "please", "需要", "决定", "喜欢", questions, errors), salient tokens,
   capitalised names and CJK characters, divided by the unit's length. Fields under
   informative JSON keys (``id``, ``status``, ``total``...) weigh more, noise keys (``url``,
   ``etag``, ``avatar``...) less, and so do not crowd out the fields a query would name.
4. The guaranteed tokens are reserved first, then units are taken greedily by score as long
   as body plus the tail of still-uncovered guaranteed tokens fits; the chosen units are put
   back in their original order. What room is left takes further salient tokens.
5. Layout: ``<units>… | <tail tokens>``. The ``…`` appears exactly when part of the
   prepared text was left out; the tail (tokens in order of appearance) only when needed.
   With no room for any unit the content is ``<tail tokens> …``.

Salient tokens and the survival guarantee
-----------------------------------------
:func:`salient_tokens` lists the tokens of the *prepared* text (the whitespace-normalised
input when that fits in 200 characters, else the flattened/split form of step 2),
deduplicated, in priority order: by tier, then by first position.

* tier 0, ids: URL hosts and the last path segment of URLs, e-mail addresses, UUIDs, words
  mixing ASCII letters and digits (``t42``, ``u10086``, ``INV-2024-0042``, ``v1.2.3``,
  ``a3f9c2e``), ``#123`` references, dotted numbers (IPs, versions), digit groups joined by
  dashes (phone numbers);
* tier 1, dates, times and amounts: ``2024-03-05``, ``2024-03-05T12:30:00Z``, ``3/5/2024``,
  ``March 5, 2024``, ``2024年3月5日``, ``12:30``, ``3pm``, ``下午3点``, ``$1,299.00``,
  ``12.5 USD``, ``300元``, ``45%``, ``35ms``, ``2GB``, ``5个``;
* tier 2, bare numbers with at least 3 digits; tier 3, other bare numbers.

Tokens longer than ``MAX_TOKEN_CHARS`` (blobs) are not salient.

Guarantee: walk :func:`salient_tokens` in order and keep a token when its length, plus one
separator for every kept token after the first, still fits in ``TOKEN_BUDGET`` (150) chars;
a token that does not fit is skipped and the walk goes on. The kept tokens
(:func:`guaranteed_tokens`) all occur in the content as whole tokens: not preceded or
followed by an ASCII letter or digit where the token itself starts or ends with one (see
:func:`contains_token`). In particular: if all salient tokens joined by single spaces fit in
150 chars, every one of them survives; otherwise ids come first, then dates/times/amounts,
then long numbers, then short ones, each class by position. Content that is the whole
normalised input (step 1) keeps every token. The 50 chars between ``TOKEN_BUDGET`` and
``CONTENT_MAX_CHARS`` are what keeps room for at least one sentence.

Other guarantees: ``len(content) <= CONTENT_MAX_CHARS``; non-empty for input that has a
non-whitespace character; never raises on any ``str``; never cuts a surrogate pair or puts a
combining mark at the start of a piece, and cuts words only when a single word is longer
than the room (blobs, CJK runs without punctuation).
"""

from __future__ import annotations

import json
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable
from functools import lru_cache
from itertools import pairwise
from typing import Any, Final, Protocol, runtime_checkable

from zeromem.schemas.memory import CONTENT_MAX_CHARS

__all__ = [
    "CONTENT_MAX_CHARS",
    "ELLIPSIS",
    "MAX_TOKEN_CHARS",
    "MAX_UNIT_CHARS",
    "TAIL_SEPARATOR",
    "TOKEN_BUDGET",
    "Encoder",
    "ExtractiveEncoder",
    "contains_token",
    "default_encoder",
    "encode_value",
    "guaranteed_tokens",
    "salient_tokens",
]

TOKEN_BUDGET: Final = 150
"""Chars (tokens plus one space between each) reserved for guaranteed salient tokens."""
MAX_TOKEN_CHARS: Final = 64
"""Longer tokens are blobs (base64, minified data), not something a query names."""
MAX_UNIT_CHARS: Final = 120
"""Sentences longer than this are cut into clauses so that several fit in the content."""
ELLIPSIS: Final = "…"
TAIL_SEPARATOR: Final = " | "

# --------------------------------------------------------------------------------------------
# Salient token patterns.
#
# One alternation, so one C-level pass finds every token; at a given position the first
# alternative wins, which is why the specific classes (URL, e-mail, UUID, date, amount) come
# before the generic ones (id, number). Boundaries are ASCII-only on purpose: Chinese text
# puts ids right against CJK characters ("订单t42已发货"), which `\b` would not split.
# Repetitions are bounded or possessive so that a 10 KB blob cannot make the engine
# backtrack quadratically.
# --------------------------------------------------------------------------------------------

_LB = r"(?<![A-Za-z0-9_])"
_RB = r"(?![A-Za-z0-9_])"
_NUM = r"(?:\d{1,3}(?:,\d{3})++(?:\.\d++)?|\d++(?:\.\d++)?)"
_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November"
    r"|December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)"
)
_CODES = r"(?:USD|EUR|GBP|JPY|CNY|RMB|HKD|CHF|CAD|AUD|SGD|KRW|INR|TWD)"
_CJK_UNITS = (
    r"(?:美元|欧元|英镑|日元|港币|块钱|万元|亿元|公斤|公里|小时|分钟|元|块|万|亿|个|件|次|人|天"
    r"|秒|岁|周|台|张|份|单|箱|瓶|斤|米|年|月|日|号)"
)
_ASCII_UNITS = (
    r"(?:ms|µs|us|ns|sec|secs|mins|min|hrs|hr|kg|km|cm|mm|mg|GB|MB|KB|TB|Gb|Mb|gb|mb|kb|tb"
    r"|px|pt|x|s|h|d|m|g|k|K|M|B)"
)
_SPACED_UNITS = r"(?:ms|sec|secs|seconds|minutes|mins|hours|hrs|days|kg|km|GB|MB|KB|TB)"

_TOKEN_PATTERN = "|".join(
    [
        # URLs: reduced below to host, inner tokens and last path segment.
        r"(?P<url>" + _LB + r"(?:https?://|ftp://|www\.)[^\s<>\"'`{}|\\^\[\]]++)",
        r"(?P<email>(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@"
        r"(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}" + _RB + ")",
        r"(?P<uuid>" + _LB + r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
        r"-[0-9a-fA-F]{12}" + _RB + ")",
        r"(?P<date>" + _LB + r"(?:"
        r"\d{4}-\d{1,2}-\d{1,2}(?:T\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?"
        r"(?:Z|[+-]\d{2}:?\d{2})?)?"
        r"|\d{4}/\d{1,2}/\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{4}\.\d{1,2}\.\d{1,2}(?![.\d])"
        r"|(?:\d{4}年)?\d{1,2}月\d{1,2}[日号]|\d{4}年(?:\d{1,2}月)?"
        r"|\d{1,2} " + _MONTH + r"\.?(?: \d{4})?"
        r")"
        + _RB
        + r"|(?<![A-Za-z])"
        + _MONTH
        + r"\.? \d{1,2}(?:st|nd|rd|th)?(?:, \d{4})?"
        + _RB
        + ")",
        r"(?P<time>" + _LB + r"(?:"
        r"\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?: ?[AaPp]\.?[Mm]\.?)?"
        r"|\d{1,2} ?[AaPp][Mm]|\d{1,2}点(?:\d{1,2}分|半)?"
        r")" + _RB + ")",
        r"(?P<amount>"
        r"(?:US\$|HK\$|C\$|A\$|[$€£¥￥₹₩₽]) ?"
        + _NUM
        + r"(?:bn|[kKMB]|万|亿|千)?"
        + _RB
        + r"|"
        + _LB
        + _CODES
        + r" ?"
        + _NUM
        + _RB
        + r"|"
        + _LB
        + _NUM
        + r"(?: ?(?:"
        + _CODES
        + r"|%|％|‰)|"
        + _CJK_UNITS
        + r")"
        + _RB
        + r"|"
        + _LB
        + _NUM
        + r"(?:"
        + _ASCII_UNITS
        + r"| "
        + _SPACED_UNITS
        + r")"
        + _RB
        + ")",
        # Codes made of digits only: dotted (IPs, versions), dashed (phones), "#123".
        r"(?P<code>"
        + _LB
        + r"(?:\d{1,4}(?:\.\d{1,4}){2,}(?::\d{1,5})?|\d{2,}(?:-\d{2,})++)"
        + _RB
        + r"|(?<![A-Za-z0-9_&])#\d{1,12}"
        + _RB
        + ")",
        # Ids: letters and digits mixed, "-", "_" and "." allowed between alphanumerics. The
        # lookahead only skips words without any digit cheaply; the digit-and-letter rule is
        # re-checked in Python because the lookahead may see past the token's end.
        r"(?P<id>" + _LB + r"(?=[A-Za-z0-9._-]{0,80}?\d)(?=[A-Za-z0-9._-]{0,80}?[A-Za-z])"
        r"(?![0-9]{1,12}(?:st|nd|rd|th)" + _RB + ")"
        r"[A-Za-z0-9](?:[A-Za-z0-9]|[._-](?=[A-Za-z0-9]))*+" + _RB + ")",
        r"(?P<num>(?<![A-Za-z0-9_.])" + _NUM + _RB + ")",
    ]
)
_TOKEN_RE: Final = re.compile(_TOKEN_PATTERN)
_HAS_LETTER_RE: Final = re.compile(r"[A-Za-z]")
_HAS_DIGIT_RE: Final = re.compile(r"\d")
_THREE_DIGITS_RE: Final = re.compile(r"\d\D*\d\D*\d")
_API_VERSION_RE: Final = re.compile(r"[vV]\d{1,2}")
_SEGMENT_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]*")

_TIER: Final = {
    "url": 0,
    "email": 0,
    "uuid": 0,
    "code": 0,
    "id": 0,
    "date": 1,
    "time": 1,
    "amount": 1,
}
_TIER_WEIGHT: Final = (3.0, 2.0, 1.5, 0.5)

# --------------------------------------------------------------------------------------------
# Scoring features: cue words of requests/decisions/problems, questions, capitalised names.
# --------------------------------------------------------------------------------------------

_EN_CUES = (
    "decided|decide|decides|deciding|decision|will|won't|must|should|shall|need|needs|needed"
    "|prefer|prefers|preferred|preference|please|pls|want|wants|wanted|wish|agreed|agree"
    "|approved|approve|approval|confirmed|confirm|cancelled|canceled|cancel|refunded|refund"
    "|deadline|due|asap|urgent|important|remember|always|never|don't|do not|likes|like|liked"
    "|loves|love|hates|hate|error|failed|failure|fails|exception|fatal|warning|timeout"
    "|denied|rejected|todo|action|chose|choose|plan|planned|going to"
)
_ZH_CUES = (
    "不喜欢|喜欢|讨厌|需要|决定|希望|请|必须|应该|偏好|确认|取消|退款|记住|重要|错误|失败|异常|想要"
    "|要求|截止|务必|总是|从不|打算|计划|同意|拒绝|提醒|别忘|不要|一定"
)
_FEATURE_RE: Final = re.compile(
    r"(?P<cue>(?<![A-Za-z])(?i:" + _EN_CUES + r")(?![A-Za-z])|" + _ZH_CUES + ")"
    r"|(?P<q>[?？])"
    r"|(?P<name>(?<![A-Za-z])[A-Z][a-z]{1,20}(?![A-Za-z]))"
)
_CUE_WEIGHT: Final = 4.0
_QUESTION_WEIGHT: Final = 3.0
_NAME_WEIGHT: Final = 1.0
_CJK_WEIGHT: Final = 0.06  # per CJK character; Chinese carries a word in ~1.5 chars
_BASE_INFO: Final = 0.5
_LEAD_BONUS: Final = (1.0, 0.5)  # the first units of a message tend to state its point
_HINT_WEIGHT: Final = 2.0

# --------------------------------------------------------------------------------------------
# Unit splitting.
# --------------------------------------------------------------------------------------------

# Sentence ends: CJK punctuation ends a sentence right away; ASCII needs a following space so
# that "3.14", "a.b.com" and "t42." inside a token are left alone.
_SENTENCE_END_RE: Final = re.compile(r"[。！？；]+[”」』）)]?|[.!?;…]+[\"')\]]?(?= )")
# Preferred places to cut an over-long sentence, best first.
_CLAUSE_SEPARATORS: Final = ("；", "; ", "，", ", ", "、", "：", ": ", " - ", " | ", " ")
_KEY_LINE_RE: Final = re.compile(r"([A-Za-z_$@][\w.$@-]{0,40}|[\u4e00-\u9fff]{1,8}) ?[:=] ?\S")

_INFORMATIVE_KEY_PARTS: Final = frozenset(
    [
        "id",
        "name",
        "title",
        "subject",
        "status",
        "state",
        "total",
        "amount",
        "price",
        "cost",
        "sum",
        "balance",
        "date",
        "time",
        "created",
        "updated",
        "due",
        "deadline",
        "email",
        "user",
        "customer",
        "client",
        "order",
        "invoice",
        "error",
        "message",
        "msg",
        "reason",
        "result",
        "summary",
        "note",
        "type",
        "code",
        "sku",
        "qty",
        "quantity",
        "currency",
        "city",
        "address",
        "phone",
        "decision",
        "preference",
        "request",
        "action",
        "owner",
        "assignee",
        "account",
        "ticket",
        "issue",
        "number",
        "no",
        "level",
    ]
)
_NOISE_KEY_PARTS: Final = frozenset(
    [
        "url",
        "urls",
        "href",
        "link",
        "links",
        "uri",
        "avatar",
        "icon",
        "image",
        "img",
        "thumbnail",
        "etag",
        "hash",
        "sha",
        "signature",
        "token",
        "cursor",
        "checksum",
        "schema",
        "html",
        "css",
        "agent",
        "headers",
        "header",
        "cookie",
        "base64",
        "blob",
        "gravatar",
        "node",
        "trace",
        "span",
        "etag",
        "md5",
        "nonce",
    ]
)
_KEY_SPLIT_RE: Final = re.compile(r"[^a-z0-9]+|(?<=[a-z])(?=[A-Z])")

_JOIN_SPACE_AFTER: Final = frozenset(".!?…;,:\"')]")
_JOIN_NOTHING_AFTER: Final = frozenset("。！？；，、：”」』）")
_TRIM_BEFORE_ELLIPSIS: Final = " ,;:，、；：.-|"


# ============================================================================================
# Public API
# ============================================================================================


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns text into memory content of at most ``CONTENT_MAX_CHARS`` chars.

    The default is :class:`ExtractiveEncoder`; a team can put a local model behind this
    interface. ``hint`` is free-form context about what the text is or what matters (a memory
    key, a type such as ``"tool_result"``, a topic); an encoder may ignore it.
    """

    def encode(self, text: str, *, hint: str | None = None) -> str: ...


class ExtractiveEncoder:
    """The default encoder: extractive, lexical, deterministic; see the module docstring.

    Stateless, so instances are interchangeable and safe to share between threads.
    ``hint`` words (2+ chars, case-insensitive) raise the score of units that contain them;
    the hint never changes which tokens are guaranteed.
    """

    __slots__ = ()

    def encode(self, text: str, *, hint: str | None = None) -> str:
        if not isinstance(text, str):
            raise TypeError(f"encode() takes str, not {type(text).__name__}")
        flat = " ".join(text.split())
        if len(flat) <= CONTENT_MAX_CHARS:
            return flat
        doc = _prepare(text)
        occurrences = _extract(doc.text)
        ranked, positions = _rank(occurrences)
        required = _greedy_fit(ranked, TOKEN_BUDGET)
        return _compose(doc, occurrences, ranked, positions, required, hint)

    def __repr__(self) -> str:
        return "ExtractiveEncoder()"


_DEFAULT_ENCODER: Final = ExtractiveEncoder()


def default_encoder() -> Encoder:
    """The shared default encoder (an :class:`ExtractiveEncoder`; it holds no state)."""
    return _DEFAULT_ENCODER


def salient_tokens(text: str) -> list[str]:
    """The salient tokens of ``text`` in priority order (tier, then first position).

    Computed on the same prepared form the encoder works from, so it is the exact basis of
    the survival guarantee.
    """
    flat = " ".join(text.split())
    prepared = flat if len(flat) <= CONTENT_MAX_CHARS else _prepare(text).text
    return _rank(_extract(prepared))[0]


def guaranteed_tokens(text: str) -> list[str]:
    """The salient tokens that :class:`ExtractiveEncoder` guarantees to keep for ``text``.

    The greedy walk over :func:`salient_tokens` with :data:`TOKEN_BUDGET` described in the
    module docstring; returned in priority order.
    """
    return _greedy_fit(salient_tokens(text), TOKEN_BUDGET)


def contains_token(content: str, token: str) -> bool:
    """Whether ``token`` occurs in ``content`` as a whole token.

    An occurrence counts unless an ASCII letter or digit touches it on a side where the token
    itself begins or ends with one, so ``t42`` is in ``"order t42."`` but not in ``"t420"``.
    """
    if not token:
        return True
    n = len(token)
    check_left = _is_ascii_alnum(token[0])
    check_right = _is_ascii_alnum(token[-1])
    end = len(content)
    i = content.find(token)
    while i >= 0:
        if (not check_left or i == 0 or not _is_ascii_alnum(content[i - 1])) and (
            not check_right or i + n == end or not _is_ascii_alnum(content[i + n])
        ):
            return True
        i = content.find(token, i + 1)
    return False


def encode_value(value: Any, *, encoder: Encoder | None = None, hint: str | None = None) -> str:
    """Memory content for a JSON-like value (what a ``put`` without explicit content stores).

    * ``None``, booleans and numbers: their JSON spelling (``null``, ``true``, ``42``, ``1.5``);
    * strings: whitespace-normalised when that fits, else through ``encoder``;
    * dicts and lists: flattened to ``key=value`` pairs (nested keys dotted, list positions
      dropped, keys in input order, sets sorted) joined by ``"; "``, when that fits; else the
      pairs go to ``encoder`` one per line, so the default encoder keeps the most
      informative ones and the ids and numbers.

    The result is always at most ``CONTENT_MAX_CHARS`` chars: a custom encoder's over-long
    answer is cut (with ``…``).
    """
    enc = encoder if encoder is not None else _DEFAULT_ENCODER
    if isinstance(value, dict | list | tuple | set | frozenset):
        pairs = _value_pairs(value)
        compact = "; ".join(pairs)
        if len(compact) <= CONTENT_MAX_CHARS:
            return compact
        return _bounded(enc.encode("\n".join(pairs), hint=hint))
    text = _scalar_text(value)
    flat = " ".join(text.split())
    if len(flat) <= CONTENT_MAX_CHARS:
        return flat
    return _bounded(enc.encode(text, hint=hint))


# ============================================================================================
# Preparation: JSON flattening and unit splitting
# ============================================================================================


class _Doc:
    """The prepared text and its units (sentence/clause spans) with per-unit weights."""

    __slots__ = ("starts", "text", "units", "weights")

    def __init__(self, text: str, units: list[tuple[int, int]], weights: list[float]) -> None:
        self.text = text
        self.units = units
        self.starts = [start for start, _ in units]
        self.weights = weights


def _prepare(text: str) -> _Doc:
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        value = _loads(stripped)
        if isinstance(value, dict | list):
            lines: list[tuple[str, float]] = []
            _flatten_json(value, lines)
            if lines:
                return _build(lines)
    lines = []
    for raw in text.splitlines():
        line = " ".join(raw.split())
        if not line:
            continue
        if line[0] == "{" and line[-1] == "}" and len(line) <= 8192:
            # One JSON object per log line (NDJSON): flatten it onto the same line.
            value = _loads(line)
            if isinstance(value, dict):
                fields: list[tuple[str, float]] = []
                _flatten_json(value, fields)
                if fields:
                    line = "; ".join(field for field, _ in fields)
        lines.append((line, _line_weight(line)))
    return _build(lines)


def _loads(text: str) -> Any:
    """Parse JSON keeping numbers as their original spelling (``1.50`` stays ``1.50``)."""
    try:
        return json.loads(text, parse_int=str, parse_float=str, parse_constant=str)
    except (ValueError, RecursionError):
        return None


def _flatten_json(value: Any, out: list[tuple[str, float]]) -> None:
    """Append ``key: value`` lines for the leaves of ``value``, in document order.

    A leaf is labelled with its nearest dict key (list positions are dropped: ``items`` of an
    order read as ``sku: A1``, ``sku: B2``), a list of short scalars becomes one line, empty
    strings and nulls are skipped. Iterative, so any depth json accepted is fine here.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, key = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, str(k)) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            if item and all(isinstance(x, str | bool | int | float) for x in item):
                rendered = [_json_scalar(x) for x in item]
                joined = ", ".join(r for r in rendered if r)
                if joined and len(joined) <= MAX_UNIT_CHARS:
                    out.append((f"{key}: {joined}" if key else joined, _key_weight(key)))
                    continue
            stack.extend((x, key) for x in reversed(item))
        elif item is not None:
            rendered = _json_scalar(item)
            if rendered:
                out.append((f"{key}: {rendered}" if key else rendered, _key_weight(key)))


def _json_scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return ""
    return " ".join(str(value).split())


def _line_weight(line: str) -> float:
    match = _KEY_LINE_RE.match(line)
    return _key_weight(match.group(1)) if match else 1.0


@lru_cache(maxsize=4096)
def _key_weight(key: str) -> float:
    """Weight of a field by its key: informative keys up, noise keys (links, hashes) down."""
    if not key:
        return 1.0
    parts = [p for p in _KEY_SPLIT_RE.split(key.split(".")[-1]) if p]
    lowered = [p.lower() for p in parts]
    if any(p in _NOISE_KEY_PARTS for p in lowered):
        return 0.35
    if any(p in _INFORMATIVE_KEY_PARTS for p in lowered) or key.lower().endswith("id"):
        return 1.5
    return 1.0


def _build(lines: list[tuple[str, float]]) -> _Doc:
    """Join the lines into the prepared text and cut them into units."""
    units: list[tuple[int, int]] = []
    weights: list[float] = []
    offset = 0
    for line, weight in lines:
        before = len(units)
        start = 0
        for match in _SENTENCE_END_RE.finditer(line):
            _add_piece(line, start, match.end(), offset, units)
            start = match.end()
        _add_piece(line, start, len(line), offset, units)
        weights.extend([weight] * (len(units) - before))
        offset += len(line) + 1
    return _Doc("\n".join(line for line, _ in lines), units, weights)


def _add_piece(line: str, start: int, end: int, offset: int, units: list[tuple[int, int]]) -> None:
    """Add ``line[start:end]`` (trimmed) as units no longer than ``MAX_UNIT_CHARS``."""
    while start < end and line[start] == " ":
        start += 1
    while end > start and line[end - 1] == " ":
        end -= 1
    while end - start > MAX_UNIT_CHARS:
        limit = start + MAX_UNIT_CHARS
        low = start + MAX_UNIT_CHARS // 3  # no tiny leading fragments
        cut = -1
        for separator in _CLAUSE_SEPARATORS:
            i = line.rfind(separator, low, limit)
            if i >= 0:
                cut = i + len(separator)
                break
        if cut < 0:
            cut = _safe_cut(line, limit, start)
        piece_end = cut
        while piece_end > start and line[piece_end - 1] == " ":
            piece_end -= 1
        if piece_end > start:
            units.append((offset + start, offset + piece_end))
        start = cut
        while start < end and line[start] == " ":
            start += 1
    if end > start:
        units.append((offset + start, offset + end))


def _safe_cut(text: str, limit: int, floor: int = 0) -> int:
    """A cut position <= ``limit`` that splits no surrogate pair or grapheme, and no ASCII
    word unless that word began before ``floor`` + a third of the room (a blob)."""
    cut = limit
    while cut > floor + 1 and _attaches(text, cut):
        cut -= 1
    if cut < len(text) and _is_ascii_alnum(text[cut]) and _is_ascii_alnum(text[cut - 1]):
        i = cut - 1
        while i > floor and _is_ascii_alnum(text[i - 1]):
            i -= 1
        if i - floor >= (limit - floor) // 3:
            cut = i
    return max(cut, floor + 1)


def _attaches(text: str, i: int) -> bool:
    """True if cutting before ``text[i]`` would tear a character sequence apart."""
    if i <= 0 or i >= len(text):
        return False
    prev, char = text[i - 1], text[i]
    if "\ud800" <= prev <= "\udbff" and "\udc00" <= char <= "\udfff":
        return True  # surrogate pair (only in strings built from lone surrogates)
    if prev == "\u200d" or char == "\u200d" or "\ufe00" <= char <= "\ufe0f":
        return True  # zero-width joiner or variation selector
    return char > "\u02ff" and unicodedata.combining(char) != 0


# ============================================================================================
# Token extraction
# ============================================================================================

# (start, end, token, tier)
_Occurrence = tuple[int, int, str, int]


def _extract(text: str) -> list[_Occurrence]:
    """Every salient token occurrence in ``text``, by position."""
    found: list[_Occurrence] = []
    append = found.append
    for match in _TOKEN_RE.finditer(text):
        kind = match.lastgroup
        if kind == "url":
            _extract_url(text, match.start(), match.end(), found)
            continue
        start, end = match.span()
        if end - start > MAX_TOKEN_CHARS:
            continue
        token = match.group()
        tier = _tier(kind, token)
        if tier >= 0:
            append((start, end, token, tier))
    return found


def _tier(kind: str | None, token: str) -> int:
    """Tier of a matched token, or -1 if it is not salient after all."""
    if kind == "id":
        # The id lookaheads may look past the token's end ("3..a"); re-check here.
        if _HAS_DIGIT_RE.search(token) is None:
            return -1
        if _HAS_LETTER_RE.search(token) is None:
            kind = "num"
    if kind == "num":
        return 2 if _THREE_DIGITS_RE.search(token) else 3
    return _TIER.get(kind or "", -1)


def _extract_url(text: str, start: int, end: int, found: list[_Occurrence]) -> None:
    """A URL gives its host, the tokens inside its path and query, and its last segment.

    API version segments (``v1``, ``v2``) are skipped: every URL of an API has one.
    """
    while end > start and text[end - 1] in ".,;:!?)'\"":
        end -= 1  # sentence punctuation after a URL is not part of it
    after_scheme = text.find("://", start, end)
    host_start = after_scheme + 3 if after_scheme >= 0 else start
    host_end = host_start
    while host_end < end and text[host_end] not in "/?#":
        host_end += 1
    at = text.rfind("@", host_start, host_end)
    if at >= 0:
        host_start = at + 1
    if 0 < host_end - host_start <= MAX_TOKEN_CHARS:
        found.append((host_start, host_end, text[host_start:host_end], 0))
    if host_end >= end:
        return
    inner_spans: set[tuple[int, int]] = set()
    for match in _TOKEN_RE.finditer(text, host_end, end):
        kind = match.lastgroup
        s, e = match.span()
        token = match.group()
        if kind == "url" or e - s > MAX_TOKEN_CHARS or _API_VERSION_RE.fullmatch(token):
            continue
        tier = _tier(kind, token)
        if tier >= 0:
            found.append((s, e, token, tier))
            inner_spans.add((s, e))
    path_end = host_end
    while path_end < end and text[path_end] not in "?#":
        path_end += 1
    segment_start = text.rfind("/", host_end, path_end) + 1
    if segment_start > 0:
        segment = _SEGMENT_RE.fullmatch(text, segment_start, path_end)
        if (
            segment is not None
            and 2 <= path_end - segment_start <= MAX_TOKEN_CHARS
            and (segment_start, path_end) not in inner_spans
            and not _API_VERSION_RE.fullmatch(segment.group())
        ):
            found.append((segment_start, path_end, segment.group(), 0))
    found.sort()  # inner tokens were appended after the host; keep positional order


def _rank(occurrences: Iterable[_Occurrence]) -> tuple[list[str], dict[str, int]]:
    """Deduplicate tokens; order them by (tier, first position). Also return first positions.

    A token seen in several classes (rare: a URL segment that is also an id) keeps its best
    tier.
    """
    first: dict[str, tuple[int, int]] = {}
    for start, _end, token, tier in occurrences:
        seen = first.get(token)
        if seen is None:
            first[token] = (tier, start)
        elif tier < seen[0]:
            first[token] = (tier, seen[1])
    ranked = sorted(first, key=first.__getitem__)
    return ranked, {token: position for token, (_tier, position) in first.items()}


def _greedy_fit(tokens: list[str], budget: int) -> list[str]:
    kept: list[str] = []
    used = 0
    for token in tokens:
        cost = len(token) + (1 if kept else 0)
        if used + cost <= budget:
            kept.append(token)
            used += cost
    return kept


# ============================================================================================
# Scoring, selection and layout
# ============================================================================================


def _compose(
    doc: _Doc,
    occurrences: list[_Occurrence],
    ranked: list[str],
    positions: dict[str, int],
    required: list[str],
    hint: str | None,
) -> str:
    text, units, starts = doc.text, doc.units, doc.starts
    n = len(units)
    if n == 0:  # cannot happen for text with a non-space char; be total anyway
        return _tail_only(required)

    info = [_BASE_INFO] * n
    required_set = set(required)
    covers: list[list[str]] = [[] for _ in range(n)]
    for start, end, token, tier in occurrences:
        u = bisect_right(starts, start) - 1
        if u >= 0 and end <= units[u][1]:
            info[u] += _TIER_WEIGHT[tier]
            if token in required_set:
                covers[u].append(token)
    for match in _FEATURE_RE.finditer(text):
        u = bisect_right(starts, match.start()) - 1
        if u < 0:
            continue
        kind = match.lastgroup
        info[u] += (
            _CUE_WEIGHT if kind == "cue" else _QUESTION_WEIGHT if kind == "q" else _NAME_WEIGHT
        )
    for u, bonus in enumerate(_LEAD_BONUS[:n]):
        info[u] += bonus
    hint_words = _hint_words(hint)

    scores = [0.0] * n
    seen_units: set[str] = set()
    for u, (start, end) in enumerate(units):
        unit = text[start:end]
        if unit in seen_units:
            scores[u] = -1.0  # repeated line: saying it twice adds nothing
            continue
        seen_units.add(unit)
        extra = len(unit.encode("utf-8", "surrogatepass")) - len(unit)
        value = info[u] + _CJK_WEIGHT * (extra / 2)
        if hint_words:
            lowered = unit.lower()
            value += _HINT_WEIGHT * sum(1 for word in hint_words if word in lowered)
        scores[u] = value * doc.weights[u] / (end - start + 20)

    # Greedy selection. Cost accounting is conservative: every join counts 2 chars ("; ").
    token_cost = {token: len(token) + 1 for token in required}
    uncovered = dict.fromkeys(required)
    tail_len = sum(token_cost.values()) - 1 if required else -1
    body_len = 0
    chosen: list[int] = []
    order = sorted(range(n), key=lambda i: (-scores[i], i))
    for u in order:
        if scores[u] < 0:
            break
        length = units[u][1] - units[u][0] + (2 if chosen else 0)
        freed = 0
        for token in covers[u]:
            if token in uncovered:
                freed += token_cost[token]
        new_tail = tail_len - freed
        total = body_len + length + 1 + (len(TAIL_SEPARATOR) + new_tail if new_tail > 0 else 0)
        if total > CONTENT_MAX_CHARS:
            continue
        chosen.append(u)
        body_len += length
        for token in covers[u]:
            uncovered.pop(token, None)
        tail_len = new_tail

    truncated = len(chosen) < n
    if chosen:
        chosen.sort()
        body = _join_units([text[units[u][0] : units[u][1]] for u in chosen])
    else:
        # Nothing fits whole: cut the best unit to the room the tail leaves.
        best = order[0]
        room = CONTENT_MAX_CHARS - 1 - (len(TAIL_SEPARATOR) + tail_len if tail_len > 0 else 0)
        unit = text[units[best][0] : units[best][1]]
        body = unit[: _safe_cut(unit, room)] if room >= 12 else ""
    if truncated:
        body = body.rstrip(_TRIM_BEFORE_ELLIPSIS)
    return _layout(body, truncated, ranked, positions, required)


def _hint_words(hint: str | None) -> list[str]:
    if not hint:
        return []
    words = re.split(r"[\s,;:/|=]+", hint.lower())
    return sorted({word for word in words if len(word) >= 2})[:8]


def _join_units(parts: list[str]) -> str:
    """Join units in order: a space after sentence punctuation, nothing after CJK
    punctuation, and "; " between fields or lines that carry none."""
    pieces = [parts[0]]
    for prev, part in pairwise(parts):
        last = prev[-1]
        if last in _JOIN_NOTHING_AFTER:
            pieces.append("")
        elif last in _JOIN_SPACE_AFTER:
            pieces.append(" ")
        else:
            pieces.append("; ")
        pieces.append(part)
    return "".join(pieces)


def _layout(
    body: str,
    truncated: bool,
    ranked: list[str],
    positions: dict[str, int],
    required: list[str],
) -> str:
    """Put body, ellipsis and tail together, filling spare room with further tokens."""
    mark = ELLIPSIS if truncated else ""
    tail = [token for token in required if not contains_token(body, token)]
    # With a body: "<body>…<sep><tail>"; without: "<tail> …".
    fixed = len(body) + len(mark) + len(TAIL_SEPARATOR) if body else 1 + len(mark)
    used = sum(len(t) + 1 for t in tail) - 1 if tail else 0
    room = CONTENT_MAX_CHARS - fixed - used
    if room >= 2:
        required_set = set(required)
        for token in ranked:
            cost = len(token) + (1 if tail else 0)
            if cost > room or token in required_set or contains_token(body, token):
                continue
            tail.append(token)
            room -= cost
            if room < 2:
                break
    tail.sort(key=positions.__getitem__)  # read in order of appearance; positions are unique
    if not body:
        content = (" ".join(tail) + (" " + mark if mark else "")).strip()
    elif tail:
        content = body + mark + TAIL_SEPARATOR + " ".join(tail)
    else:
        content = body + mark
    if len(content) > CONTENT_MAX_CHARS or not all(contains_token(content, t) for t in required):
        return _tail_only(required)  # defensive: the accounting above should make this moot
    return content


def _tail_only(required: list[str]) -> str:
    return (" ".join(required) + " " + ELLIPSIS).strip()


def _bounded(content: str) -> str:
    """Enforce the content limit on an encoder's answer."""
    if not isinstance(content, str):
        raise TypeError(f"encoder returned {type(content).__name__}, not str")
    if len(content) <= CONTENT_MAX_CHARS:
        return content
    cut = _safe_cut(content, CONTENT_MAX_CHARS - 1)
    return content[:cut].rstrip() + ELLIPSIS


# ============================================================================================
# encode_value helpers
# ============================================================================================


def _scalar_text(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # beyond the int-to-decimal digit limit
            return hex(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    return str(value)


def _value_pairs(value: Any) -> list[str]:
    """``path=value`` strings for the leaves of a JSON-like value, in input order."""
    pairs: list[str] = []
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict):
            children = [(v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in item.items()]
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple | set | frozenset):
            members = sorted(item, key=repr) if isinstance(item, set | frozenset) else list(item)
            if all(not isinstance(x, dict | list | tuple | set | frozenset) for x in members):
                joined = ", ".join(" ".join(_scalar_text(x).split()) for x in members)
                pairs.append(f"{path}={joined}" if path else joined)
            else:
                stack.extend((x, path, depth + 1) for x in reversed(members))
        else:
            text = " ".join(_scalar_text(item).split())
            pairs.append(f"{path}={text}" if path else text)
    return pairs


def _is_ascii_alnum(char: str) -> bool:
    return char.isascii() and char.isalnum()
