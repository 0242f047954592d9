"""Fitting ranked memories into a token budget, and the context block an agent injects.

The context block is one memory per line::

    [2026-10-02 user_preference user:u1:pref_lang] prefers answers in Chinese
    [2026-10-01 fact task:t42] the invoice API is v2.1

``[date type key] content``: the date (UTC, of the last update) lets the model weigh
recency, the type says what kind of memory it is, the key is the address an agent can
``get`` the structured value from. Appended memories (whose name is a generated command
id) show only their owner: 26 characters of id cost ~20 tokens and tell a model nothing;
the reply's ``RecalledMemory.key`` still carries the full key. Neither date, type nor key
can contain ``]`` or whitespace, and content has every whitespace run (newlines included)
folded to one space, so the first ``"] "`` ends the header and every line is one memory.
A memory pulled in as a reference follows the memory that references it.

Budget accounting is exact: a memory costs ``count(line)`` where ``line`` ends with
``"\\n"``, and the block is the concatenation of the lines, so
``count(render_context(kept)) == tokens_used``. This holds because tiktoken splits text
with a regex before BPE, and a line's final ``"\\n"`` always ends a pre-token when the
next line starts with ``[`` and the line has no whitespace before its newline (which the
folding guarantees): no token ever spans two lines. The unit tests check it on random
text, CJK and emoji included.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from zeromem.recall.ranking import Ranking, ScoredCandidate

KEPT = "kept"
CUT_OVER_BUDGET = "cut: over budget"
CUT_BELOW_TOP_K = "cut: below top k"
CUT_NO_MATCH = "cut: no match"
CUT_ZERO_SCORE = "cut: zero score"
CUT_MISSING = "cut: missing"

DEFAULT_MAX_DEPTH = 2
DEFAULT_MAX_MISSES = 32

# A generated (appended) name: a command id in ULID layout, see zeromem.ids.
_GENERATED_NAME = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_LAST_DAY = 253_402_214_400.0  # 9999-12-31T00:00:00Z: keeps the date four digits wide


@dataclass(frozen=True, slots=True)
class PackItem:
    """What the packer needs of one memory (from the candidate's stored item, or fetched
    for a reference). ``type`` is the ``MemoryType`` value."""

    key: str
    content: str
    type: str
    updated_at: float
    references: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PackedMemory:
    item: PackItem
    line: str  # the rendered line, trailing newline included
    tokens: int  # count(line)
    via: str = ""  # the key of the memory that pulled this one in; "" for a primary
    depth: int = 0  # 0 primary, 1 its reference, 2 a reference of that reference
    candidate: ScoredCandidate | None = None  # None for a reference outside the ranking


@dataclass(slots=True)
class PackResult:
    """What was kept, in context order, and why every candidate was kept or cut.

    ``decisions`` covers what the packer looked at: candidates it examined and the
    references it considered. The candidates it never reached are decided by
    ``decision()``: ``tail`` (below top k, or over budget once the budget ran out), or a
    no-match cut for zero scores. ``all_decisions()`` spells out every candidate.
    """

    kept: list[PackedMemory] = field(default_factory=list)
    tokens_used: int = 0
    budget: int = 0
    decisions: dict[str, str] = field(default_factory=dict)
    tail: str = CUT_BELOW_TOP_K

    @property
    def context(self) -> str:
        return render_context(self.kept)

    def decision(self, candidate: ScoredCandidate) -> str:
        """Why ``candidate`` (from the ranking given to ``pack``) was kept or cut."""
        known = self.decisions.get(candidate.key)
        if known is not None:
            return known
        if candidate.score <= 0.0:
            return CUT_NO_MATCH if candidate.relevance == 0.0 else CUT_ZERO_SCORE
        return self.tail

    def all_decisions(self, ranked: Iterable[ScoredCandidate]) -> dict[str, str]:
        """Key -> decision for every ranked candidate, in rank order (the explain view:
        this reads the whole ranking, so only pay for it when asked)."""
        return {candidate.key: self.decision(candidate) for candidate in ranked}


# --- Rendering -------------------------------------------------------------------------


def display_key(key: str) -> str:
    """The key as shown in the block: the owner alone for a generated name."""
    owner_and_name = key.rsplit(":", 1)
    if key.count(":") >= 2 and _GENERATED_NAME.match(owner_and_name[1]):
        return owner_and_name[0]
    return key


def render_line(item: PackItem) -> str:
    """One memory's line, newline included; its token count is the memory's cost."""
    stamp = min(max(item.updated_at, 0.0), _LAST_DAY)
    date = time.strftime("%Y-%m-%d", time.gmtime(stamp))
    header = f"[{date} {_one_word(item.type)} {_one_word(display_key(item.key))}]"
    content = " ".join(item.content.split())
    return f"{header} {content}\n" if content else f"{header}\n"


def render_context(items: Iterable[PackedMemory | PackItem]) -> str:
    """The block to inject: the lines of ``items`` in order (ends with a newline)."""
    return "".join(
        item.line if isinstance(item, PackedMemory) else render_line(item) for item in items
    )


def _one_word(text: str) -> str:
    # Keys and types never hold whitespace or "]" (the schemas forbid it); this keeps the
    # format's guarantees even if a caller passes something else.
    return "".join(text.split()).replace("]", ")") or "-"


# --- Packing ---------------------------------------------------------------------------


def pack(
    ranked: Sequence[ScoredCandidate],
    k: int,
    budget: int,
    lookup: Callable[[str], PackItem | None],
    count: Callable[[str], int],
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_misses: int = DEFAULT_MAX_MISSES,
) -> PackResult:
    """Greedily fit ``ranked`` (best first) into ``budget`` tokens.

    - At most ``k`` primary memories, in rank order. One that does not fit in what is
      left is cut ("cut: over budget") and packing goes on with the next, smaller ones.
    - After each kept memory its references (``PackItem.references``, fetched with
      ``lookup``, inside the ranking or not) follow it while they fit ("kept: reference
      of <key>"), depth first, down to ``max_depth`` links; a memory is never kept twice
      and references do not count towards ``k``.
    - Candidates with a zero score (they matched no query term) are never kept.
    - ``lookup`` returning None (deleted or expired since ranking) cuts the memory.
    - After ``max_misses`` memories did not fit, the budget counts as spent and the rest
      is cut unexamined: each attempt costs an encode, and a nearly full budget must not
      make a recall walk ten thousand candidates.

    ``count`` is the token counter (``tokens.token_counter(encoding)``). The sum of the
    kept lines' counts is ``tokens_used`` and never exceeds ``budget``.
    """
    result = PackResult(budget=budget)
    if k <= 0 or budget <= 0:
        result.tail = CUT_BELOW_TOP_K if k <= 0 else CUT_OVER_BUDGET
        return result
    decisions = result.decisions
    kept = result.kept
    used = 0
    misses = 0
    primaries = 0

    def try_keep(item: PackItem, via: str, depth: int, candidate: ScoredCandidate | None) -> bool:
        nonlocal used, misses
        line = render_line(item)
        cost = count(line)
        if used + cost > budget:
            decisions[item.key] = (
                CUT_OVER_BUDGET if not via else (f"{CUT_OVER_BUDGET} (reference of {via})")
            )
            misses += 1
            return False
        used += cost
        decisions[item.key] = KEPT if not via else f"kept: reference of {via}"
        kept.append(PackedMemory(item, line, cost, via, depth, candidate))
        return True

    def pull_references(parent: PackItem, depth: int) -> None:
        if depth > max_depth:
            return
        for ref in parent.references:
            if ref in decisions or misses >= max_misses:
                continue  # kept already, or cut already (it would not fit now either)
            item = lookup(ref)
            if item is None:
                decisions[ref] = f"{CUT_MISSING} (reference of {parent.key})"
                continue
            if try_keep(item, parent.key, depth, None):
                pull_references(item, depth + 1)

    # A Ranking knows where its zero-score tail starts; a plain list is checked per item.
    limit = ranked.positive if isinstance(ranked, Ranking) else len(ranked)
    for position in range(limit):
        if primaries >= k:
            result.tail = CUT_BELOW_TOP_K
            break
        if misses >= max_misses or used >= budget:
            result.tail = CUT_OVER_BUDGET
            break
        candidate = ranked[position]
        if candidate.score <= 0.0:
            break  # the rest scored zero too: decision() labels them
        if candidate.key in decisions:
            continue  # already kept (or cut) as a reference
        item = lookup(candidate.key)
        if item is None:
            decisions[candidate.key] = CUT_MISSING
            continue
        if try_keep(item, "", 0, candidate):
            primaries += 1
            pull_references(item, 1)
    result.tokens_used = used
    return result


__all__ = [
    "CUT_BELOW_TOP_K",
    "CUT_MISSING",
    "CUT_NO_MATCH",
    "CUT_OVER_BUDGET",
    "CUT_ZERO_SCORE",
    "KEPT",
    "PackItem",
    "PackResult",
    "PackedMemory",
    "display_key",
    "pack",
    "render_context",
    "render_line",
]
