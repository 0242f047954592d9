"""Scoring for recall: ``score = relevance x decay x feedback x boost``.

- relevance: BM25 over the query terms (``text.terms`` of the query against the index the
  workers build with ``text.index_terms``). When the query has no terms, or no candidate
  matches any of them, relevance is 1.0 for everyone and recall degrades gracefully to
  "recent and valued" ranking. When some candidates match, the others score 0: they are
  not about the question and only fill the context with noise.
- decay: ``max(floor, 0.5 ** (age / half_life))``. The default half-life is long (30 days)
  and the floor high (0.35) on purpose: relevance comes first, and an old preference that
  answers the question must not be buried under yesterday's chatter.
- feedback: liked / disliked / important counts, each a multiplier with diminishing
  returns (see ``feedback_weight``).
- boost: multipliers from the request's strategy (``by_tag``, ``by_type``).

Ties are broken newest first, then by key, so a recall is deterministic.

Speed matters: this runs on every recall, over up to tens of thousands of candidates.
``score_candidates`` therefore computes one float per candidate in a tight loop and
returns a ``Ranking``, which orders and materialises ``ScoredCandidate`` objects lazily:
a recall that keeps five memories orders (roughly) the matching candidates and builds a
handful of objects, not ten thousand.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import compress
from typing import Any, ClassVar, TypedDict, overload

from zeromem.schemas.memory import MemoryType
from zeromem.store.text import SPEAKER_FIELD

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
        _check_number("neighbour_share", self.neighbour_share, low=0.0, high=1.0)
        _check_number("neighbour_gap_s", self.neighbour_gap_s, low=0.0)
        _check_number("date_weight", self.date_weight, low=0.0)

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


# --- Scoring ---------------------------------------------------------------------------


def score_candidates(
    cands: Sequence[CandidateFeatures],
    query_terms: Sequence[str],
    stats: CorpusStats,
    now: float,
    config: RankingConfig,
    strategy: Strategy | None = None,
    *,
    neighbours: Mapping[str, Sequence[str]] | None = None,
    date_range: tuple[float, float] | None = None,
) -> Ranking:
    """Score every candidate and return them in rank order (lazily, see ``Ranking``).

    ``strategy`` (optional) first derives the config (``strategy.config(config)``), then
    drops the candidates its filters reject (kept in ``Ranking.dropped``), then multiplies
    each score by its boost. Duplicate query terms count once. Speaker field terms
    (``text.SPEAKER_FIELD``) weigh ``speaker_weight`` and skip length normalisation.
    ``date_range`` (a day or month the query names): matching memories updated then are
    multiplied by ``date_weight``. ``neighbours`` (key -> the keys of its time-neighbours
    in the same conversation): each candidate then gains ``neighbour_share`` x the best
    score among its neighbours.
    """
    boost_of = None
    dropped: list[CandidateFeatures] = []
    if strategy is not None:
        config = strategy.config(config)
        if strategy.filters:
            keep = strategy.keep
            kept: list[CandidateFeatures] = []
            for c in cands:
                (kept if keep(c, now) else dropped).append(c)
            cands = kept
        if strategy.boosts:
            boost_of = strategy.boost
    feats = cands if isinstance(cands, list) else list(cands)
    n = len(feats)
    scores = [0.0] * n

    k1, b = config.k1, config.b
    idf_k1: dict[str, float] = {}  # idf * (k1 + 1), per distinct query text term
    field_k1: dict[str, float] = {}  # the same times speaker_weight, per speaker field term
    for term in query_terms:
        if term.startswith(SPEAKER_FIELD):
            if config.speaker_weight > 0.0 and term not in field_k1:
                field_k1[term] = (
                    idf(stats.df.get(term, 0), stats.n_docs) * (k1 + 1.0) * config.speaker_weight
                )
        elif term not in idf_k1:
            idf_k1[term] = idf(stats.df.get(term, 0), stats.n_docs) * (k1 + 1.0)
    avg_len = stats.avg_len
    norm_base = k1 * (1.0 - b) if avg_len > 0 else k1
    norm_per_len = k1 * b / avg_len if avg_len > 0 else 0.0

    half_life = config.half_life_s if config.half_life_s else 0.0
    floor = config.decay_floor
    # Past this age 0.5 ** (age / half_life) is below the floor whatever the rounding
    # (the 1e-6 margin dwarfs it), so old memories skip the pow and get the floor exactly.
    floor_age = (
        half_life * math.log2(1.0 / floor) * (1.0 + 1e-6) if half_life and floor > 0.0 else math.inf
    )

    timeless = config.timeless_types

    # One pass. A candidate without postings is skipped at once (usually the vast
    # majority); a matching one gets relevance x decay x feedback x boost right away.
    # The maths is inlined for speed; it is exactly that of time_decay() and
    # feedback_weight(), which Ranking uses to report the factors.
    matched: list[int] = []
    in_dates = None
    if date_range is not None and config.date_weight != 1.0:
        in_dates = date_range
    if idf_k1 or field_k1:
        get_idf = idf_k1.get
        get_field = field_k1.get
        for i, c in enumerate(feats):
            tfs = c.term_freqs
            if not tfs:
                continue
            denom_add = norm_base + norm_per_len * c.doc_len
            s = 0.0
            for term, tf in tfs.items():
                weight = get_idf(term)
                if weight is not None:
                    if tf > 0:
                        s += weight * tf / (tf + denom_add)
                else:
                    weight = get_field(term)
                    if weight is not None and tf > 0:
                        s += weight * tf / (tf + k1)
            if s > 0.0:
                if in_dates is not None and in_dates[0] <= c.updated_at < in_dates[1]:
                    s *= config.date_weight
                if half_life and c.type not in timeless:
                    age = now - c.updated_at
                    if age >= floor_age:
                        s *= floor
                    elif age > 0.0:
                        d = 0.5 ** (age / half_life)
                        s *= d if d > floor else floor
                if c.liked or c.disliked or c.important:
                    s *= feedback_weight(c.liked, c.disliked, c.important, config)
                if boost_of is not None:
                    s *= boost_of(c)
                scores[i] = s
                matched.append(i)
    relevance_mode = bool(matched)
    if not relevance_mode:
        # Nothing matched (or no query): relevance is 1.0, rank by decay x feedback x boost.
        for i, c in enumerate(feats):
            s = 1.0
            if half_life and c.type not in timeless:
                age = now - c.updated_at
                if age >= floor_age:
                    s = floor
                elif age > 0.0:
                    d = 0.5 ** (age / half_life)
                    s = d if d > floor else floor
            if c.liked or c.disliked or c.important:
                s *= feedback_weight(c.liked, c.disliked, c.important, config)
            if boost_of is not None:
                s *= boost_of(c)
            scores[i] = s

    if relevance_mode and neighbours and config.neighbour_share > 0.0:
        matched = _share_with_neighbours(feats, scores, matched, neighbours, config.neighbour_share)
    # Zero scores (0.0 is falsy) stay out of the up-front sort: they form the lazy tail.
    if relevance_mode:
        positive = [i for i in matched if scores[i] > 0.0]
    else:
        positive = list(compress(range(n), scores))
    return Ranking(
        feats,
        scores,
        positive,
        idf_k1,
        norm_base,
        norm_per_len,
        now,
        config,
        boost_of,
        relevance_mode,
        dropped,
        field_k1,
    )


_TURN = MemoryType.MESSAGE.value


def _share_with_neighbours(
    feats: list[CandidateFeatures],
    scores: list[float],
    matched: list[int],
    neighbours: Mapping[str, Sequence[str]],
    share: float,
) -> list[int]:
    """Each conversation turn (a ``message`` memory) gains ``share`` x the best score of
    its neighbouring turns (as they scored on their own): a turn that answers a question
    asked in the turn before it, or the second half of an answer told over two turns.
    Other memories written close together (a preference, a task state) are no
    conversation and share nothing. Returns the new matched list."""
    position = {c.key: i for i, c in enumerate(feats) if c.type == _TURN}
    own = scores[:]
    added = []
    for key, near in neighbours.items():
        i = position.get(key)
        if i is None:
            continue
        best = max((own[j] for j in map(position.get, near) if j is not None), default=0.0)
        if best > 0.0:
            if own[i] == 0.0:
                added.append(i)
            scores[i] += share * best
    return matched + added if added else matched


class Ranking(Sequence[ScoredCandidate]):
    """Scored candidates in rank order: score descending, then ``updated_at`` descending,
    then key ascending. Behaves like a read-only list of ``ScoredCandidate``.

    Lazy on purpose, because a recall usually reads a handful of positions out of
    thousands. Ordering comes in three layers, each computed only when a reader gets
    there: the best ``HEAD`` positive scores (found with a C-speed ``heapq`` pass, ties at
    the threshold included, so no tie-run is ever split), then the other positive scores,
    then the zero-score tail (candidates that matched nothing). Ties are broken run by
    run as positions are read, and ``ScoredCandidate`` objects are built on first access.
    Reading everything (an explain view) costs what an eager sort would, and then some.

    ``positive`` is the number of leading candidates with a score above zero; ``dropped``
    the candidates the strategy filtered out; ``relevance_mode`` whether any candidate
    matched the query (otherwise every relevance is 1.0).
    """

    HEAD: ClassVar[int] = 64  # positions ordered up front; a sort below this many

    __slots__ = (
        "_boost_of",
        "_built",
        "_config",
        "_feats",
        "_field_k1",
        "_final",
        "_idf_k1",
        "_norm_base",
        "_norm_per_len",
        "_now",
        "_order",
        "_rest",
        "_run_end",
        "_scores",
        "_tail_added",
        "_threshold",
        "_updated",
        "dropped",
        "positive",
        "relevance_mode",
    )

    def __init__(
        self,
        feats: list[CandidateFeatures],
        scores: list[float],
        positive: list[int],
        idf_k1: dict[str, float],
        norm_base: float,
        norm_per_len: float,
        now: float,
        config: RankingConfig,
        boost_of: Callable[[CandidateFeatures], float] | None,
        relevance_mode: bool,
        dropped: list[CandidateFeatures],
        field_k1: dict[str, float] | None = None,
    ) -> None:
        self._field_k1 = field_k1 or {}
        self._feats = feats
        self._scores = scores
        # Layer 1: every positive score >= the HEAD-th best; layer 2 (_rest) the others.
        self._rest: list[int] | None = None
        self._threshold = 0.0
        if len(positive) > 4 * self.HEAD:
            values = scores if len(positive) == len(scores) else [scores[i] for i in positive]
            self._threshold = heapq.nlargest(self.HEAD, values)[-1]
            threshold = self._threshold
            head = [i for i in positive if scores[i] >= threshold]
            self._rest = positive
        else:
            head = positive
        self._order = sorted(head, key=scores.__getitem__, reverse=True)
        self._final = 0  # positions [0, _final) are in their final order
        self._run_end = 0  # end of the score tie-run being finalised
        self._tail_added = len(positive) == len(feats)
        self._updated: list[float] | None = None
        self._built: dict[int, ScoredCandidate] = {}
        self._idf_k1 = idf_k1
        self._norm_base = norm_base
        self._norm_per_len = norm_per_len
        self._now = now
        self._config = config
        self._boost_of = boost_of
        self.relevance_mode = relevance_mode
        self.positive = len(positive)
        self.dropped: tuple[CandidateFeatures, ...] = tuple(dropped)

    @property
    def config(self) -> RankingConfig:
        """The config the scores were computed with (after the strategy's overrides)."""
        return self._config

    def __len__(self) -> int:
        return len(self._feats)

    @overload
    def __getitem__(self, index: int) -> ScoredCandidate: ...
    @overload
    def __getitem__(self, index: slice) -> list[ScoredCandidate]: ...
    def __getitem__(self, index: int | slice) -> ScoredCandidate | list[ScoredCandidate]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self._feats)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("ranking index out of range")
        if index >= self._final:
            self._finalise(index)
        return self._build(self._order[index])

    def __iter__(self) -> Iterator[ScoredCandidate]:
        for position in range(len(self._feats)):
            yield self[position]

    def key_at(self, position: int) -> str:
        """The key at ``position`` without building a ``ScoredCandidate``."""
        if position >= self._final:
            self._finalise(position)
        return self._feats[self._order[position]].key

    def score_at(self, position: int) -> float:
        """The score at ``position`` without building a ``ScoredCandidate``."""
        if position >= self._final:
            self._finalise(position)
        return self._scores[self._order[position]]

    # -- ordering ----------------------------------------------------------------------

    def _finalise(self, position: int) -> None:
        """Make positions up to ``position`` final, one tie-run at a time: equal scores go
        newest first, equal scores and timestamps by key. Scores along ``_order`` never
        increase, so a run is a slice; most runs have one element, which a neighbour
        check settles without searching."""
        order, scores = self._order, self._scores
        while self._final <= position:
            start = self._final
            if start >= self._run_end:
                if start == len(order) and not self._extend():
                    return
                score = scores[order[start]]
                if start + 1 == len(order) or scores[order[start + 1]] != score:
                    self._final = self._run_end = start + 1
                    continue
                end = bisect_right(order, -score, start, len(order), key=lambda i: -scores[i])
                self._run_end = end
                updated = self._updated_list()
                run = order[start:end]
                run.sort(key=updated.__getitem__, reverse=True)
                order[start:end] = run
            # Inside a score tie-run, already sorted newest first.
            updated = self._updated_list()
            stamp = updated[order[start]]
            end = start + 1
            while end < self._run_end and updated[order[end]] == stamp:
                end += 1
            if end - start > 1:
                feats = self._feats
                order[start:end] = sorted(order[start:end], key=lambda i: feats[i].key)
            self._final = end

    def _extend(self) -> bool:
        """Append the next layer to ``_order``: the positive scores below the head, then
        the zero-score tail (which is one tie-run). False when nothing is left."""
        scores = self._scores
        if self._rest is not None:
            threshold = self._threshold
            rest = [i for i in self._rest if scores[i] < threshold]
            self._rest = None
            rest.sort(key=scores.__getitem__, reverse=True)
            self._order.extend(rest)
            if rest:
                return True
        if self._tail_added:
            return False
        self._tail_added = True
        listed = set(self._order)
        tail = [i for i in range(len(self._feats)) if i not in listed]
        self._order.extend(tail)
        return bool(tail)

    def _updated_list(self) -> list[float]:
        if self._updated is None:
            self._updated = [c.updated_at for c in self._feats]
        return self._updated

    # -- materialising -----------------------------------------------------------------

    def _build(self, i: int) -> ScoredCandidate:
        built = self._built.get(i)
        if built is None:
            c = self._feats[i]
            config = self._config
            if not self.relevance_mode:
                relevance = 1.0
            elif c.term_freqs:
                denom_add = self._norm_base + self._norm_per_len * c.doc_len
                relevance = 0.0
                for term, tf in c.term_freqs.items():
                    weight = self._idf_k1.get(term)
                    if weight is not None and tf > 0:
                        relevance += weight * tf / (tf + denom_add)
                    elif tf > 0 and term in self._field_k1:
                        relevance += self._field_k1[term] * tf / (tf + config.k1)
            else:
                relevance = 0.0
            built = ScoredCandidate(
                key=c.key,
                score=self._scores[i],
                relevance=relevance,
                decay=1.0
                if c.type in config.timeless_types
                else time_decay(self._now - c.updated_at, config.half_life_s, config.decay_floor),
                feedback=feedback_weight(c.liked, c.disliked, c.important, config),
                boost=self._boost_of(c) if self._boost_of is not None else 1.0,
                features=c,
            )
            self._built[i] = built
        return built


