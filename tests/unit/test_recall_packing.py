"""Fitting ranked memories and their references into a token budget."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeromem.recall.packing import (
    CUT_BELOW_TOP_K,
    CUT_MISSING,
    CUT_NO_MATCH,
    CUT_OVER_BUDGET,
    KEPT,
    PackItem,
    PackResult,
    display_key,
    pack,
    render_context,
    render_line,
)
from zeromem.recall.ranking import (
    CandidateFeatures,
    CorpusStats,
    RankingConfig,
    ScoredCandidate,
    score_candidates,
)
from zeromem.store.tokens import count_tokens, token_counter

COUNT = token_counter("cl100k_base")
DAY = 86_400.0
T0 = 1_790_000_000.0  # 2026-09-21


def item(
    key: str,
    content: str = "a short memory",
    refs: tuple[str, ...] = (),
    type_: str = "fact",
    updated_at: float = T0,
) -> PackItem:
    return PackItem(key=key, content=content, type=type_, updated_at=updated_at, references=refs)


def scored(key: str, score: float, relevance: float | None = None) -> ScoredCandidate:
    features = CandidateFeatures(key=key, updated_at=T0)
    return ScoredCandidate(
        key=key,
        score=score,
        relevance=score if relevance is None else relevance,
        decay=1.0,
        feedback=1.0,
        boost=1.0,
        features=features,
    )


def ranked_list(*keys: str) -> list[ScoredCandidate]:
    return [scored(key, float(len(keys) - i)) for i, key in enumerate(keys)]


def store(*items: PackItem) -> Callable[[str], PackItem | None]:
    by_key = {i.key: i for i in items}
    return by_key.get


def cost(i: PackItem) -> int:
    return COUNT(render_line(i))


def kept_keys(result: PackResult) -> list[str]:
    return [m.item.key for m in result.kept]


def check_invariants(result: PackResult, budget: int, k: int) -> None:
    assert result.tokens_used <= budget
    assert result.tokens_used == sum(m.tokens for m in result.kept)
    assert count_tokens(render_context(result.kept)) == result.tokens_used
    keys = kept_keys(result)
    assert len(keys) == len(set(keys))  # never twice
    assert sum(1 for m in result.kept if not m.via) <= k
    seen: set[str] = set()
    for memory in result.kept:
        if memory.via:
            assert memory.via in seen  # a reference follows the memory that pulled it in
            assert 1 <= memory.depth <= 2
        seen.add(memory.item.key)


# --- Rendering -------------------------------------------------------------------------


def test_line_format() -> None:
    line = render_line(
        item(
            "user:u1:pref_lang",
            "prefers answers in Chinese",
            type_="user_preference",
            updated_at=T0 + 11 * DAY,
        )
    )
    assert line == "[2026-10-02 user_preference user:u1:pref_lang] prefers answers in Chinese\n"


def test_content_whitespace_is_folded_to_one_line() -> None:
    line = render_line(item("task:t42:notes", "  first line\n\nsecond\tline\r\n third \u2028 "))
    assert line.endswith("] first line second line third\n")
    assert line.count("\n") == 1


def test_empty_content_and_generated_names() -> None:
    assert render_line(item("task:t42", "")) == "[2026-09-21 fact task:t42]\n"
    assert display_key("task:t42:01J9ZK3Q8X7Y6W5V4T3S2R1Q0P") == "task:t42"
    assert display_key("task:t42:step.3") == "task:t42:step.3"
    assert display_key("task:t42") == "task:t42"


def test_context_is_the_lines_in_order() -> None:
    a, b = item("k:o:a", "alpha"), item("k:o:b", "beta")
    assert render_context([a, b]) == render_line(a) + render_line(b)
    assert render_context([]) == ""


line_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120
) | st.sampled_from(
    [
        "用户喜欢用中文回答。",
        "done.",
        "a'b",
        "x ",
        "!!!",
        "🙂🙂 ok",
        "2026-10-02",
        "'s",
        "...",
        "\t",
        "<|endoftext|>",
        "v2.1 t42",
        "ünïcödé",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            line_text,
            st.sampled_from(["fact", "user_preference", "message"]),
            st.sampled_from(["user:u1:pref", "task:t42", "team:x:a.b/c@d"]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_block_tokens_are_exactly_the_sum_of_line_tokens(rows: list[tuple[str, str, str]]) -> None:
    items = [item(key, content, type_=type_) for content, type_, key in rows]
    assert count_tokens(render_context(items)) == sum(cost(i) for i in items)


# --- Packing ---------------------------------------------------------------------------


def test_greedy_in_score_order_up_to_k() -> None:
    items = [item(f"k:o:{c}", f"memory {c}") for c in "abcd"]
    result = pack(ranked_list("k:o:a", "k:o:b", "k:o:c", "k:o:d"), 2, 1000, store(*items), COUNT)
    assert kept_keys(result) == ["k:o:a", "k:o:b"]
    assert result.decisions == {"k:o:a": KEPT, "k:o:b": KEPT}
    assert result.decision(scored("k:o:c", 2.0)) == CUT_BELOW_TOP_K
    assert result.context == render_line(items[0]) + render_line(items[1])
    check_invariants(result, 1000, 2)


def test_an_item_over_budget_is_skipped_and_smaller_ones_still_fit() -> None:
    big = item("k:o:big", "word " * 200)
    small = item("k:o:small", "tiny")
    budget = cost(small) + 5
    result = pack(ranked_list("k:o:big", "k:o:small"), 5, budget, store(big, small), COUNT)
    assert kept_keys(result) == ["k:o:small"]
    assert result.decisions["k:o:big"] == CUT_OVER_BUDGET
    assert result.tokens_used == cost(small)


def test_exact_fit_is_kept() -> None:
    a = item("k:o:a", "exactly this")
    result = pack(ranked_list("k:o:a"), 1, cost(a), store(a), COUNT)
    assert kept_keys(result) == ["k:o:a"] and result.tokens_used == cost(a)


def test_references_follow_their_parent_and_are_not_duplicated() -> None:
    a = item("k:o:a", "parent", refs=("k:o:r1", "k:o:c"))
    c = item("k:o:c", "also ranked, pulled in as a reference first")
    r1 = item("k:o:r1", "outside the ranking")
    b = item("k:o:b", "second primary", refs=("k:o:a",))  # cycles back: ignored
    result = pack(ranked_list("k:o:a", "k:o:b", "k:o:c"), 3, 1000, store(a, b, c, r1), COUNT)
    assert kept_keys(result) == ["k:o:a", "k:o:r1", "k:o:c", "k:o:b"]
    assert [m.via for m in result.kept] == ["", "k:o:a", "k:o:a", ""]
    assert result.decisions["k:o:c"] == "kept: reference of k:o:a"
    assert result.kept[2].candidate is None  # kept as a reference, not as a primary
    check_invariants(result, 1000, 3)


def test_references_do_not_count_towards_k() -> None:
    a = item("k:o:a", "parent", refs=("k:o:r",))
    b, r = item("k:o:b", "b"), item("k:o:r", "r")
    result = pack(ranked_list("k:o:a", "k:o:b"), 2, 1000, store(a, b, r), COUNT)
    assert kept_keys(result) == ["k:o:a", "k:o:r", "k:o:b"]


def test_reference_chains_stop_at_depth_two() -> None:
    a = item("k:o:a", "a", refs=("k:o:b",))
    b = item("k:o:b", "b", refs=("k:o:c",))
    c = item("k:o:c", "c", refs=("k:o:d",))
    d = item("k:o:d", "d")
    result = pack(ranked_list("k:o:a"), 1, 1000, store(a, b, c, d), COUNT)
    assert kept_keys(result) == ["k:o:a", "k:o:b", "k:o:c"]
    assert [m.depth for m in result.kept] == [0, 1, 2]
    assert result.kept[2].via == "k:o:b"
    assert "k:o:d" not in result.decisions
    deeper = pack(ranked_list("k:o:a"), 1, 1000, store(a, b, c, d), COUNT, max_depth=3)
    assert kept_keys(deeper) == ["k:o:a", "k:o:b", "k:o:c", "k:o:d"]


def test_references_over_budget_are_skipped() -> None:
    a = item("k:o:a", "parent", refs=("k:o:huge", "k:o:small"))
    huge = item("k:o:huge", "lorem ipsum " * 100, refs=("k:o:child",))
    small = item("k:o:small", "fits")
    child = item("k:o:child", "child of the huge one")
    budget = cost(a) + cost(small) + cost(child)
    result = pack(ranked_list("k:o:a"), 1, budget, store(a, huge, small, child), COUNT)
    assert kept_keys(result) == ["k:o:a", "k:o:small"]
    assert result.decisions["k:o:huge"] == f"{CUT_OVER_BUDGET} (reference of k:o:a)"
    assert "k:o:child" not in result.decisions  # a cut reference pulls in nothing
    check_invariants(result, budget, 1)


def test_missing_memories_and_references_are_cut() -> None:
    a = item("k:o:a", "a", refs=("k:o:gone",))
    result = pack(ranked_list("k:o:deleted", "k:o:a"), 5, 1000, store(a), COUNT)
    assert kept_keys(result) == ["k:o:a"]
    assert result.decisions["k:o:deleted"] == CUT_MISSING
    assert result.decisions["k:o:gone"] == f"{CUT_MISSING} (reference of k:o:a)"


def test_zero_score_candidates_are_never_kept() -> None:
    ranked = [scored("k:o:hit", 2.0), scored("k:o:miss", 0.0, relevance=0.0)]
    result = pack(ranked, 5, 1000, store(item("k:o:hit"), item("k:o:miss")), COUNT)
    assert kept_keys(result) == ["k:o:hit"]
    assert result.all_decisions(ranked) == {"k:o:hit": KEPT, "k:o:miss": CUT_NO_MATCH}


def test_nothing_fits_or_nothing_asked() -> None:
    a = item("k:o:a", "a")
    assert pack(ranked_list("k:o:a"), 5, 1, store(a), COUNT).kept == []
    assert pack(ranked_list("k:o:a"), 0, 1000, store(a), COUNT).kept == []
    empty = pack([], 5, 1000, store(), COUNT)
    assert empty.kept == [] and empty.tokens_used == 0 and empty.context == ""


def test_stops_after_max_misses() -> None:
    items = [item(f"k:o:{i:03d}", "too long to fit " * 20) for i in range(200)]
    looked_up: list[str] = []
    by_key = {i.key: i for i in items}

    def lookup(key: str) -> PackItem | None:
        looked_up.append(key)
        return by_key.get(key)

    ranked = ranked_list(*by_key)
    result = pack(ranked, 5, 20, lookup, COUNT, max_misses=8)
    assert result.kept == [] and len(looked_up) == 8
    assert result.decision(ranked[100]) == CUT_OVER_BUDGET


def test_packs_a_real_ranking_and_explains_every_candidate() -> None:
    now = T0 + 100 * DAY
    feats = [
        CandidateFeatures(
            key=f"user:u1:m{i}",
            updated_at=now - i * DAY,
            doc_len=5,
            term_freqs={"tea": 1} if i % 3 == 0 else {},
        )
        for i in range(30)
    ]
    ranking = score_candidates(
        feats, ["tea"], CorpusStats(30, 5.0, {"tea": 10}), now, RankingConfig()
    )
    items = {f.key: item(f.key, f"memory {f.key} about tea") for f in feats}
    result = pack(ranking, 3, 1000, items.get, COUNT)
    assert kept_keys(result) == ["user:u1:m0", "user:u1:m3", "user:u1:m6"]
    decisions = result.all_decisions(ranking)
    assert len(decisions) == 30
    assert decisions["user:u1:m9"] == CUT_BELOW_TOP_K
    assert decisions["user:u1:m1"] == CUT_NO_MATCH
    assert list(decisions)[:3] == kept_keys(result)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 40),
    k=st.integers(0, 12),
    budget=st.integers(0, 600),
)
def test_budget_is_never_exceeded(seed: int, n: int, k: int, budget: int) -> None:
    rng = random.Random(seed)
    words = ["tea", "用户", "喜欢", "invoice", "v2.1", "🙂", "a", "ok.", "t42", "\n"]
    keys = [f"k:o:{i}" for i in range(n + 10)]  # 10 that are only ever references
    items = {
        key: item(
            key,
            " ".join(rng.choice(words) for _ in range(rng.randint(0, 60))),
            refs=tuple(rng.sample(keys, rng.randint(0, 3))) if rng.random() < 0.5 else (),
            updated_at=T0 - rng.random() * 400 * DAY,
        )
        for key in keys
        if rng.random() < 0.95  # some are missing
    }
    ranked = [scored(key, rng.choice([0.0, 0.5, 1.0, 2.0, 3.0])) for key in keys[:n]]
    ranked.sort(key=lambda s: -s.score)
    result = pack(ranked, k, budget, items.get, COUNT)
    check_invariants(result, budget, k)
    decisions = result.all_decisions(ranked)
    assert set(decisions) == {s.key for s in ranked}
    for memory in result.kept:
        assert result.decisions[memory.item.key].startswith("kept")
    # Whatever was tried and cut for budget would not fit even in what is left now.
    for key, decision in result.decisions.items():
        if decision.startswith(CUT_OVER_BUDGET):
            assert cost(items[key]) > budget - result.tokens_used


@pytest.mark.parametrize("budget", [1, 10, 50, 200])
def test_small_budgets(budget: int) -> None:
    items = [item(f"k:o:{i}", "x" * (i * 7)) for i in range(10)]
    result = pack(ranked_list(*(i.key for i in items)), 10, budget, store(*items), COUNT)
    check_invariants(result, budget, 10)
