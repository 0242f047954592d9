"""The factors of a recall score, and what they are computed from and into.

``score = relevance x decay x feedback x boost`` (``ranking`` computes it, in one pass):

- relevance: BM25 over the query terms (``bm25``, ``idf``);
- decay: ``max(floor, 0.5 ** (age / half_life))`` (``time_decay``). The default half-life
  is long (30 days) and the floor high (0.35) on purpose: relevance comes first, and an
  old preference that answers the question must not be buried under yesterday's chatter;
- feedback: liked / disliked / important counts, each a multiplier with diminishing
  returns (``feedback_weight``);
- boost: multipliers from the request's strategy (``recall.strategies``).

Pure: no I/O. ``RankingConfig`` holds every knob, each with the measurement behind it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

DAY_S = 86_400.0
DEFAULT_HALF_LIFE_S = 30 * DAY_S


# --- Configuration ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankingConfig:
    """Ranking knobs. Construct directly, with ``from_dict`` (settings, overrides), or
    let a strategy derive one from a base (``Strategy.config``)."""

    k1: float = 1.2  # BM25 term-frequency saturation
    b: float = 0.75  # BM25 length normalisation (0 = none, 1 = full)
    half_life_s: float | None = DEFAULT_HALF_LIFE_S  # None or 0: no time decay
    decay_floor: float = 0.35  # decay never goes below this
    liked_weight: float = 5.0  # one "liked" multiplies the score by exactly this
    disliked_weight: float = 0.1
    important_weight: float = 3.0
    feedback_max_exponent: float = 2.0  # many counts approach weight ** this, never reach it
    # Memory types whose weight does not fade with age: a preference stated two months ago
    # still holds today, while chit-chat from the same day does not. Measured with
    # bench/quality/run.py: without this, old preferences lose to recent small talk.
    timeless_types: frozenset[str] = frozenset({"user_preference"})
    # The speaker field (``text.SPEAKER_FIELD`` terms: who said a turn): a query word that
    # names the speaker adds speaker_weight x its idf, with no length normalisation.
    # Measured with bench/quality/run.py (development split, R@10): 0 -> 0.513 (text
    # alone), 1 -> 0.515, 3 -> 0.517 alone; 3 in the combined default.
    speaker_weight: float = 3.0
    # A query word that names a speaker in scope ("speaker ruth" has postings) also counts
    # as a text term times name_text_weight: the text mention of a name is mostly a
    # greeting or a question to her ("Morning Ruth!", "Ruth, how was your week?"), not
    # evidence about her; yet "Ruth, did the race go well?" is. Measured (development
    # split, R@10 / R@1500tok, with query expansion): 1 -> 0.753 / 0.812, 0.3 -> 0.783 /
    # 0.846, 0 -> 0.774 / 0.838.
    name_text_weight: float = 0.3
    # Conversation context: a memory's time-neighbours in its owner (the turns just
    # before and after it, within neighbour_gap_s) lend it neighbour_share of the best
    # of their scores. Measured: 0.5 lifts within-budget recall of multi-turn answers
    # 0.552 -> 0.615; 0.3 gave 0.615 with a smaller gain overall.
    neighbour_share: float = 0.5
    neighbour_gap_s: float = 1800.0
    # A date in the query ("in March 2024", "on 14 March 2024", "2024-03-14") multiplies
    # the score of memories from that day or month by date_weight. Measured: temporal
    # R@10 0.419 (1) -> 0.452 (2) -> 0.484 (4); 8 no better than 4.
    date_weight: float = 4.0
    # Query expansion (``recall.expansion``): each plain query word adds its
    # expansion_per_word nearest words (cosine >= expansion_min_similarity in a static
    # word-embedding space) as terms weighing expansion_weight x their similarity;
    # expansion_max_terms caps the added terms of one query (the strongest kept).
    # expansion_weight 0 turns it off. Measured (development split before its follow-ups
    # named the listener, R@10 / R@1500tok, with name_text_weight 0): off 0.597 / 0.662;
    # weight 0.3 0.745 / 0.825, 0.5 0.745 / 0.833, 0.8 0.764 / 0.846, 1 0.766 / 0.846;
    # 5 words each 0.724, 12 0.749; at most 16 terms 0.734; similarity >= 0.25 the same
    # as 0.2.
    expansion_weight: float = 0.8
    expansion_per_word: int = 8
    expansion_min_similarity: float = 0.2
    expansion_max_terms: int = 32
    # Abstention (``recall.evidence``): when the best of the first candidates holds less
    # than this share of the question's words (by idf; speakers' names left out), the
    # recall returns nothing. 0: never abstain.
    min_evidence: float = 0.0

    def __post_init__(self) -> None:
        _check_number("k1", self.k1, low=0.0)
        _check_number("b", self.b, low=0.0, high=1.0)
        if self.half_life_s is not None:
            _check_number("half_life_s", self.half_life_s, low=0.0)
        _check_number("decay_floor", self.decay_floor, low=0.0, high=1.0)
        _check_number("liked_weight", self.liked_weight, low=0.0)
        _check_number("disliked_weight", self.disliked_weight, low=0.0)
        _check_number("important_weight", self.important_weight, low=0.0)
        _check_number("feedback_max_exponent", self.feedback_max_exponent, low=1.0, high=16.0)
        _check_number("speaker_weight", self.speaker_weight, low=0.0)
        _check_number("name_text_weight", self.name_text_weight, low=0.0)
        _check_number("neighbour_share", self.neighbour_share, low=0.0, high=1.0)
        _check_number("neighbour_gap_s", self.neighbour_gap_s, low=0.0)
        _check_number("date_weight", self.date_weight, low=0.0)
        _check_number("expansion_weight", self.expansion_weight, low=0.0, high=1.0)
        _check_number("expansion_per_word", self.expansion_per_word, low=0, high=32)
        _check_number("expansion_min_similarity", self.expansion_min_similarity, low=0.0, high=1.0)
        _check_number("expansion_max_terms", self.expansion_max_terms, low=0, high=64)
        _check_number("min_evidence", self.min_evidence, low=0.0, high=1.0)

    @classmethod
    def from_dict(
        cls, overrides: Mapping[str, Any] | None, base: RankingConfig | None = None
    ) -> RankingConfig:
        """``base`` (default: the defaults) with the fields named in ``overrides`` replaced.
        Unknown names and bad values raise ``ValueError`` naming the field."""
        base = base if base is not None else cls()
        if not overrides:
            return base
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"unknown ranking setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        return replace(base, **dict(overrides))

    @property
    def decays(self) -> bool:
        return bool(self.half_life_s)


def _check_number(
    name: str, value: Any, *, low: float | None = None, high: float | None = None
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value!r}")


# --- The three factors -----------------------------------------------------------------


def idf(df: int, n_docs: int) -> float:
    """BM25's non-negative idf, ``log(1 + (N - df + 0.5) / (df + 0.5))``. ``df`` is clamped
    to ``[0, N]`` so slightly stale corpus statistics can never make it negative."""
    n = max(n_docs, 0)
    df = min(max(df, 0), n)
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def bm25(tf: int, df: int, n_docs: int, doc_len: int, avg_len: float, k1: float, b: float) -> float:
    """One term's BM25 contribution to one document's relevance."""
    if tf <= 0:
        return 0.0
    norm = k1 * (1.0 - b + b * doc_len / avg_len) if avg_len > 0 else k1
    return idf(df, n_docs) * tf * (k1 + 1.0) / (tf + norm)


def time_decay(age_s: float, half_life_s: float | None, floor: float) -> float:
    """``max(floor, 0.5 ** (age / half_life))``; 1.0 without a half-life or for a memory
    stamped in the future (clock skew between agents)."""
    if not half_life_s or age_s <= 0.0:
        return 1.0
    decay = 0.5 ** (age_s / half_life_s)
    return decay if decay > floor else floor


def feedback_exponent(count: int, max_exponent: float) -> float:
    """How many times a feedback kind's weight applies after ``count`` such feedbacks.

    ``e(0) = 0``, ``e(1) = 1`` exactly, then ``e(n) = E - (E - 1) / (1 + log2 n)`` with
    ``E = max_exponent``: it grows like a logarithm at first and approaches ``E`` without
    reaching it. With ``E = 2``: e(2) = 1.5, e(4) = 1.67, e(10) = 1.77, e(5000) = 1.92.
    """
    if count <= 0:
        return 0.0
    if count == 1:
        return 1.0
    return max_exponent - (max_exponent - 1.0) / (1.0 + math.log2(count))


def feedback_weight(liked: int, disliked: int, important: int, config: RankingConfig) -> float:
    """``liked_w ** e(liked) * disliked_w ** e(disliked) * important_w ** e(important)``.

    One like gives exactly x5, one dislike exactly x0.1, one "important" exactly x3, none
    gives 1.0. Repeats have diminishing returns and a hard ceiling (``weight ** E``): with
    the defaults 5000 likes give x22, never more than x25; mixed feedback multiplies
    (one like and one dislike: x0.5).
    """
    weight = 1.0
    top = config.feedback_max_exponent
    if liked > 0:
        weight *= config.liked_weight ** feedback_exponent(liked, top)
    if disliked > 0:
        weight *= config.disliked_weight ** feedback_exponent(disliked, top)
    if important > 0:
        weight *= config.important_weight ** feedback_exponent(important, top)
    return weight


# --- Inputs and outputs ----------------------------------------------------------------


def _no_terms() -> dict[str, int]:
    return {}


@dataclass(slots=True)
class CandidateFeatures:
    """What ranking needs to know about one memory (built by the recall service).

    ``term_freqs`` needs only the query terms (from the inverted index); extra terms are
    ignored. ``tokens`` is the cached token count of the content (for baselines); the
    packer counts rendered lines itself. Not frozen: building 10k frozen dataclasses costs
    milliseconds, so treat instances as read-only by convention.
    """

    key: str
    updated_at: float
    doc_len: int = 0
    term_freqs: Mapping[str, int] = field(default_factory=_no_terms)
    liked: int = 0
    disliked: int = 0
    important: int = 0
    type: str = "fact"
    tags: tuple[str, ...] = ()
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """Corpus-wide numbers BM25 needs: document count, mean document length (both over
    the collection the df values come from) and the df of each query term."""

    n_docs: int
    avg_len: float
    df: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class ScoredCandidate:
    key: str
    score: float  # relevance * decay * feedback * boost
    relevance: float  # the BM25 sum, 1.0 when the query matched nothing, 0.0 if unmatched
    decay: float
    feedback: float
    boost: float
    features: CandidateFeatures