# --- Strategies ------------------------------------------------------------------------


class StrategyError(ValueError):
    """A strategy spec that cannot be built; the message says what is wrong."""


class Strategy:
    """How one recall ranks: derives the config, filters, and boosts.

    ``filters`` / ``boosts`` say whether ``keep`` / ``boost`` can ever differ from the
    neutral answer, so the scorer skips the calls entirely for plain strategies.
    """

    name: ClassVar[str] = "default"
    filters: bool = False
    boosts: bool = False

    def config(self, base: RankingConfig) -> RankingConfig:
        return base

    def keep(self, c: CandidateFeatures, now: float) -> bool:
        return True

    def boost(self, c: CandidateFeatures) -> float:
        return 1.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class Default(Strategy):
    """BM25 x decay x feedback with the base config."""


class TimeWindow(Strategy):
    """Keep only memories updated within the last ``seconds``."""

    name = "time_window"
    filters = True

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def keep(self, c: CandidateFeatures, now: float) -> bool:
        return c.updated_at >= now - self.seconds


class _Match(Strategy):
    """Shared by by_tag and by_type: boost matching memories, or keep only them."""

    def __init__(self, values: frozenset[str], boost: float, only: bool) -> None:
        self.values = values
        self.factor = boost
        self.only = only
        self.filters = only
        self.boosts = boost != 1.0

    def matches(self, c: CandidateFeatures) -> bool:
        raise NotImplementedError

    def keep(self, c: CandidateFeatures, now: float) -> bool:
        return not self.only or self.matches(c)

    def boost(self, c: CandidateFeatures) -> float:
        return self.factor if self.matches(c) else 1.0


