"""Deterministic, model-free encoder: long text in, at most 200 characters of memory content out.

Why this exists
---------------
A memory's ``content`` is what ranking and keyword recall look at and what gets injected into
prompts, so it must be short (``CONTENT_MAX_CHARS``) yet keep what a later query will name:
ids, numbers, dates, amounts, names, and the request or decision itself. Writing it must cost
no tokens, so the default encoder is extractive and purely lexical: no model, no network, no
randomness, and nothing that depends on hash or set ordering. The same input always gives
the same output, in any process.

How the default encoder works
-----------------------------
1. Whitespace is normalised (every run of whitespace becomes one space). If the result fits
   in ``CONTENT_MAX_CHARS`` it *is* the content: nothing is dropped, so nothing is lost.
2. Otherwise the text is *prepared*: a text that parses as a JSON object or array is
   flattened into ``key: value`` lines (a log line that is a JSON object into
   ``key: value; key: value``); other text keeps its lines, each whitespace-normalised. The
   lines are cut into units: sentences (English and Chinese punctuation), and pieces longer
   than ``MAX_UNIT_CHARS`` into clauses, then word runs, then hard pieces.
3. Salient tokens are extracted from the prepared text (see below) and every unit is scored
   by information density: cue words of requests, decisions and problems ("decided", "must",
   "please", "prefer", "error", "需要", "决定", "喜欢"), questions, salient tokens,
   capitalised names and CJK characters, divided by the unit's length. Fields under
   informative keys (``id``, ``status``, ``total``...) weigh more and noise keys (``url``,
   ``etag``, ``avatar``...) less, so the fields a query would name win the room.
4. The guaranteed tokens are reserved first; units are then taken greedily by score while
   body plus the tail of still-uncovered guaranteed tokens fits, and put back in their
   original order. Room left over takes further salient tokens.
5. Layout: ``<units>… | <tail tokens>``. The ``…`` appears exactly when part of the prepared
   text was left out; the tail (tokens in order of appearance) only when it is needed. With
   no room for any unit the content is ``<tail tokens> …``.

Salient tokens and the survival guarantee
-----------------------------------------
:func:`salient_tokens` lists the tokens of the *prepared* text (the whitespace-normalised
input when that fits in ``CONTENT_MAX_CHARS``, else the form of step 2), deduplicated, in
priority order: by tier, then by first position. Every class contains an ASCII digit, an
``@`` or a ``://``, which is what lets the scanner skip plain words quickly.

* tier 0, ids: for URLs with a scheme (``https://``, ``http://``, ``ftp://``) the host, the
  last path segment if it has no digit (``invoice.pdf``), and the tokens inside path and
  query (``v1``/``v2`` API versions there are skipped); e-mail addresses; UUIDs; words mixing
  ASCII letters and digits (``t42``, ``u10086``, ``INV-2024-0042``, ``v1.2.3``, ``a3f9c2e``;
  ``-``, ``_`` and ``.`` may join the parts); ``#123`` references; dotted numbers (IPs,
  versions) and dash-joined digit groups (phones);
* tier 1, dates, times and amounts: ``2024-03-05``, ``2024-03-05T12:30:00Z``, ``3/5/2024``,
  ``March 5, 2024``, ``5 March 2024``, ``2024年3月5日``, ``3月5日``, ``12:30``, ``3pm``,
  ``3点``, ``$1,299.00``, ``US$5``, ``USD 12.50``, ``12.5 EUR``, ``300元``, ``45%``,
  ``35ms``, ``2GB``, ``5个``;
* tier 2, bare numbers with at least 3 digits; tier 3, other bare numbers.

Ordinals (``1st``) and tokens longer than ``MAX_TOKEN_CHARS`` (blobs) are not salient.

**Guarantee.** Let the *guaranteed tokens* be the longest prefix of :func:`salient_tokens`
whose members, joined by single spaces, fit in ``TOKEN_BUDGET`` (150) characters
(:func:`guaranteed_tokens`). Every guaranteed token occurs in the content as a whole token:
not touched by an ASCII letter or digit on a side where the token itself starts or ends with
one (:func:`contains_token`). So: if all salient tokens joined by spaces fit in 150 chars,
all of them survive; otherwise ids survive first, then dates/times/amounts, then long
numbers, then short ones, each class in order of first appearance. Content that is the whole
normalised input (step 1) keeps every token. Keeping ``TOKEN_BUDGET`` under
``CONTENT_MAX_CHARS`` leaves at least 46 characters for the text itself (a sentence, or the
best one cut short when none fits whole).

Other guarantees: ``len(content) <= CONTENT_MAX_CHARS``; non-empty for input with a
non-whitespace character; never raises on a ``str``; never cuts inside a surrogate pair, next
to a zero-width joiner or before a combining mark or variation selector; cuts inside a run
of ASCII letters and digits only when that run takes more than two thirds of the room (a
blob); CJK text without punctuation may be cut between characters.

Speed: every regex pass starts with a fixed character or class so the engine skips plain
text in C; the token scanner stops as soon as the guaranteed tokens are settled (once the
ids seen so far overflow the budget nothing later can be guaranteed; units beyond that point
are scored on cue words and names only); per-hit work is mapped with ``map``/``Counter``
rather than Python loops. About 0.15-0.2 ms per 1 KB and 0.4-0.8 ms per 10 KB on a
developer machine; ``bench/encoder_micro.py`` measures it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache, partial
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
"""Sentences longer than this are cut into clauses so that several can fit in the content."""
ELLIPSIS: Final = "…"
TAIL_SEPARATOR: Final = " | "

# ============================================================================================
# Salient token scanner.
#
# Python's regex engine costs ~20-30 ns per position when a pattern has no fixed first
# character class, which for a 10 KB text is most of a millisecond per pass. Every salient
# token contains an anchor (an ASCII digit, "@", "://", "#" or a currency symbol), so the
# scanner's pattern *starts* with that class: the engine then skips plain text in a tight C
# loop and only tries the alternatives at anchors. Each alternative is written as "the rest
# of the token after its anchor character" (hence the `\d{3}` for a 4-digit year), and a
# letter prefix before the anchor ("INV-" in INV-2024-0042, "t" in t42, the local part of an
# e-mail, "https" of a URL, "March " of a date) is recovered by scanning back in Python.
# Boundaries are ASCII-only on purpose: Chinese puts ids right against CJK characters
# ("订单t42已发货"), which `\b` would not separate. Repetitions are bounded or possessive so a
# blob cannot make the engine backtrack quadratically.
# ============================================================================================


def _words(text: str) -> tuple[str, ...]:
    """The whitespace-separated words of a word list written as text."""
    return tuple(text.split())


_RB = r"(?![A-Za-z0-9_])"
# The end of a number or digit code: not where an id goes on ("07610074-7b81-..." is one
# UUID, "12-year-old" one word), which a plain boundary would cut after the digits.
_NUM_END = r"(?![A-Za-z0-9_]|[-.][A-Za-z0-9])"
_NUM_REST = r"(?:\d{0,2}(?:,\d{3})++(?:\.\d++)?|\d*+(?:\.\d++)?)"  # a number after its 1st digit
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
_DOMAIN = r"(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}" + _RB

# A unit after a number. Each branch is gated by a one-character look at what follows, so a
# plain number followed by a space or a comma does not walk through every unit literal.
_UNIT = (
    r"(?: ?(?=[A-Z])"
    + _CODES
    + r"| ?[%％‰]|(?=[A-Za-zµ])"
    + _ASCII_UNITS
    + r"|(?=[^\x00-\x7f])"
    + _CJK_UNITS
    + r"| (?=[A-Za-z])"
    + _SPACED_UNITS
    + r")"
)
# The alternatives after a digit anchor, most specific first (the first that matches wins).
# UUIDs need no branch of their own: they are ids (or dash-joined digit groups).
_DIGIT_REST = "|".join(
    [
        r"(?P<date>(?:"
        r"\d{3}(?:-\d{1,2}-\d{1,2}(?:T\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?"
        r"(?:Z|[+-]\d{2}:?\d{2})?)?"
        r"|/\d{1,2}/\d{1,2}|\.\d{1,2}\.\d{1,2}(?![.\d])|年(?:\d{1,2}月(?:\d{1,2}[日号])?)?)"
        r"|\d?(?:/\d{1,2}/\d{2,4}|月\d{1,2}[日号]| (?=[A-Z])" + _MONTH + r"\.?(?: \d{4})?)"
        r")" + _RB + ")",
        r"(?P<time>\d?(?::\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?: ?[AaPp]\.?[Mm]\.?)?"
        r"| ?[AaPp][Mm]|点(?:\d{1,2}分|半)?)" + _RB + ")",
        r"(?P<code>(?:\d{0,3}(?:\.\d{1,4}){2,}(?::\d{1,5})?|\d++(?:-\d{2,})++)" + _NUM_END + ")",
        r"(?P<email>[A-Za-z0-9._%+-]{0,63}@" + _DOMAIN + ")",
        # A number, and its unit if one follows (then `lastgroup` is "amount").
        r"(?P<num>" + _NUM_REST + r")(?P<amount>" + _UNIT + r")?" + _NUM_END,
        r"(?P<id>(?:[A-Za-z0-9]|[._-](?=[A-Za-z0-9]))*+" + _RB + ")",
    ]
)
_SCAN_RE: Final = re.compile(
    r"[0-9@:#$€£¥￥₹₩₽]"
    r"(?:(?<=[0-9])(?:" + _DIGIT_REST + r")"
    r"|(?<=@)(?P<at>" + _DOMAIN + r")"
    r"|(?<=:)(?P<url>//[^\s<>\"'`{}|\\^\[\]]++)"
    r"|(?<=#)(?P<hash>\d{1,12}" + _RB + r")"
    r"|(?<=[$€£¥￥₹₩₽])(?P<cur> ?" + _NUM + r"(?:bn|[kKMB]|万|亿|千)?" + _RB + r"))"
)
# Rest of an id from an anchor digit, used when letters precede the digit ("INV-" + this).
_ID_REST_RE: Final = re.compile(r"(?:[A-Za-z0-9]|[._-](?=[A-Za-z0-9]))*+")
_MONTH_DAY_RE: Final = re.compile(r"\d{1,2}(?:st|nd|rd|th)?(?:, \d{4})?" + _RB)
_ORDINAL_RE: Final = re.compile(r"\d{1,12}(?:st|nd|rd|th)")
_ORDINAL_ENDINGS: Final = frozenset({"st", "nd", "rd", "th"})
_API_VERSION_RE: Final = re.compile(r"[vV]\d{1,2}")
_DIGIT_RE: Final = re.compile(r"[0-9]")
_DIGIT_RUNS_RE: Final = re.compile(r"[0-9]+")
_SEGMENT_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]*")
_MONTHS: Final = frozenset(_MONTH[3:-1].split("|"))
_CURRENCY_CODES: Final = frozenset(_CODES[3:-1].split("|"))
_SCHEMES: Final = frozenset({"http", "https", "ftp"})
_CURRENCY_DESIGNATORS: Final = ("US", "HK", "C", "A")
_ID_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_LOCAL_CHARS: Final = _ID_CHARS | frozenset("%+")
_LETTERS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_ALNUM: Final = _LETTERS | frozenset("0123456789")
_UPPER: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LETTERS_DOT: Final = _LETTERS | {"."}
_LOWER: Final = frozenset("abcdefghijklmnopqrstuvwxyz")
_TIER: Final = {
    "email": 0,
    "at": 0,
    "code": 0,
    "hash": 0,
    "id": 0,
    "date": 1,
    "time": 1,
    "amount": 1,
    "cur": 1,
}
_TIER_WEIGHT: Final = (3.0, 2.0, 1.5, 0.25)

# ============================================================================================
# Scoring features: cue words of requests/decisions/problems, capitalised names.
# ============================================================================================

_EN_CUES: Final = _words(
    """
    decided decide decides deciding decision will won't must should shall need needs needed
    prefer prefers preferred preference please pls want wants wanted wish agreed agree
    approved approve approval confirmed confirm cancelled canceled cancel refunded refund
    deadline due asap urgent important remember always never don't like likes liked love
    loves hate hates error errors failed failure fails exception fatal warning timeout denied
    declined rejected todo chose choose plan planned
    """
)
_ZH_CUES: Final = _words(
    """
    不喜欢 喜欢 讨厌 需要 决定 希望 请 必须 应该 偏好 确认 取消 退款 记住 重要 错误 失败
    异常 想要 要求 截止 务必 总是 从不 打算 计划 同意 拒绝 提醒 别忘 不要 一定
    """
)


def _cue_pattern(cues: Iterable[str]) -> str:
    """A regex for English cue words in lowercased text with a space put in front and
    newlines turned into spaces.

    It starts with a literal space, so the engine jumps from space to space with its fast
    literal search instead of trying every position (a pass over 10 KB of mixed text costs
    ~100-250 us otherwise); behind the space the words are grouped by first letter, so each
    word start tries one small branch. Matching lowercased text is much faster than a
    case-blind pattern. The price: a word glued to a bracket or a quote (``"please``) is not
    seen.
    """
    groups: dict[str, list[str]] = {}
    for word in cues:
        groups.setdefault(word[0], []).append(re.escape(word[1:]))
    branches = "|".join(
        f"{re.escape(first)}(?:{'|'.join(sorted(rests, key=lambda r: (-len(r), r)))})"
        for first, rests in sorted(groups.items())
    )
    return f" (?:{branches})(?![a-z])"


_EN_CUE_RE: Final = re.compile(_cue_pattern(_EN_CUES))
_EN_CUE_ANYCASE_RE: Final = re.compile(
    r"(?<![A-Za-z])(?i:" + "|".join(map(re.escape, _EN_CUES)) + r")(?![A-Za-z])"
)
# Capitalised words after a space (same space-anchored trick, on the original text).
_NAME_RE: Final = re.compile(r" [A-Z][a-z]{1,20}(?![A-Za-z])")
_ZH_CUE_RE: Final = re.compile("|".join(_ZH_CUES))
_MATCH_START: Final = re.Match.start
_CUE_WEIGHT: Final = 4.0
_QUESTION_WEIGHT: Final = 3.0
_NAME_WEIGHT: Final = 1.0
_CJK_WEIGHT: Final = 0.06  # per CJK character; Chinese carries a word in ~1.5 chars
_BASE_INFO: Final = 0.5
_LEAD_BONUS: Final = (1.0, 0.5)  # the first units of a message tend to state its point
_KEY_BONUS: Final = 2.0  # a field under an informative key (status, total, name...)
# Added to a unit's length when dividing: pure density would let "Hi team," or "qty: 2" beat a
# sentence that says what was decided.
_LENGTH_SMOOTHING: Final = 40
_HINT_WEIGHT: Final = 2.0

# ============================================================================================
# Units.
# ============================================================================================

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
    _words(
        """
        id name title subject status state total amount price cost sum balance date time
        created updated due deadline email user customer client order invoice error message msg
        reason result summary note type code sku currency city address phone decision preference
        request action owner assignee account ticket issue number level
        """
    )
)
_NOISE_KEY_PARTS: Final = frozenset(
    _words(
        """
        url urls href link links uri avatar icon image img thumbnail etag hash sha signature
        token cursor checksum schema html css agent headers header cookie base64 blob gravatar
        node trace span md5 nonce
        """
    )
)
_KEY_SPLIT_RE: Final = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])")
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
    """The default encoder: extractive, lexical, deterministic (see the module docstring).

    Stateless, so instances are interchangeable and safe to share between threads. ``hint``
    words (2+ characters, case-insensitive) raise the score of units containing them; the
    hint never changes which tokens are guaranteed.
    """

    __slots__ = ()

    def encode(self, text: str, *, hint: str | None = None) -> str:
        if not isinstance(text, str):
            raise TypeError(f"encode() takes str, not {type(text).__name__}")
        if len(text) <= CONTENT_MAX_CHARS:
            return " ".join(text.split())
        doc = _prepare(text)
        if doc is None:
            return " ".join(text.split())  # long only by whitespace
        occurrences = _extract(doc.text, TOKEN_BUDGET)
        ranked, positions = _rank(occurrences)
        required = _prefix_fit(ranked, TOKEN_BUDGET)
        return _compose(doc, occurrences, ranked, positions, required, hint)

    def __repr__(self) -> str:
        return "ExtractiveEncoder()"


_DEFAULT_ENCODER: Final = ExtractiveEncoder()


def default_encoder() -> Encoder:
    """The shared default encoder (an :class:`ExtractiveEncoder`; it holds no state)."""
    return _DEFAULT_ENCODER


def salient_tokens(text: str) -> list[str]:
    """All salient tokens of ``text`` in priority order (tier, then first position).

    Computed on the same prepared form the encoder works from, so it is the exact basis of
    the survival guarantee.
    """
    doc = _prepare(text) if len(text) > CONTENT_MAX_CHARS else None
    prepared = doc.text if doc is not None else " ".join(text.split())
    return _rank(_extract(prepared, None))[0]


def guaranteed_tokens(text: str) -> list[str]:
    """The tokens :class:`ExtractiveEncoder` guarantees to keep for ``text``: the longest
    prefix of :func:`salient_tokens` that fits in :data:`TOKEN_BUDGET` joined by spaces."""
    return _prefix_fit(salient_tokens(text), TOKEN_BUDGET)


def contains_token(content: str, token: str) -> bool:
    """Whether ``token`` occurs in ``content`` as a whole token.

    An occurrence counts unless an ASCII letter or digit touches it on a side where the token
    itself starts or ends with one: ``t42`` is in ``"order t42."`` but not in ``"t420"``.
    """
    i = content.find(token)
    if i < 0 or not token:
        return i >= 0
    n = len(token)
    check_left = token[0] in _ALNUM
    check_right = token[-1] in _ALNUM
    end = len(content)
    while i >= 0:
        if (not check_left or i == 0 or content[i - 1] not in _ALNUM) and (
            not check_right or i + n == end or content[i + n] not in _ALNUM
        ):
            return True
        i = content.find(token, i + 1)
    return False


def encode_value(value: Any, *, encoder: Encoder | None = None, hint: str | None = None) -> str:
    """Memory content for a JSON-like value (what a write without explicit content stores).

    * ``None``, booleans and numbers: their JSON-ish spelling (``null``, ``true``, ``42``,
      ``1.5``); other scalars: ``str(value)`` (``bytes`` decoded as UTF-8);
    * strings and scalars: whitespace-normalised when that fits, else through ``encoder``;
    * dicts, lists, tuples, sets: ``key=value`` pairs (nested keys dotted, list positions
      dropped, lists of scalars comma-joined, keys in input order, sets sorted by ``repr``)
      joined by ``"; "`` when that fits; else the pairs go to ``encoder`` one per line, so
      the default encoder keeps the most informative fields and the ids and numbers.

    The result never exceeds ``CONTENT_MAX_CHARS`` characters: an over-long answer from a
    custom encoder is cut (ending with ``…``).
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
    """The prepared text, its units (sentence/clause spans) and a weight per unit."""

    __slots__ = ("starts", "text", "units", "weights")

    def __init__(self, text: str, units: list[tuple[int, int]], weights: list[float]) -> None:
        self.text = text
        self.units = units
        self.starts = [start for start, _ in units]
        self.weights = weights


def _prepare(text: str) -> _Doc | None:
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


def _build(lines: list[str], line_weights: list[float]) -> _Doc:
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
    return _Doc(text, units, weights)


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
            cut = _safe_cut(text, limit, start)
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


def _safe_cut(text: str, limit: int, floor: int = 0) -> int:
    """A cut position in ``(floor, limit]`` that tears no character sequence apart and, if
    it can, no ASCII word (a word is only cut when it is longer than a third of the room)."""
    cut = limit
    while cut > floor + 1 and _attaches(text, cut):
        cut -= 1
    if 0 < cut < len(text) and _is_ascii_alnum(text[cut]) and _is_ascii_alnum(text[cut - 1]):
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
        return True  # a surrogate pair (only in strings built from lone surrogates)
    if prev == "\u200d" or char == "\u200d" or "\ufe00" <= char <= "\ufe0f":
        return True  # zero-width joiner, variation selector
    return char > "\u02ff" and unicodedata.combining(char) != 0


# ============================================================================================
# Token extraction
# ============================================================================================

# (start, end, token, tier)
_Occurrence = tuple[int, int, str, int]


def _extract(text: str, budget: int | None) -> list[_Occurrence]:
    """Salient token occurrences of ``text``, by position.

    With a ``budget``, the scan stops once the distinct tier-0 tokens seen so far no longer
    fit in it joined by spaces: every later token ranks after them, so the guaranteed prefix
    is already settled (units past that point are then scored without their tokens). Without
    one, the whole text is scanned.
    """
    found: list[_Occurrence] = []
    _scan(text, 0, len(text), found, _ScanState(budget), in_url=False)
    return found


class _ScanState:
    """Running cost of the distinct tier-0 tokens, for the early stop."""

    __slots__ = ("budget", "cost", "seen_ids")

    def __init__(self, budget: int | None) -> None:
        self.budget = budget
        self.cost = -1  # joined length of the distinct tier-0 tokens so far
        self.seen_ids: set[str] = set()

    def add_id(self, token: str) -> bool:
        """Count a tier-0 token; False once the budget is exceeded (stop scanning)."""
        if self.budget is None or token in self.seen_ids:
            return True
        self.seen_ids.add(token)
        self.cost += len(token) + 1
        return self.cost <= self.budget


def _scan(
    text: str,
    pos: int,
    endpos: int,
    found: list[_Occurrence],
    state: _ScanState,
    *,
    in_url: bool,
) -> bool:
    """Scan ``text[pos:endpos]``, appending occurrences; False if the budget stopped it.

    Inside a URL (``in_url``) nested URLs are not followed and API versions are skipped.
    Occurrences are appended, and tier-0 tokens counted, in positional order: the early
    stop is exact only if counting follows the text.
    """
    last_end = pos
    append = found.append
    for match in _SCAN_RE.finditer(text, pos, endpos):
        start = match.start()
        if start < last_end:
            continue  # inside a token taken with a letter prefix that reached further
        kind = match.lastgroup
        end = match.end()
        floor = max(last_end, start - MAX_TOKEN_CHARS)
        token_start = start
        tier = _TIER.get(kind or "", 3)

        if kind == "url":
            scheme_start = start
            while scheme_start > floor and text[scheme_start - 1] in _LETTERS:
                scheme_start -= 1
            if in_url or text[scheme_start:start].lower() not in _SCHEMES:
                continue
            last_end = _url_end(text, start, end)
            if not _scan_url(text, start + 3, last_end, found, state):
                return False
            continue
        if kind == "email" or kind == "at":
            while token_start > floor and text[token_start - 1] in _LOCAL_CHARS:
                token_start -= 1
            while token_start < start and text[token_start] in "._%+-":
                token_start += 1
            if kind == "at" and token_start == start:
                continue  # "@" with no local part: a handle or a stray sign
        elif kind == "cur":
            if start >= 1 and text[start - 1] in "SKCA":
                for designator in _CURRENCY_DESIGNATORS:
                    d_start = start - len(designator)
                    if (
                        d_start >= floor
                        and text.startswith(designator, d_start)
                        and (d_start == 0 or not _is_ascii_alnum(text[d_start - 1]))
                    ):
                        token_start = d_start
                        break
        elif kind == "hash":
            if start > 0 and text[start - 1] == "&":
                continue  # an HTML character reference such as &#39;
        else:
            # A digit anchor: letters, digits or joiners right before it belong to the token.
            while token_start > floor and text[token_start - 1] in _ID_CHARS:
                token_start -= 1
            while token_start < start and text[token_start] in "._-":
                token_start += 1
            if token_start < start:
                prefix = text[token_start:start]
                if kind in ("num", "amount") and prefix in _CURRENCY_CODES:
                    kind, tier = "amount", 1  # "USD12.50"
                else:
                    rest = _ID_REST_RE.match(text, start, endpos)
                    end = rest.end() if rest is not None else end
                    kind = "id"
            elif (
                kind == "num"
                and start >= 4
                and text[start - 1] == " "
                and text[start - 2] in _LETTERS_DOT
            ):
                # "March 5, 2024", "Mar. 5", "USD 12.50": a word right before the number.
                if end - start <= 2:
                    word_end = start - 2 if text[start - 2] == "." else start - 1
                    word_start = word_end
                    while word_start > floor and text[word_start - 1] in _LETTERS:
                        word_start -= 1
                    if text[word_start:word_end] in _MONTHS:
                        day = _MONTH_DAY_RE.match(text, start, endpos)
                        if day is not None:
                            token_start, end, kind, tier = word_start, day.end(), "date", 1
                if (
                    kind == "num"
                    and text[start - 2] in _UPPER
                    and text[start - 4 : start - 1] in _CURRENCY_CODES
                    and (start - 4 == 0 or text[start - 5] not in _LETTERS)
                    and start - 4 >= floor
                ):
                    token_start, kind, tier = start - 4, "amount", 1
            if kind == "id":
                token = text[token_start:end]
                if token[-2:] in _ORDINAL_ENDINGS and _ORDINAL_RE.fullmatch(token):
                    last_end = end
                    continue
                if token.upper() == token.lower():  # no ASCII letter: digits and joiners
                    kind = "num"
                    tier = 2 if _digit_len(token) >= 3 else 3
                else:
                    tier = 0
            elif kind == "num":
                tier = 2 if end - start >= 3 and _digit_len(text[start:end]) >= 3 else 3
        last_end = end
        if end - token_start > MAX_TOKEN_CHARS:
            continue
        token = text[token_start:end]
        if in_url and tier == 0 and _API_VERSION_RE.fullmatch(token):
            continue
        append((token_start, end, token, tier))
        if tier == 0 and not state.add_id(token):
            return False
    return True


def _url_end(text: str, start: int, end: int) -> int:
    """Drop sentence punctuation that follows a URL."""
    while end > start and text[end - 1] in ".,;:!?)'\"":
        end -= 1
    return end


def _scan_url(
    text: str, host_start: int, end: int, found: list[_Occurrence], state: _ScanState
) -> bool:
    """A URL yields its host, the tokens of its path and query, and its last path segment.

    All in positional order (see :func:`_scan`). The last segment is taken only when it has
    no digit (``orders``, ``invoice.pdf``): one with a digit is already a token of its own
    class, and giving it a second tier would make a token's tier depend on where it is.
    API version segments (``v1``, ``v2``) are dropped: every URL of an API has one.
    """
    host_end = host_start
    while host_end < end and text[host_end] not in "/?#":
        host_end += 1
    at = text.rfind("@", host_start, host_end)
    if at >= 0:
        host_start = at + 1  # user:password@ is not part of the host
    if 0 < host_end - host_start <= MAX_TOKEN_CHARS:
        host = text[host_start:host_end]
        found.append((host_start, host_end, host, 0))
        if not state.add_id(host):
            return False
    if host_end >= end:
        return True
    path_end = host_end
    while path_end < end and text[path_end] not in "?#":
        path_end += 1
    segment_start = text.rfind("/", host_end, path_end) + 1
    segment = None
    if segment_start > 0 and 2 <= path_end - segment_start <= MAX_TOKEN_CHARS:
        segment = _SEGMENT_RE.fullmatch(text, segment_start, path_end)
        if segment is not None and _DIGIT_RE.search(segment.group()):
            segment = None
    if segment is None:
        return _scan(text, host_end, end, found, state, in_url=True)
    if not _scan(text, host_end, segment_start, found, state, in_url=True):
        return False
    found.append((segment_start, path_end, segment.group(), 0))
    if not state.add_id(segment.group()):
        return False
    return _scan(text, path_end, end, found, state, in_url=True)


def _rank(occurrences: Iterable[_Occurrence]) -> tuple[list[str], dict[str, int]]:
    """Deduplicate tokens and order them by (tier, first position); also first positions."""
    first: dict[str, tuple[int, int]] = {}
    for start, _end, token, tier in occurrences:
        seen = first.get(token)
        if seen is None:
            first[token] = (tier, start)
        elif tier < seen[0]:
            first[token] = (tier, seen[1])
    ranked = sorted(first, key=first.__getitem__)
    return ranked, {token: position for token, (_tier, position) in first.items()}


def _prefix_fit(tokens: list[str], budget: int) -> list[str]:
    """The longest prefix of ``tokens`` whose space-joined length fits in ``budget``."""
    used = -1
    for i, token in enumerate(tokens):
        used += len(token) + 1
        if used > budget:
            return tokens[:i]
    return list(tokens)


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
    if n == 0:  # cannot happen for text with a non-space character; be total anyway
        return _tail_only(required)

    info = [_BASE_INFO] * n
    for u, bonus in enumerate(_LEAD_BONUS[:n]):
        info[u] += bonus
    required_set = set(required)
    covers: list[list[str]] = [[] for _ in range(n)]
    for start, end, token, tier in occurrences:
        u = bisect_right(starts, start) - 1
        if u >= 0 and end <= units[u][1]:
            info[u] += _TIER_WEIGHT[tier]
            if token in required_set:
                covers[u].append(token)
    # Feature hits are mapped to units and counted with C-level iteration (map, bisect,
    # Counter): a Python loop per hit would cost more than everything else here.
    is_ascii = text.isascii()
    unit_after = partial(bisect_right, starts)  # position -> index of its unit, plus one
    # With a space put in front, a match's start (that space) is its word's index in `text`.
    spaced = " " + text.replace("\n", " ")
    lowered = spaced.lower()
    if len(lowered) == len(spaced):
        cue_hits = _EN_CUE_RE.finditer(lowered)
    else:  # a few characters lowercase to two; fall back to the slower case-blind scan
        cue_hits = _EN_CUE_ANYCASE_RE.finditer(text)
    cues = Counter(map(unit_after, map(_MATCH_START, cue_hits)))
    if not is_ascii:
        cues.update(map(unit_after, map(_MATCH_START, _ZH_CUE_RE.finditer(text))))
    for after, count in cues.items():
        info[after - 1] += _CUE_WEIGHT * count
    names = Counter(map(unit_after, map(_MATCH_START, _NAME_RE.finditer(spaced))))
    for after, count in names.items():
        info[after - 1] += _NAME_WEIGHT * count
    hint_words = _hint_words(hint)

    scores = [0.0] * n
    weights = doc.weights
    seen_units: set[str] = set()
    for u, (start, end) in enumerate(units):
        unit = text[start:end]
        if unit in seen_units:
            scores[u] = -1.0  # a repeated line: saying it twice adds nothing
            continue
        seen_units.add(unit)
        value = info[u]
        if unit[0] in _UPPER and unit[1:2] in _LOWER:
            value -= _NAME_WEIGHT  # a capital at a sentence start is not a name
        if unit[-1] in "?？":
            value += _QUESTION_WEIGHT
        if not is_ascii:
            value += _CJK_WEIGHT * (len(unit.encode("utf-8", "surrogatepass")) - len(unit)) / 2
        if hint_words:
            low = lowered[start + 1 : end + 1]  # `lowered` has the extra space in front
            value += _HINT_WEIGHT * sum(1 for word in hint_words if word in low)
        weight = weights[u]
        if weight > 1.0:
            value += _KEY_BONUS
        elif weight < 1.0:
            value *= weight
        scores[u] = max(value, 0.0) / (end - start + _LENGTH_SMOOTHING)

    # Greedy selection. The accounting is conservative: every join counts 2 chars ("; ").
    token_cost = {token: len(token) + 1 for token in required}
    uncovered = set(required)
    tail_len = sum(token_cost.values()) - 1 if required else -1
    body_len = 0
    chosen: list[int] = []
    shapes: set[str] = set()
    order = sorted(range(n), key=scores.__getitem__, reverse=True)  # stable: ties by position
    for u in order:
        if scores[u] < 0:
            break  # only repeated units are left
        length = units[u][1] - units[u][0] + (2 if chosen else 0)
        if body_len + length + 1 > CONTENT_MAX_CHARS:
            continue
        freed = 0
        for token in covers[u]:
            if token in uncovered:
                freed += token_cost[token]
        new_tail = tail_len - freed
        total = body_len + length + 1 + (len(TAIL_SEPARATOR) + new_tail if new_tail > 0 else 0)
        if total > CONTENT_MAX_CHARS:
            continue
        # Templated lines (log events, list items) differ only in their numbers: one of a
        # kind says more than two of the same.
        shape = _DIGIT_RUNS_RE.sub("0", text[units[u][0] : units[u][1]])
        if shape in shapes:
            continue
        shapes.add(shape)
        chosen.append(u)
        body_len += length
        uncovered.difference_update(covers[u])
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
    punctuation, and "; " between fields or lines that end without any."""
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
    room = CONTENT_MAX_CHARS - fixed - (sum(len(t) + 1 for t in tail) - 1 if tail else 0)
    if room >= 2:
        for token in ranked[len(required) :]:
            cost = len(token) + (1 if tail else 0)
            if cost > room or contains_token(body, token):
                continue
            tail.append(token)
            room -= cost
            if room < 2:
                break
    tail.sort(key=positions.__getitem__)  # read in order of appearance
    if not body:
        content = " ".join(tail) + (" " + mark if mark and tail else mark)
    elif tail:
        content = body + mark + TAIL_SEPARATOR + " ".join(tail)
    else:
        content = body + mark
    # Every required token is either in `body` (checked above; appending "…" or the tail
    # after it cannot glue a letter to it) or in the space-separated tail. The length is
    # what the accounting in _compose promises; checked here so a future slip cannot leak.
    if len(content) > CONTENT_MAX_CHARS:
        return _tail_only(required)
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
        except ValueError:  # beyond Python's int-to-decimal digit limit
            return hex(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _value_pairs(value: Any) -> list[str]:
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
                joined = ", ".join(" ".join(_scalar_text(x).split()) for x in members)
                pairs.append(f"{path}={joined}" if path else joined)
            else:
                stack.extend((x, path) for x in reversed(members))
        else:
            rendered = " ".join(_scalar_text(item).split())
            pairs.append(f"{path}={rendered}" if path else rendered)
    return pairs


def _is_ascii_alnum(char: str) -> bool:
    return char.isascii() and char.isalnum()


def _digit_len(token: str) -> int:
    """Digits in a token made of digits and joiners (``1,299.00``, ``12-34``)."""
    return len(token) - token.count(",") - token.count(".") - token.count("-") - token.count("_")
