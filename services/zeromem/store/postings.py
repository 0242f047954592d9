"""The scores of recall's inverted index (``RedisKeys.by_term``): written by the workers,
read by recall (whole, or by the survey script, which divides by the same scale)."""

from __future__ import annotations

POSTING_TF_SCALE = 1e10


def posting_score(tf: int, created_at: float) -> float:
    """A posting's score in a term's sorted set: term frequency first, then recency (of
    creation), so the best postings of a very common term can be read without reading them
    all. Exact in a double: tf < 2**20 and the time < 10**10 s (millisecond resolution)."""
    return tf * POSTING_TF_SCALE + created_at


def posting_tf(score: float) -> int:
    return int(score // POSTING_TF_SCALE)