class ByTag(_Match):
    name = "by_tag"

    def matches(self, c: CandidateFeatures) -> bool:
        return not self.values.isdisjoint(c.tags)


class ByType(_Match):
    name = "by_type"

    def matches(self, c: CandidateFeatures) -> bool:
        return c.type in self.values


class FeedbackOverrides(TypedDict, total=False):
    liked_weight: float
    disliked_weight: float
    important_weight: float
    feedback_max_exponent: float


class FeedbackWeight(Strategy):
    """Override the feedback weights (and optionally the exponent ceiling)."""

    name = "feedback_weight"

    def __init__(self, overrides: FeedbackOverrides) -> None:
        self.overrides = overrides

    def config(self, base: RankingConfig) -> RankingConfig:
        return replace(base, **self.overrides)


class RecencyOverrides(TypedDict, total=False):
    half_life_s: float | None
    decay_floor: float


class Recency(Strategy):
    """Override the half-life and/or the floor of the time decay."""

    name = "recency"

    def __init__(self, overrides: RecencyOverrides) -> None:
        self.overrides = overrides

    def config(self, base: RankingConfig) -> RankingConfig:
        return replace(base, **self.overrides)


class NoDecay(Strategy):
    """Age does not matter."""

    name = "no_decay"

    def config(self, base: RankingConfig) -> RankingConfig:
        return replace(base, half_life_s=None)


