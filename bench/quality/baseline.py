"""A plain BM25 over whole turns: the baseline the quality bench compares recall with.

Written here, independently of ``zeromem.recall``, the way a team would set up a lexical
baseline: each turn is one document, speaker name included as a word (``"Mara: I ..."``),
lowercased, split on anything that is not a letter or a digit, a standard English stop
list removed, Snowball-stemmed (PyStemmer), scored with Okapi BM25 (k1 = 1.2, b = 0.75)
over the turns of the question's conversation. For a budget it injects turns in rank order,
each as the line recall would render (date, type, owner) with the turn's first 200
characters, while they fit.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import Stemmer

K1 = 1.2
B = 0.75
CUT_CHARS = 200

# The usual English stop list of IR toolkits (Lucene/NLTK style), a little larger than the
# project's own.
_STOP_WORDS = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself
just me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves
"""
STOP = frozenset(_STOP_WORDS.split())
_WORD = re.compile(r"[a-z0-9]+")
_STEM = Stemmer.Stemmer("english")


def analyse(text: str) -> list[str]:
    words = [w for w in _WORD.findall(text.lower().replace("'", "")) if w not in STOP]
    return _STEM.stemWords(words)


@dataclass(frozen=True, slots=True)
class Doc:
    key: str
    text: str
    at: float


class BM25:
    """One conversation's index."""

    def __init__(self, docs: Sequence[Doc]) -> None:
        self.docs = list(docs)
        self.tfs = [Counter(analyse(d.text)) for d in self.docs]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.avg = sum(self.lengths) / max(1, len(self.lengths))
        self.df: Counter[str] = Counter()
        for tf in self.tfs:
            self.df.update(tf.keys())

    def rank(self, query: str) -> list[Doc]:
        """Documents matching any query term, best first (ties: newest first)."""
        n = len(self.docs)
        terms = set(analyse(query))
        idf = {t: math.log(1 + (n - self.df[t] + 0.5) / (self.df[t] + 0.5)) for t in terms}
        scored = []
        for i, tf in enumerate(self.tfs):
            s = 0.0
            norm = K1 * (1 - B + B * self.lengths[i] / self.avg)
            for t in terms:
                f = tf.get(t, 0)
                if f:
                    s += idf[t] * f * (K1 + 1) / (f + norm)
            if s > 0:
                scored.append((s, self.docs[i].at, i))
        scored.sort(reverse=True)
        return [self.docs[i] for _, _, i in scored]


def cut(text: str) -> str:
    """The first 200 characters, at a word boundary."""
    flat = " ".join(text.split())
    if len(flat) <= CUT_CHARS:
        return flat
    head = flat[: CUT_CHARS - 1]
    return head[: head.rfind(" ")] + "…" if " " in head else head + "…"


def pack(
    ranked: Sequence[Doc],
    budget: int,
    line_of: Callable[[Doc], str],
    count: Callable[[str], int],
    k: int = 100,
) -> tuple[list[str], int]:
    """Keys and tokens of the turns injected in rank order while they fit."""
    kept: list[str] = []
    used = 0
    for doc in ranked[:k]:
        cost = count(line_of(doc))
        if used + cost > budget:
            continue  # as recall's packer: a smaller one further down may still fit
        kept.append(doc.key)
        used += cost
    return kept, used
