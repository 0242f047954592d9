"""Stage 4: units scored, chosen within ``CONTENT_MAX_CHARS`` and laid out with the tail.

Owns the scoring features (cue words, names, questions, key weights, hint words), the greedy
selection that reserves room for the guaranteed tokens, and the layout
``<units>… | <tail tokens>``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from functools import partial
from itertools import pairwise
from typing import Final

from zeromem.encoding.prepare import Doc
from zeromem.encoding.scan import Occurrence
from zeromem.encoding.text import UPPER, contains_token, safe_cut, word_list
from zeromem.schemas.memory import CONTENT_MAX_CHARS

ELLIPSIS: Final = "…"
TAIL_SEPARATOR: Final = " | "
_LOWER: Final = frozenset("abcdefghijklmnopqrstuvwxyz")
_DIGIT_RUNS_RE: Final = re.compile(r"[0-9]+")
_TIER_WEIGHT: Final = (3.0, 2.0, 1.5, 0.25)

# ============================================================================================
# Scoring features: cue words of requests/decisions/problems, capitalised names.
# ============================================================================================

_EN_CUES: Final = word_list(
    """
    decided decide decides deciding decision will won't must should shall need needs needed
    prefer prefers preferred preference please pls want wants wanted wish agreed agree
    approved approve approval confirmed confirm cancelled canceled cancel refunded refund
    deadline due asap urgent important remember always never don't like likes liked love
    loves hate hates error errors failed failure fails exception fatal warning timeout denied
    declined rejected todo chose choose plan planned
    """
)
_ZH_CUES: Final = word_list(
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
_JOIN_SPACE_AFTER: Final = frozenset(".!?…;,:\"')]")
_JOIN_NOTHING_AFTER: Final = frozenset("。！？；，、：”」』）")
_TRIM_BEFORE_ELLIPSIS: Final = " ,;:，、；：.-|"


def compose(
    doc: Doc,
    occurrences: list[Occurrence],
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
        if unit[0] in UPPER and unit[1:2] in _LOWER:
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
        body = unit[: safe_cut(unit, room)] if room >= 12 else ""
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
    # what the accounting in compose promises; checked here so a future slip cannot leak.
    if len(content) > CONTENT_MAX_CHARS:
        return _tail_only(required)
    return content


def _tail_only(required: list[str]) -> str:
    return (" ".join(required) + " " + ELLIPSIS).strip()
