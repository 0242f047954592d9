"""``Ranking``: scored candidates in rank order, ordered and built lazily (a recall reads
a handful of positions out of thousands)."""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, overload

from zeromem.recall.factors import (
    CandidateFeatures,
    RankingConfig,
    ScoredCandidate,
    feedback_weight,
    time_decay,
)


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

    def features_at(self, position: int) -> CandidateFeatures:
        """The features of the candidate at ``position`` without building a
        ``ScoredCandidate``."""
        if position >= self._final:
            self._finalise(position)
        return self._feats[self._order[position]]

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
