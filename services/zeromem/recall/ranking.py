"""Scoring for recall: ``score = relevance x decay x feedback x boost`` (each factor, and
why its defaults are what they are: ``recall.factors``).

When the query has no terms, or no candidate matches any of them, relevance is 1.0 for
everyone and recall degrades gracefully to "recent and valued" ranking. When some
candidates match, the others score 0: they are not about the question and only fill the
context with noise. The boost comes from the request's strategy (``recall.strategies``).

Ties are broken newest first, then by key, so a recall is deterministic.

Speed matters: this runs on every recall, over up to tens of thousands of candidates.
``score_candidates`` therefore computes one float per candidate in a tight loop and
returns a ``Ranking``, which orders and materialises ``ScoredCandidate`` objects lazily:
a recall that keeps five memories orders (roughly) the matching candidates and builds a
handful of objects, not ten thousand.

The lazy ordering is ``recall.ordering``'s. The public names of ``factors``, ``ordering`` and
``strategies`` are imported here too, where callers have always found them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import compress

from zeromem.recall.factors import (
    DAY_S,
    DEFAULT_HALF_LIFE_S,
    CandidateFeatures,
    CorpusStats,
    RankingConfig,
    ScoredCandidate,
    bm25,
    feedback_exponent,
    feedback_weight,
    idf,
    time_decay,
)
from zeromem.recall.ordering import Ranking
from zeromem.recall.strategies import Strategy, StrategyError, build_strategy
from zeromem.schemas.memory import MemoryType
from zeromem.store.text import SPEAKER_FIELD


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
    term_weights: Mapping[str, float] | None = None,
) -> Ranking:
    """Score every candidate and return them in rank order (lazily, see ``Ranking``).

    ``strategy`` (optional) first derives the config (``strategy.config(config)``), then
    drops the candidates its filters reject (kept in ``Ranking.dropped``), then multiplies
    each score by its boost. Duplicate query terms count once. Speaker field terms
    (``text.SPEAKER_FIELD``) weigh ``speaker_weight`` and skip length normalisation.
    ``date_range`` (a day or month the query names): matching memories updated then are
    multiplied by ``date_weight``. ``neighbours`` (key -> the keys of its time-neighbours
    in the same conversation): each candidate then gains ``neighbour_share`` x the best
    score among its neighbours. ``term_weights`` multiplies the weight of some text terms
    (the expanded ones, ``recall.expansion``).
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
    if term_weights:
        for term, factor in term_weights.items():
            if term in idf_k1:
                idf_k1[term] *= factor
    if config.name_text_weight != 1.0:
        for term in idf_k1:
            if stats.df.get(SPEAKER_FIELD + term, 0) > 0:
                idf_k1[term] *= config.name_text_weight
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


__all__ = [
    "DAY_S",
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