class Compose(Strategy):
    """Steps in order: configs chain (a later step overrides an earlier one), every
    filter must keep a candidate, boosts multiply."""

    name = "compose"

    def __init__(self, steps: Sequence[Strategy]) -> None:
        self.steps = tuple(steps)
        self._filters = tuple(s for s in self.steps if s.filters)
        self._boosts = tuple(s for s in self.steps if s.boosts)
        self.filters = bool(self._filters)
        self.boosts = bool(self._boosts)

    def config(self, base: RankingConfig) -> RankingConfig:
        for step in self.steps:
            base = step.config(base)
        return base

    def keep(self, c: CandidateFeatures, now: float) -> bool:
        return all(step.keep(c, now) for step in self._filters)

    def boost(self, c: CandidateFeatures) -> float:
        factor = 1.0
        for step in self._boosts:
            factor *= step.boost(c)
        return factor


MAX_COMPOSE_STEPS = 16
MAX_COMPOSE_DEPTH = 4
_MEMORY_TYPES = frozenset(t.value for t in MemoryType)


def build_strategy(spec: Mapping[str, Any] | None) -> Strategy:
    """Build a strategy from its JSON-able spec (as carried by ``RecallRequest.strategy``).

    ``None`` or ``{}`` is the default. Kinds::

        {"name": "default"}
        {"name": "time_window", "seconds": 604800}
        {"name": "by_tag", "tags": ["billing"], "boost": 2.0, "only": false}
        {"name": "by_type", "types": ["user_preference"], "boost": 2.0, "only": false}
        {"name": "feedback_weight", "liked": 5, "disliked": 0.1, "important": 3,
         "max_exponent": 2}
        {"name": "recency", "half_life_s": 3600, "floor": 0.0}
        {"name": "no_decay"}
        {"name": "compose", "steps": [ ...specs, applied in order... ]}

    Unknown kinds, unknown or missing parameters and bad values raise ``StrategyError``.
    """
    if spec is None or (isinstance(spec, Mapping) and not spec):
        return Default()
    return _build(spec, depth=0)


