"""Stage 2: the salient token scanner (ids, dates, times, amounts, numbers, by position).

Owns the token classes and their tiers (the module docstring of :mod:`zeromem.encoding.encoder`
lists them) and the early stop that makes the survival guarantee cheap: it yields
occurrences only; :mod:`zeromem.encoding.rank` orders them.
"""

from __future__ import annotations

import re
from typing import Final

from zeromem.encoding.text import LETTERS, UPPER, is_ascii_alnum

MAX_TOKEN_CHARS: Final = 64
"""Longer tokens are blobs (base64, minified data), not something a query names."""

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
_SEGMENT_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]*")
_MONTHS: Final = frozenset(_MONTH[3:-1].split("|"))
_CURRENCY_CODES: Final = frozenset(_CODES[3:-1].split("|"))
_SCHEMES: Final = frozenset({"http", "https", "ftp"})
_CURRENCY_DESIGNATORS: Final = ("US", "HK", "C", "A")
_ID_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_LOCAL_CHARS: Final = _ID_CHARS | frozenset("%+")
_LETTERS_DOT: Final = LETTERS | {"."}
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


# (start, end, token, tier)
Occurrence = tuple[int, int, str, int]


def extract(text: str, budget: int | None) -> list[Occurrence]:
    """Salient token occurrences of ``text``, by position.

    With a ``budget``, the scan stops once the distinct tier-0 tokens seen so far no longer
    fit in it joined by spaces: every later token ranks after them, so the guaranteed prefix
    is already settled (units past that point are then scored without their tokens). Without
    one, the whole text is scanned.
    """
    found: list[Occurrence] = []
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
    found: list[Occurrence],
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
            while scheme_start > floor and text[scheme_start - 1] in LETTERS:
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
                        and (d_start == 0 or not is_ascii_alnum(text[d_start - 1]))
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
                    while word_start > floor and text[word_start - 1] in LETTERS:
                        word_start -= 1
                    if text[word_start:word_end] in _MONTHS:
                        day = _MONTH_DAY_RE.match(text, start, endpos)
                        if day is not None:
                            token_start, end, kind, tier = word_start, day.end(), "date", 1
                if (
                    kind == "num"
                    and text[start - 2] in UPPER
                    and text[start - 4 : start - 1] in _CURRENCY_CODES
                    and (start - 4 == 0 or text[start - 5] not in LETTERS)
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
    text: str, host_start: int, end: int, found: list[Occurrence], state: _ScanState
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


def _digit_len(token: str) -> int:
    """Digits in a token made of digits and joiners (``1,299.00``, ``12-34``)."""
    return len(token) - token.count(",") - token.count(".") - token.count("-") - token.count("_")
