"""Micro-benchmark of recall's pure core: ranking 10k candidates, then packing a budget.

Run: ``.venv/bin/python bench/rank_micro.py [--candidates N] [--rounds R]``

Candidates are synthetic and seeded: ages spread over a year, a few percent with
feedback, a vocabulary of 2000 terms. Scenarios:

- query, 5% / 30% match: the usual recall (a question some memories answer);
- empty query: nothing to match, "recent and valued" ranking over everything;
- by_tag boost: a strategy that touches every candidate;
- full order: reading the whole ranking (what an explain view costs);
- and, for scale, the cost of merely constructing the 10k ``CandidateFeatures``.

"rank" is ``score_candidates`` plus reading the top 10 (what packing reads first); it
excludes building the ``CandidateFeatures``, which is the service's job. "pack" packs
the ranking into 1500 tokens, k=5, cl100k. The best of R rounds is the code's cost; the
median includes the machine's noise.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from zeromem.recall.packing import PackItem, pack
from zeromem.recall.ranking import (
    CandidateFeatures,
    CorpusStats,
    Ranking,
    RankingConfig,
    Strategy,
    build_strategy,
    score_candidates,
)
from zeromem.store.tokens import token_counter

NOW = 1_800_000_000.0
QUERY = ["prefer", "language", "chinese"]


def make_candidates(n: int, match_share: float, seed: int = 7) -> list[CandidateFeatures]:
    rng = random.Random(seed)
    types = ["message", "fact", "user_preference", "tool_result", "task_state"]
    out = []
    for i in range(n):
        matched = rng.random() < match_share
        term_freqs = (
            {t: rng.randint(1, 3) for t in rng.sample(QUERY, rng.randint(1, 3))} if matched else {}
        )
        feedback = rng.random() < 0.03
        out.append(
            CandidateFeatures(
                key=f"user:u{i % 50}:m{i}",
                updated_at=NOW - rng.random() * 365 * 86_400,
                doc_len=rng.randint(4, 40),
                term_freqs=term_freqs,
                liked=rng.randint(0, 3) if feedback else 0,
                disliked=rng.randint(0, 1) if feedback else 0,
                important=rng.randint(0, 1) if feedback else 0,
                type=rng.choice(types),
                tags=("billing",) if rng.random() < 0.1 else (),
                tokens=rng.randint(5, 50),
            )
        )
    return out


def timed(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    fn()  # warm up
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples) * 1e3, statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    n, rounds = args.candidates, args.rounds
    config = RankingConfig()
    stats = CorpusStats(
        n_docs=n, avg_len=22.0, df={"prefer": n // 20, "language": n // 10, "chinese": n // 30}
    )
    count = token_counter("cl100k_base")
    contents = {}

    def lookup(key: str) -> PackItem:
        item = contents.get(key)
        if item is None:
            item = PackItem(
                key,
                f"memory {key} says the user prefers answers in Chinese",
                "user_preference",
                NOW - 86_400,
            )
            contents[key] = item
        return item

    def rank(
        cands: list[CandidateFeatures], query: list[str], strategy: Strategy | None = None
    ) -> Ranking:
        ranking = score_candidates(cands, query, stats, NOW, config, strategy)
        for i in range(min(10, len(ranking))):
            ranking[i]
        return ranking

    scenarios: list[tuple[str, list[CandidateFeatures], list[str], Strategy | None]] = [
        ("query, 5% match", make_candidates(n, 0.05), QUERY, None),
        ("query, 30% match", make_candidates(n, 0.30), QUERY, None),
        ("empty query", make_candidates(n, 0.0), [], None),
        (
            "query 5% + by_tag boost",
            make_candidates(n, 0.05),
            QUERY,
            build_strategy({"name": "by_tag", "tags": ["billing"], "boost": 2.0}),
        ),
    ]
    print(f"{n} candidates, best / median of {rounds} rounds")
    for name, cands, query, strategy in scenarios:
        best, median = timed(lambda c=cands, q=query, s=strategy: rank(c, q, s), rounds)
        ranking = rank(cands, query, strategy)
        pbest, pmedian = timed(lambda r=ranking: pack(r, 5, 1500, lookup, count), rounds)
        print(
            f"  {name:26s} rank {best:6.3f} ms ({median:6.3f})   "
            f"pack {pbest:6.3f} ms ({pmedian:6.3f})"
        )
    cands = make_candidates(n, 0.05)
    best, median = timed(
        lambda: list(score_candidates(cands, QUERY, stats, NOW, config)), max(3, rounds // 5)
    )
    print(f"  {'full order (explain)':26s} rank {best:6.3f} ms ({median:6.3f})")
    # For scale: what the service pays just to build the inputs (not part of "rank").
    best, median = timed(
        lambda: [
            CandidateFeatures(
                c.key,
                c.updated_at,
                c.doc_len,
                c.term_freqs,
                c.liked,
                c.disliked,
                c.important,
                c.type,
                c.tags,
                c.tokens,
            )
            for c in cands
        ],
        rounds,
    )
    print(f"  {'(build CandidateFeatures)':26s}      {best:6.3f} ms ({median:6.3f})")


if __name__ == "__main__":
    main()