def _build(spec: Any, depth: int) -> Strategy:
    if not isinstance(spec, Mapping):
        raise StrategyError(f"a strategy must be an object like {{'name': ...}}, got {spec!r}")
    name = spec.get("name")
    if not isinstance(name, str) or (builder := _BUILDERS.get(name)) is None:
        raise StrategyError(f"unknown strategy {name!r}; known: {', '.join(sorted(_BUILDERS))}")
    params = _Params(name, spec)
    strategy = builder(params, depth)
    params.finish()
    return strategy


class _Params:
    """Reads a spec's parameters, and rejects the ones nobody read (typos)."""

    def __init__(self, name: str, spec: Mapping[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.used = {"name"}

    def _get(self, key: str, required: bool) -> Any:
        self.used.add(key)
        if key not in self.spec:
            if required:
                raise StrategyError(f"strategy {self.name!r} needs {key!r}")
            return None
        return self.spec[key]

    def number(
        self,
        key: str,
        *,
        required: bool = False,
        default: float | None = None,
        low: float | None = None,
        high: float | None = None,
        positive: bool = False,
    ) -> float | None:
        value = self._get(key, required)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise StrategyError(f"strategy {self.name!r}: {key!r} must be a number, got {value!r}")
        if positive and value <= 0:
            raise StrategyError(f"strategy {self.name!r}: {key!r} must be > 0, got {value!r}")
        if low is not None and value < low:
            raise StrategyError(f"strategy {self.name!r}: {key!r} must be >= {low}, got {value!r}")
        if high is not None and value > high:
            raise StrategyError(f"strategy {self.name!r}: {key!r} must be <= {high}, got {value!r}")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self._get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise StrategyError(f"strategy {self.name!r}: {key!r} must be true or false")
        return value

    def strings(self, key: str) -> frozenset[str]:
        value = self._get(key, True)
        if (
            isinstance(value, str)
            or not isinstance(value, Sequence)
            or not value
            or not all(isinstance(v, str) and v for v in value)
        ):
            raise StrategyError(
                f"strategy {self.name!r}: {key!r} must be a non-empty list of strings"
            )
        return frozenset(value)

    def raw(self, key: str) -> Any:
        return self._get(key, True)

    def finish(self) -> None:
        unknown = sorted(set(self.spec) - self.used, key=str)
        if unknown:
            raise StrategyError(
                f"strategy {self.name!r} does not take {', '.join(map(repr, unknown))}"
            )


def _default(p: _Params, depth: int) -> Strategy:
    return Default()


def _time_window(p: _Params, depth: int) -> Strategy:
    return TimeWindow(p.number("seconds", required=True, positive=True) or 0.0)


def _match_params(p: _Params) -> tuple[float, bool]:
    boost = p.number("boost", default=2.0, positive=True)
    assert boost is not None
    return boost, p.flag("only")


def _by_tag(p: _Params, depth: int) -> Strategy:
    tags = p.strings("tags")
    boost, only = _match_params(p)
    return ByTag(tags, boost, only)


def _by_type(p: _Params, depth: int) -> Strategy:
    types = p.strings("types")
    unknown = sorted(types - _MEMORY_TYPES)
    if unknown:
        raise StrategyError(
            f"strategy 'by_type': unknown type(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(_MEMORY_TYPES))}"
        )
    boost, only = _match_params(p)
    return ByType(types, boost, only)


def _feedback_weight(p: _Params, depth: int) -> Strategy:
    overrides: FeedbackOverrides = {}
    if (liked := p.number("liked", low=0.0)) is not None:
        overrides["liked_weight"] = liked
    if (disliked := p.number("disliked", low=0.0)) is not None:
        overrides["disliked_weight"] = disliked
    if (important := p.number("important", low=0.0)) is not None:
        overrides["important_weight"] = important
    top = p.number("max_exponent", low=1.0, high=16.0)
    if top is not None:
        overrides["feedback_max_exponent"] = top
    if not overrides:
        raise StrategyError(
            "strategy 'feedback_weight' needs at least one of liked, disliked, important, "
            "max_exponent"
        )
    return FeedbackWeight(overrides)


def _recency(p: _Params, depth: int) -> Strategy:
    overrides: RecencyOverrides = {}
    if "half_life_s" in p.spec and p.spec["half_life_s"] is None:
        p.used.add("half_life_s")
        overrides["half_life_s"] = None
    else:
        half_life = p.number("half_life_s", low=0.0)
        if half_life is not None:
            overrides["half_life_s"] = half_life
    floor = p.number("floor", low=0.0, high=1.0)
    if floor is not None:
        overrides["decay_floor"] = floor
    if not overrides:
        raise StrategyError("strategy 'recency' needs half_life_s and/or floor")
    return Recency(overrides)


def _no_decay(p: _Params, depth: int) -> Strategy:
    return NoDecay()


def _compose(p: _Params, depth: int) -> Strategy:
    steps = p.raw("steps")
    if isinstance(steps, str | bytes) or not isinstance(steps, Sequence):
        raise StrategyError("strategy 'compose': 'steps' must be a list of strategies")
    if len(steps) > MAX_COMPOSE_STEPS:
        raise StrategyError(f"strategy 'compose': at most {MAX_COMPOSE_STEPS} steps")
    if depth >= MAX_COMPOSE_DEPTH:
        raise StrategyError(f"strategy 'compose': nested deeper than {MAX_COMPOSE_DEPTH}")
    return Compose([_build(step, depth + 1) for step in steps])


_BUILDERS = {
    "default": _default,
    "time_window": _time_window,
    "by_tag": _by_tag,
    "by_type": _by_type,
    "feedback_weight": _feedback_weight,
    "recency": _recency,
    "no_decay": _no_decay,
    "compose": _compose,
}


__all__ = [
    "DEFAULT_HALF_LIFE_S",
    "CandidateFeatures",
    "CorpusStats",
    "Ranking",
    "RankingConfig",
    "ScoredCandidate",
    "Strategy",
    "StrategyError",
    "bm25",
    "build_strategy",
    "feedback_exponent",
    "feedback_weight",
    "idf",
    "score_candidates",
    "time_decay",
]
