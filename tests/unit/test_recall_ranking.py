"""Recall scoring: BM25 x time decay x feedback x strategy boost, and its ordering."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeromem.recall.ranking import (
    DEFAULT_HALF_LIFE_S,
    CandidateFeatures,
    CorpusStats,
    Ranking,
    RankingConfig,
    ScoredCandidate,
    Strategy,
    StrategyError,
    bm25,
    build_strategy,
    feedback_exponent,
    feedback_weight,
    idf,
    score_candidates,
    time_decay,
)

NOW = 1_800_000_000.0
DAY = 86_400.0
DEFAULT = RankingConfig()


def cand(
    key: str, age_s: float = 0.0, terms: dict[str, int] | None = None, doc_len: int = 10, **kw: Any
) -> CandidateFeatures:
    return CandidateFeatures(
        key=key, updated_at=NOW - age_s, doc_len=doc_len, term_freqs=terms or {}, **kw
    )


def stats(
    df: dict[str, int] | None = None, n_docs: int = 100, avg_len: float = 10.0
) -> CorpusStats:
    return CorpusStats(n_docs=n_docs, avg_len=avg_len, df=df or {})


def rank(
    cands: list[CandidateFeatures],
    query: list[str],
    corpus: CorpusStats | None = None,
    config: RankingConfig = DEFAULT,
    strategy: Strategy | None = None,
) -> Ranking:
    return score_candidates(cands, query, corpus or stats(), NOW, config, strategy)


def keys(ranking: Ranking | list[ScoredCandidate]) -> list[str]:
    return [c.key for c in ranking]


# --- Config ----------------------------------------------------------------------------


def test_defaults() -> None:
    assert DEFAULT.k1 == 1.2 and DEFAULT.b == 0.75
    assert DEFAULT.half_life_s == DEFAULT_HALF_LIFE_S == 30 * DAY
    assert DEFAULT.decay_floor == 0.35
    assert (DEFAULT.liked_weight, DEFAULT.disliked_weight, DEFAULT.important_weight) == (
        5.0,
        0.1,
        3.0,
    )


def test_from_dict_overrides_and_validates() -> None:
    config = RankingConfig.from_dict({"k1": 2.0, "half_life_s": None})
    assert config.k1 == 2.0 and config.half_life_s is None and config.b == 0.75
    assert RankingConfig.from_dict(None) == DEFAULT
    with pytest.raises(ValueError, match=r"unknown ranking setting.*kone"):
        RankingConfig.from_dict({"kone": 1})
    with pytest.raises(ValueError, match="decay_floor"):
        RankingConfig.from_dict({"decay_floor": 1.5})
    with pytest.raises(ValueError, match="b must be a finite number"):
        RankingConfig.from_dict({"b": "0.5"})
    with pytest.raises(ValueError, match="liked_weight"):
        RankingConfig(liked_weight=math.inf)


# --- Factors ---------------------------------------------------------------------------


def test_one_feedback_of_each_kind_gives_its_exact_weight() -> None:
    assert feedback_weight(0, 0, 0, DEFAULT) == 1.0
    assert feedback_weight(1, 0, 0, DEFAULT) == 5.0
    assert feedback_weight(0, 1, 0, DEFAULT) == 0.1
    assert feedback_weight(0, 0, 1, DEFAULT) == 3.0
    assert feedback_weight(1, 1, 1, DEFAULT) == pytest.approx(1.5)


def test_repeated_feedback_has_diminishing_bounded_returns() -> None:
    weights = [feedback_weight(n, 0, 0, DEFAULT) for n in (1, 2, 3, 10, 100, 5000, 10**9)]
    assert weights == sorted(weights) and len(set(weights)) == len(weights)  # increasing
    gains = [b / a for a, b in itertools.pairwise(weights)]
    assert gains[0] > gains[1]  # the second like adds more than the third
    assert all(math.isfinite(w) and w < 25.0 for w in weights)  # ceiling: 5 ** 2
    assert weights[5] == pytest.approx(5 ** feedback_exponent(5000, 2.0))
    assert 0.1**2 < feedback_weight(0, 5000, 0, DEFAULT) < 0.1
    assert feedback_exponent(0, 2.0) == 0.0 and feedback_exponent(1, 2.0) == 1.0
    assert feedback_exponent(2, 2.0) == 1.5


def test_max_exponent_one_means_repeats_do_not_count() -> None:
    config = RankingConfig(feedback_max_exponent=1.0)
    assert feedback_weight(50, 0, 0, config) == 5.0


def test_time_decay() -> None:
    assert time_decay(0.0, 3600.0, 0.0) == 1.0
    assert time_decay(3600.0, 3600.0, 0.0) == 0.5
    assert time_decay(7200.0, 3600.0, 0.0) == 0.25
    assert time_decay(10 * 3600.0, 3600.0, 0.35) == 0.35  # floor
    assert time_decay(-50.0, 3600.0, 0.35) == 1.0  # stamped in the future: no bonus
    assert time_decay(1e12, None, 0.35) == 1.0
    assert time_decay(1e12, 0.0, 0.35) == 1.0


def test_idf_is_never_negative() -> None:
    assert idf(100, 100) > 0.0
    assert idf(500, 100) == idf(100, 100)  # stale df is clamped
    assert idf(1, 100) > idf(50, 100)


def test_bm25() -> None:
    k1, b = 1.2, 0.75
    assert bm25(0, 5, 100, 10, 10.0, k1, b) == 0.0
    one = bm25(1, 5, 100, 10, 10.0, k1, b)
    assert one == pytest.approx(idf(5, 100))  # tf=1 at average length: exactly idf
    assert bm25(3, 5, 100, 10, 10.0, k1, b) > one  # more occurrences help...
    assert bm25(3, 5, 100, 10, 10.0, k1, b) < 3 * one  # ...with saturation
    assert bm25(1, 5, 100, 40, 10.0, k1, b) < one  # long documents are normalised down
    assert bm25(1, 5, 100, 40, 10.0, k1, 0.0) == one  # b=0: no length normalisation
    assert bm25(1, 5, 100, 10, 0.0, k1, b) == pytest.approx(one)  # unknown avg length


# --- Scoring and ordering --------------------------------------------------------------


def test_liked_memory_outranks_an_otherwise_equal_one() -> None:
    cands = [cand("user:u1:a", DAY, {"tea": 1}), cand("user:u1:b", DAY, {"tea": 1}, liked=1)]
    ranking = rank(cands, ["tea"], stats({"tea": 2}))
    assert keys(ranking) == ["user:u1:b", "user:u1:a"]
    assert ranking[0].score == pytest.approx(5 * ranking[1].score)
    assert ranking[0].feedback == 5.0


def test_disliked_memory_sinks() -> None:
    cands = [
        cand("user:u1:a", DAY, {"tea": 1}, disliked=1),
        cand("user:u1:b", 20 * DAY, {"tea": 1}),
    ]
    assert keys(rank(cands, ["tea"], stats({"tea": 2}))) == ["user:u1:b", "user:u1:a"]


def test_old_relevant_memory_beats_new_weak_one_unless_decay_is_steep() -> None:
    corpus = stats({"language": 50, "chinese": 2}, n_docs=100, avg_len=10.0)
    old = cand("user:u1:pref_lang", 200 * DAY, {"language": 1, "chinese": 1}, doc_len=6)
    new = cand("session:s9:chat", 60.0, {"language": 1}, doc_len=30)
    query = ["language", "chinese"]
    assert keys(rank([new, old], query, corpus)) == ["user:u1:pref_lang", "session:s9:chat"]
    steep = RankingConfig(half_life_s=3600.0, decay_floor=0.0)
    assert keys(rank([new, old], query, corpus, steep)) == ["session:s9:chat", "user:u1:pref_lang"]
    # The same through a request strategy.
    strategy = build_strategy({"name": "recency", "half_life_s": 3600, "floor": 0})
    assert keys(rank([new, old], query, corpus, strategy=strategy))[0] == "session:s9:chat"


def test_floor_keeps_old_relevant_memory_above_new_irrelevant_one() -> None:
    old = cand("user:u1:pref_lang", 3 * 365 * DAY, {"chinese": 1})
    new = cand("session:s9:chat", 1.0)
    steep = RankingConfig(half_life_s=3600.0)
    ranking = rank([new, old], ["chinese"], stats({"chinese": 1}), steep)
    assert keys(ranking) == ["user:u1:pref_lang", "session:s9:chat"]
    assert ranking[0].decay == 0.35
    assert ranking[1].score == 0.0 and ranking[1].relevance == 0.0
    assert ranking.positive == 1 and ranking.relevance_mode


def test_empty_query_ranks_recent_and_valued() -> None:
    cands = [
        cand("k:o:old", 90 * DAY),
        cand("k:o:new", DAY),
        cand("k:o:mid", 10 * DAY),
        cand("k:o:old_liked", 90 * DAY, liked=1),
    ]
    ranking = rank(cands, [])
    assert keys(ranking) == ["k:o:old_liked", "k:o:new", "k:o:mid", "k:o:old"]
    assert all(c.relevance == 1.0 for c in ranking)
    assert not ranking.relevance_mode and ranking.positive == 4


def test_query_matching_nothing_falls_back_to_recency() -> None:
    cands = [cand("k:o:a", 5 * DAY), cand("k:o:b", DAY)]
    ranking = rank(cands, ["unrelated"], stats({"unrelated": 0}))
    assert keys(ranking) == ["k:o:b", "k:o:a"]
    assert [c.relevance for c in ranking] == [1.0, 1.0]


def test_unmatched_candidates_come_last_newest_first() -> None:
    cands = [cand("k:o:z1", 3 * DAY), cand("k:o:hit", 50 * DAY, {"tea": 1}), cand("k:o:z2", DAY)]
    ranking = rank(cands, ["tea"], stats({"tea": 1}))
    assert keys(ranking) == ["k:o:hit", "k:o:z2", "k:o:z1"]
    assert [c.score > 0 for c in ranking] == [True, False, False]


def test_ties_go_newest_first_then_by_key() -> None:
    cands = [
        cand("k:o:b", DAY),
        cand("k:o:a", DAY),
        cand("k:o:c", 2 * DAY),
        cand("k:o:d", 0.5 * DAY),
    ]
    config = RankingConfig(half_life_s=None)  # every score is exactly 1.0
    assert keys(rank(cands, [], config=config)) == ["k:o:d", "k:o:a", "k:o:b", "k:o:c"]
    shuffled = cands[:]
    random.Random(3).shuffle(shuffled)
    assert keys(rank(shuffled, [], config=config)) == ["k:o:d", "k:o:a", "k:o:b", "k:o:c"]


def test_duplicate_query_terms_count_once() -> None:
    cands = [cand("k:o:a", 0, {"tea": 2})]
    once = rank(cands, ["tea"], stats({"tea": 3}))[0].score
    assert rank(cands, ["tea", "tea"], stats({"tea": 3}))[0].score == once


def test_scored_candidate_reports_its_factors() -> None:
    c = cand("k:o:a", 45 * DAY, {"tea": 2, "other": 5}, doc_len=8, important=1)
    corpus = stats({"tea": 3}, n_docs=50, avg_len=12.0)
    (scored,) = rank([c], ["tea"], corpus)
    assert scored.features is c and scored.key == "k:o:a"
    assert scored.relevance == pytest.approx(bm25(2, 3, 50, 8, 12.0, 1.2, 0.75))
    assert scored.decay == time_decay(45 * DAY, 30 * DAY, 0.35)
    assert scored.feedback == 3.0 and scored.boost == 1.0
    assert scored.score == scored.relevance * scored.decay * scored.feedback * scored.boost


def test_ranking_behaves_like_a_sequence() -> None:
    cands = [cand(f"k:o:{i}", i * DAY) for i in range(5)]
    ranking = rank(cands, [])
    assert len(ranking) == 5
    assert ranking[-1].key == "k:o:4"
    assert keys(ranking[1:3]) == ["k:o:1", "k:o:2"]
    assert ranking[0] is ranking[0]  # built once
    assert ranking.score_at(0) == ranking[0].score
    with pytest.raises(IndexError):
        ranking[5]


def _reference_score(
    c: CandidateFeatures,
    query: list[str],
    corpus: CorpusStats,
    config: RankingConfig,
    any_match: bool,
) -> float:
    relevance = sum(
        bm25(
            c.term_freqs.get(t, 0),
            corpus.df.get(t, 0),
            corpus.n_docs,
            c.doc_len,
            corpus.avg_len,
            config.k1,
            config.b,
        )
        for t in set(query)
    )
    return (
        (relevance if any_match else 1.0)
        * time_decay(NOW - c.updated_at, config.half_life_s, config.decay_floor)
        * feedback_weight(c.liked, c.disliked, c.important, config)
    )


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 700),
    match=st.sampled_from([0.0, 0.02, 0.5, 1.0]),
    empty_query=st.booleans(),
    no_decay=st.booleans(),
)
def test_order_is_total_and_matches_a_reference(
    seed: int, n: int, match: float, empty_query: bool, no_decay: bool
) -> None:
    """Many exact ties (few distinct ages and tfs), enough candidates to go past the
    lazily ordered head; positions read out of order must still come out right."""
    rng = random.Random(seed)
    query = [] if empty_query else ["tea", "milk"]
    cands = [
        cand(
            f"k:o:{rng.randrange(10**6):06d}-{i}",
            rng.choice([0, 1, 2, 40, 90]) * DAY,
            {"tea": rng.choice([1, 2])} if rng.random() < match else {},
            doc_len=rng.choice([5, 10]),
            liked=int(rng.random() < 0.1),
        )
        for i in range(n)
    ]
    corpus = stats({"tea": max(1, n // 3), "milk": 1}, n_docs=max(n, 1))
    config = RankingConfig(half_life_s=None) if no_decay else DEFAULT
    ranking = rank(cands, query, corpus, config)
    for position in rng.sample(range(n), min(n, 20)):
        ranking[position]  # random access first
    scored = list(ranking)
    assert sorted(c.key for c in scored) == sorted(c.key for c in cands)
    expected = sorted(scored, key=lambda s: (-s.score, -s.features.updated_at, s.key))
    assert keys(scored) == keys(expected)
    any_match = any(c.term_freqs for c in cands) and not empty_query
    assert ranking.relevance_mode == any_match
    assert ranking.positive == sum(1 for s in scored if s.score > 0)
    for s in scored:
        assert s.score == s.relevance * s.decay * s.feedback * s.boost
        assert s.score == pytest.approx(
            _reference_score(s.features, query, corpus, config, any_match), rel=1e-12
        )


# --- Strategies ------------------------------------------------------------------------


def test_default_strategy() -> None:
    for spec in (None, {}, {"name": "default"}):
        strategy = build_strategy(spec)
        assert strategy.config(DEFAULT) == DEFAULT
        assert not strategy.filters and not strategy.boosts


def test_time_window_filters_old_memories() -> None:
    cands = [cand("k:o:new", DAY), cand("k:o:old", 10 * DAY)]
    strategy = build_strategy({"name": "time_window", "seconds": 7 * DAY})
    ranking = rank(cands, [], strategy=strategy)
    assert keys(ranking) == ["k:o:new"]
    assert [c.key for c in ranking.dropped] == ["k:o:old"]


def test_by_tag_boosts_or_filters() -> None:
    cands = [cand("k:o:plain", 0.0), cand("k:o:billing", 10 * DAY, tags=("billing", "x"))]
    boost = build_strategy({"name": "by_tag", "tags": ["billing"], "boost": 10.0})
    ranking = rank(cands, [], strategy=boost)
    assert keys(ranking) == ["k:o:billing", "k:o:plain"]
    assert ranking[0].boost == 10.0 and ranking[1].boost == 1.0
    only = build_strategy({"name": "by_tag", "tags": ["billing"], "only": True})
    assert keys(rank(cands, [], strategy=only)) == ["k:o:billing"]
    assert only.boosts  # default boost 2.0 still applies to what is kept


def test_by_type_boosts_or_filters() -> None:
    cands = [cand("k:o:fact", 0.0, type="fact"), cand("k:o:pref", 5 * DAY, type="user_preference")]
    boost = build_strategy({"name": "by_type", "types": ["user_preference"], "boost": 4.0})
    assert keys(rank(cands, [], strategy=boost)) == ["k:o:pref", "k:o:fact"]
    only = build_strategy(
        {"name": "by_type", "types": ["user_preference"], "only": True, "boost": 1.0}
    )
    assert keys(rank(cands, [], strategy=only)) == ["k:o:pref"]
    assert not only.boosts
    with pytest.raises(
        StrategyError, match=r"Invalid enum value 'user_pref' - at `strategy.types\[0\]`"
    ):
        build_strategy({"name": "by_type", "types": ["user_pref"]})


def test_feedback_weight_strategy_overrides_weights() -> None:
    strategy = build_strategy({"name": "feedback_weight", "liked": 2, "disliked": 0})
    config = strategy.config(DEFAULT)
    assert (config.liked_weight, config.disliked_weight, config.important_weight) == (2.0, 0.0, 3.0)
    cands = [cand("k:o:a", 0.0, {"tea": 1}, disliked=1), cand("k:o:b", 0.0, {"tea": 1})]
    ranking = rank(cands, ["tea"], stats({"tea": 2}), strategy=strategy)
    # A zero weight sinks the memory to a zero score: it is ranked last, never packed.
    assert keys(ranking) == ["k:o:b", "k:o:a"] and ranking[1].score == 0.0
    assert ranking.positive == 1


def test_recency_and_no_decay_strategies() -> None:
    recency = build_strategy({"name": "recency", "half_life_s": 3600, "floor": 0.1})
    assert recency.config(DEFAULT).half_life_s == 3600.0
    assert recency.config(DEFAULT).decay_floor == 0.1
    assert (
        build_strategy({"name": "recency", "half_life_s": None}).config(DEFAULT).half_life_s is None
    )
    assert build_strategy({"name": "no_decay"}).config(DEFAULT).half_life_s is None
    cands = [
        cand("k:o:old", 300 * DAY, {"tea": 1}, doc_len=5),
        cand("k:o:new", 0.0, {"tea": 1}, doc_len=40),
    ]
    assert keys(rank(cands, ["tea"], stats({"tea": 2}), strategy=recency))[0] == "k:o:new"
    no_decay = build_strategy({"name": "no_decay"})
    assert keys(rank(cands, ["tea"], stats({"tea": 2}), strategy=no_decay))[0] == "k:o:old"


def test_compose_applies_steps_in_order() -> None:
    recency = {"name": "recency", "half_life_s": 3600}
    no_decay = {"name": "no_decay"}
    assert (
        build_strategy({"name": "compose", "steps": [recency, no_decay]})
        .config(DEFAULT)
        .half_life_s
        is None
    )
    assert (
        build_strategy({"name": "compose", "steps": [no_decay, recency]})
        .config(DEFAULT)
        .half_life_s
        == 3600.0
    )
    composed = build_strategy(
        {
            "name": "compose",
            "steps": [
                {"name": "time_window", "seconds": 30 * DAY},
                {"name": "by_tag", "tags": ["billing"], "boost": 2.0},
                {"name": "by_type", "types": ["fact"], "boost": 3.0},
                {"name": "compose", "steps": [{"name": "feedback_weight", "liked": 1}]},
            ],
        }
    )
    assert composed.filters and composed.boosts
    assert composed.config(DEFAULT).liked_weight == 1.0
    cands = [
        cand("k:o:both", 2 * DAY, type="fact", tags=("billing",)),
        cand("k:o:tag", DAY, type="message", tags=("billing",)),
        cand("k:o:none", 0.0, type="message"),
        cand("k:o:expired", 40 * DAY, type="fact", tags=("billing",)),
    ]
    ranking = rank(cands, [], strategy=composed)
    assert keys(ranking) == ["k:o:both", "k:o:tag", "k:o:none"]
    assert ranking[0].boost == 6.0
    assert [c.key for c in ranking.dropped] == ["k:o:expired"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "nope"}, "unknown strategy 'nope'; known: default, time_window, by_tag"),
        ({"seconds": 5}, "missing required field `name`"),
        ("default", "a strategy is an object"),
        ({"name": "time_window"}, "missing required field `seconds`"),
        ({"name": "time_window", "seconds": -1}, r"Expected `float` > 0.0 - at `strategy.seconds`"),
        ({"name": "time_window", "seconds": "7d"}, "Expected `float`, got `str`"),
        ({"name": "time_window", "seconds": True}, "Expected `float`, got `bool`"),
        ({"name": "time_window", "seconds": math.inf}, "seconds must be a finite number"),
        ({"name": "time_window", "seconds": 60, "secs": 1}, "unknown field `secs`"),
        (
            {"name": "by_tag", "tags": "billing"},
            r"Expected `array`, got `str` - at `strategy.tags`",
        ),
        ({"name": "by_tag", "tags": []}, "Expected `array` of length >= 1"),
        ({"name": "by_tag", "tags": [""]}, r"length >= 1 - at `strategy.tags\[0\]`"),
        (
            {"name": "by_tag", "tags": ["a"], "boost": 0},
            r"Expected `float` > 0.0 - at `strategy.boost`",
        ),
        ({"name": "by_tag", "tags": ["a"], "only": "yes"}, "Expected `bool`, got `str`"),
        ({"name": "by_tag", "tags": ["a"], "boost": None}, "Expected `float`, got `null`"),
        ({"name": "feedback_weight"}, "needs at least one"),
        (
            {"name": "feedback_weight", "liked": -1},
            r"Expected `float` >= 0.0 - at `strategy.liked`",
        ),
        ({"name": "feedback_weight", "liked": math.nan}, r"Expected `float` >= 0.0"),
        ({"name": "recency"}, "needs half_life_s and/or floor"),
        ({"name": "recency", "floor": 2}, r"Expected `float` <= 1.0 - at `strategy.floor`"),
        ({"name": "compose", "steps": {"name": "default"}}, "Expected `array`, got `object`"),
        (
            {"name": "compose", "steps": [{"name": "bad"}]},
            r"unknown strategy 'bad'.* - at `strategy.steps\[0\].name`",
        ),
        ({"name": "compose", "steps": [{"name": "default"}] * 17}, "length <= 16"),
    ],
)
def test_bad_strategies_raise_clear_errors(spec: Any, message: str) -> None:
    with pytest.raises(StrategyError, match=message):
        build_strategy(spec)


def test_compose_nesting_is_bounded() -> None:
    spec: dict[str, Any] = {"name": "default"}
    for _ in range(6):
        spec = {"name": "compose", "steps": [spec]}
    with pytest.raises(StrategyError, match="nested deeper"):
        build_strategy(spec)


def test_strategy_error_is_a_value_error() -> None:
    assert issubclass(StrategyError, ValueError)


def test_large_ranking_with_ties_is_ordered_across_lazy_layers() -> None:
    rng = random.Random(11)
    cands = [
        cand(
            f"k:o:{rng.randrange(10**9):09d}",
            rng.choice([0, 1, 50, 100]) * DAY,
            liked=rng.choice([0, 0, 0, 1, 2]),
            important=rng.choice([0, 0, 1]),
        )
        for _ in range(3000)
    ]
    ranking = rank(cands, [])
    middle = ranking[1500]  # read deep first: forces the later layers
    scored = list(ranking)
    assert scored[1500] is middle
    expected = sorted(scored, key=lambda s: (-s.score, -s.features.updated_at, s.key))
    assert keys(scored) == keys(expected)


def test_a_preference_does_not_fade_but_chit_chat_does() -> None:
    """Two months old, a stated preference still beats yesterday's small talk that shares a
    word with the query (measured in bench/quality/run.py: old preferences were buried)."""
    now = 10_000_000.0
    day = 86_400.0
    old_pref = CandidateFeatures(
        "user:u1:pref_lang", now - 60 * day, 6, {"languag": 1}, type="user_preference"
    )
    chat = CandidateFeatures(
        "user:u1:01J9ZK3Q8X7Y6W5V4T3S2R1Q0P", now - day, 6, {"languag": 1}, type="message"
    )
    stats = CorpusStats(n_docs=100, avg_len=6.0, df={"languag": 2})
    ranked = score_candidates([chat, old_pref], ["languag"], stats, now, RankingConfig())
    assert ranked[0].key == "user:u1:pref_lang" and ranked[0].decay == 1.0
    assert ranked[1].decay < 1.0
