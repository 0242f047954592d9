"""The scores of recall's inverted index (``RedisKeys.by_term``): written by the workers,
read by recall (whole, or by the survey script, which divides by the same scale)."""

from __future__ import annotations

POSTING_TF_SCALE = 1e10


def posting_score(tf: int, created_at: float) -> int:
    """A posting's score in a term's sorted set: term frequency first, then recency (of
    creation, in whole seconds), so the best postings of a very common term can be read
    without reading them all. Exact in a double: tf < 2**19 and the time < 10**10 s.

    An integer on purpose. Most posting lists are small sorted sets, which Redis keeps as
    a listpack: a ZADD walks it to the new member's place, reading each score on the way,
    and a score stored as an integer is read as one while any other is parsed from its
    text (strtod, about a tenth of Redis's CPU on the append workload, perf). With
    fractional seconds Redis spent 310 µs of main-thread CPU per append, with whole
    seconds 225 µs (the engine and the commit script alone, three alternating runs on a
    loaded machine). Readers are unchanged: the creation time they
    take from the score only orders postings of equal tf, and within one second they now
    fall back to the key, as they did for equal times. Postings written with fractional
    seconds before this read the same way."""
    return tf * 10_000_000_000 + int(created_at)


def posting_tf(score: float) -> int:
    return int(score // POSTING_TF_SCALE)
