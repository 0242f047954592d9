"""Abstention: how much of a question the best candidates answer, and when that is too
little to inject anything.

A question that nothing in scope answers still matches something: the person it names
(the speaker field), a common word, a loose neighbour of an expanded word. Filling the
budget with those costs tokens and tells the model nothing, or worse, invites it to
answer from them. ``evidence`` measures the share of the question's own words (their
idf, names of speakers left out: they say who, not what) that the best-matching of the
first candidates contains, an expanded term counting at its factor; below
``RankingConfig.min_evidence`` the recall returns nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zeromem.recall.factors import CorpusStats, idf
from zeromem.recall.ordering import Ranking
from zeromem.store.text import SPEAKER_FIELD

EVIDENCE_TOP = 10  # candidates, best first, whose coverage is looked at


def evidence(
    ranking: Ranking,
    query_terms: Sequence[str],
    term_weights: Mapping[str, float],
    stats: CorpusStats,
    top: int = EVIDENCE_TOP,
) -> float:
    """The best coverage among the first ``top`` candidates, from 0 (nothing of the
    question's words) to 1 (all of them, or the question has none but names)."""
    weight: dict[str, float] = {}
    total = 0.0
    for term in query_terms:
        if term.startswith(SPEAKER_FIELD) or term in weight:
            continue
        if stats.df.get(SPEAKER_FIELD + term, 0) > 0:
            continue  # a speaker's name
        value = idf(stats.df.get(term, 0), stats.n_docs)
        factor = term_weights.get(term)
        if factor is None:
            total += value
            weight[term] = value
        else:
            weight[term] = factor * value
    if total <= 0.0:
        return 1.0
    best = 0.0
    for position in range(min(top, ranking.positive)):
        tfs = ranking.features_at(position).term_freqs
        covered = sum(w for term, w in weight.items() if tfs.get(term, 0) > 0)
        best = max(best, covered / total)
        if best >= 1.0:
            return 1.0
    return best
