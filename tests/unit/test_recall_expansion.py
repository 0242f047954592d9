"""Query expansion (static word embeddings from the installed wordllama package), the
name rule, and abstention's evidence measure."""

from __future__ import annotations

from pathlib import Path

import pytest

from zeromem.recall.evidence import evidence
from zeromem.recall.expansion import Expander, ExpansionUnavailable, shared_expander
from zeromem.recall.ranking import (
    CandidateFeatures,
    CorpusStats,
    RankingConfig,
    score_candidates,
)
from zeromem.store.text import SPEAKER_FIELD, stem, terms

NOW = 1_800_000_000.0
PLAIN = RankingConfig(half_life_s=None, expansion_weight=0.0)


@pytest.fixture(scope="module")
def expander() -> Expander:
    return shared_expander()


def neighbour_terms(expander: Expander, word: str) -> set[str]:
    return {term for term, _ in expander.neighbours(word, 8, 0.2)}


def test_a_paraphrase_reaches_the_word_used(expander: Expander) -> None:
    assert stem("race") in neighbour_terms(expander, "footrace")
    assert stem("car") in neighbour_terms(expander, "vehicle")
    assert stem("guitar") in neighbour_terms(expander, "instrument")
    # unrelated words stay out
    assert stem("guitar") not in neighbour_terms(expander, "vehicle")


def test_neighbours_leave_out_the_word_itself_and_repeat_no_stem(expander: Expander) -> None:
    found = expander.neighbours("holidays", 8, 0.2)
    stems = [term for term, _ in found]
    assert stem("holidays") not in stems
    assert len(stems) == len(set(stems))
    similarities = [value for _, value in found]
    assert similarities == sorted(similarities, reverse=True)
    assert all(0.2 <= value <= 1.0 for value in similarities)


def test_expand_weighs_by_similarity_and_skips_names_and_stop_words(expander: Expander) -> None:
    extra = expander.expand("When did Ruth enter the footrace?", 8, 0.2, 0.5)
    assert stem("race") in extra
    assert all(0.0 < factor <= 0.5 for factor in extra.values())
    # "Ruth" (a capitalised word: a name) and stop words expand to nothing
    assert expander.expand("Ruth", 8, 0.2, 0.5) == {}
    assert expander.expand("when did the", 8, 0.2, 0.5) == {}


def test_a_package_without_the_model_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExpansionUnavailable, match="missing"):
        Expander(tmp_path)


def features(key: str, tf: dict[str, int], doc_len: int = 10) -> CandidateFeatures:
    return CandidateFeatures(key=key, updated_at=NOW, doc_len=doc_len, term_freqs=tf)


def test_an_expanded_term_weighs_its_factor() -> None:
    corpus = CorpusStats(n_docs=100, avg_len=10.0, df={"race": 5, "marathon": 5})
    cands = [features("a", {"race": 1}), features("b", {"marathon": 1})]
    ranked = score_candidates(
        cands, ["race", "marathon"], corpus, NOW, PLAIN, term_weights={"marathon": 0.4}
    )
    scores = {c.key: c.score for c in ranked}
    assert scores["b"] == pytest.approx(0.4 * scores["a"])


def test_a_speakers_name_counts_little_as_a_text_word() -> None:
    # "ruth" names a speaker in scope: Tobias's "Morning Ruth!" must not outrank a turn
    # about the race merely by holding the name
    corpus = CorpusStats(
        n_docs=100, avg_len=10.0, df={"ruth": 30, SPEAKER_FIELD + "ruth": 50, "race": 20}
    )
    greeting = features("greeting", {"ruth": 1}, doc_len=4)
    answer = features("answer", {"race": 1}, doc_len=14)
    query = ["ruth", "race", SPEAKER_FIELD + "ruth"]
    ranked = score_candidates([greeting, answer], query, corpus, NOW, PLAIN)
    assert ranked[0].key == "answer"
    counted = score_candidates(
        [greeting, answer], query, corpus, NOW, RankingConfig(half_life_s=None, name_text_weight=1)
    )
    assert counted[0].key == "greeting"
    # a name nobody in scope speaks under counts in full
    plain = CorpusStats(n_docs=100, avg_len=10.0, df={"ruth": 30, "race": 20})
    assert score_candidates([greeting, answer], query, plain, NOW, PLAIN)[0].key == "greeting"


def test_evidence_is_the_share_of_the_question_the_best_candidate_holds() -> None:
    query = [*terms("ruth pottery class tuesday"), SPEAKER_FIELD + "ruth"]
    df = {"ruth": 10, SPEAKER_FIELD + "ruth": 50, "potteri": 2, "class": 2, "tuesday": 2}
    corpus = CorpusStats(n_docs=100, avg_len=10.0, df=df)
    name_only = features("chat", {SPEAKER_FIELD + "ruth": 1, "ruth": 1})
    half = features("half", {"potteri": 1, SPEAKER_FIELD + "ruth": 1})
    ranked = score_candidates([name_only], query, corpus, NOW, PLAIN)
    assert evidence(ranked, query, {}, corpus) == 0.0
    ranked = score_candidates([name_only, half], query, corpus, NOW, PLAIN)
    assert evidence(ranked, query, {}, corpus) == pytest.approx(1 / 3)
    # an expanded term counts at its factor
    expanded = CorpusStats(n_docs=100, avg_len=10.0, df={**df, "lesson": 2})
    ranked = score_candidates(
        [features("syn", {"lesson": 1})],
        [*query, "lesson"],
        expanded,
        NOW,
        PLAIN,
        term_weights={"lesson": 0.5},
    )
    assert evidence(ranked, [*query, "lesson"], {"lesson": 0.5}, expanded) == pytest.approx(1 / 6)
    # a question of names alone has nothing to miss
    ranked = score_candidates([name_only], ["ruth", SPEAKER_FIELD + "ruth"], corpus, NOW, PLAIN)
    assert evidence(ranked, ["ruth", SPEAKER_FIELD + "ruth"], {}, corpus) == 1.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("expansion_weight", 1.5),
        ("expansion_per_word", 40),
        ("min_evidence", -0.1),
        ("name_text_weight", -1),
    ],
)
def test_bad_settings_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RankingConfig.from_dict({field: value})
