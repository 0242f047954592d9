"""Candidate retrieval for recall: what to rank, read from the indexes the workers keep.

A recall never scans an owner's memories. It reads, per owner in scope:

- the owner's statistics (memory count, term total, token totals overall and per type),
  which give BM25 its corpus numbers and the baseline (what injecting every memory that
  passes the filters would cost) without touching a single memory;
- the postings of each query term. A term's postings are ordered by term frequency, then
  creation time (see ``store.postings.posting_score``), so a rare term is read whole and a
  very common one only up to ``postings_limit`` best postings;
- the most recent memories, so an empty query still recalls something, and a recent
  memory is scored even when a term's best postings left it out (with query terms, only
  those holding one are read: the others could not score above zero);
- when the scope filters by type, tag, time or key prefix and the filtered set is small,
  that set itself: selective filters then never lose a memory to truncated postings.

The candidates are then scored in two stages: cheaply on posting data alone, then exactly
(with the memory's recall card: feedback, type, tags, update time) for the best of them.
Without a filter, all of it up to stage two is one script call (``recall_survey.lua``): stage
one runs next to the postings, so only the memories stage two needs cross the network,
and they come in the same round trip.

Over 500 lines on purpose: the two routes to candidates (the survey script, the filtered
set) end in one ``_finish`` and share the corpus, filter and row-decoding helpers; split,
each half would import the other's private steps.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ResponseError
from redis.typing import EncodableT

from zeromem.lifecycle.crypto import is_sealed
from zeromem.lifecycle.vault import open_blobs
from zeromem.recall.ranking import CandidateFeatures, CorpusStats, RankingConfig, idf
from zeromem.schemas import MemoryItem, MemoryType, RecallScope, owner_of
from zeromem.store import scripts
from zeromem.store.card import Card, card_of, decode_card
from zeromem.store.keys import (
    CARD_FIELD,
    DATA_FIELD,
    STAT_LENGTH,
    STAT_MEMORIES,
    STAT_TOKENS,
    RedisKeys,
    stat_tokens_of_type,
    token_field,
)
from zeromem.store.postings import POSTING_TF_SCALE, posting_tf
from zeromem.store.replies import as_text
from zeromem.store.text import is_field_term
from zeromem.store.tokens import DEFAULT_ENCODING, count_tokens

POSTINGS_LIMIT = 200  # postings read per (owner, term) at most
RECENT_LIMIT = 20  # most recent memories per owner always considered
NEIGHBOUR_EXPAND = 24  # best stage-one candidates whose time-neighbours are read too
DATED_LIMIT = 200  # memories per owner from a date the query names, considered at most
ENUMERATE_LIMIT = 5000  # a filtered set up to this size is read whole
STAGE_TWO_MIN = 32  # candidates scored exactly, at least (more for a larger k)

_ITEM_DECODER = msgspec.msgpack.Decoder(MemoryItem)


@dataclass(slots=True)
class Gathered:
    features: list[CandidateFeatures]
    items: dict[str, Card]
    stats: CorpusStats
    baseline_tokens: int
    baseline_estimated: bool
    considered: int  # distinct memories looked at, stage one included
    stage_one_cut: list[tuple[str, float]] = field(default_factory=list)
    # key -> its time-neighbours in its owner (for the best stage-one candidates)
    neighbours: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Filters:
    types: frozenset[str]
    tags: frozenset[str]
    since: float | None
    until: float | None
    prefix: str

    @classmethod
    def of(cls, scope: RecallScope, window_s: float | None, now: float) -> Filters:
        since = scope.since
        if window_s is not None:
            since = max(since or 0.0, now - window_s)
        return cls(
            frozenset(t.value for t in scope.types),
            frozenset(scope.tags),
            since,
            scope.until,
            scope.prefix,
        )

    @property
    def any(self) -> bool:
        return bool(self.types or self.tags or self.since or self.until or self.prefix)

    def admits(self, item: MemoryItem) -> bool:
        return self.admits_card(item.key, card_of(item))

    def admits_card(self, key: str, card: Card) -> bool:
        if self.types and card.type not in self.types:
            return False
        if self.tags and self.tags.isdisjoint(card.tags):
            return False
        if self.since is not None and card.updated_at < self.since:
            return False
        if self.until is not None and card.updated_at > self.until:
            return False
        return not (self.prefix and not key.startswith(self.prefix))


async def gather(
    redis: Redis,
    tenant: str,
    owners: Sequence[str],
    query_terms: Sequence[str],
    filters: Filters,
    *,
    k: int,
    encoding: str,
    config: RankingConfig,
    now: float | None = None,
    explain: bool = False,
    date_range: tuple[float, float] | None = None,
    owners_per_call: int = 1,
    calls_at_once: int = 4,
    term_weights: Mapping[str, float] | None = None,
) -> Gathered:
    """``term_weights``: a factor for some query terms (expanded ones, see
    ``recall.expansion``), on top of the speaker weight. ``owners_per_call``: owners one
    Redis script call covers at most (``Limits.recall_owners_per_call``); a recall over
    more is split (see ``_split_survey``) into calls sent ``calls_at_once`` at a time
    (``Limits.recall_calls_at_once``)."""
    now = time.time() if now is None else now
    keys = RedisKeys(tenant)
    keep_n = max(STAGE_TWO_MIN, 8 * k)
    factors = _term_factors(query_terms, config, term_weights or {})

    async def survey_over(dates: tuple[float, float] | None) -> Survey:
        """The survey of this recall (with the memories of ``dates``, if any)."""
        return await _survey(
            redis,
            keys,
            owners,
            query_terms,
            keep_n,
            config,
            explain,
            encoding,
            dates,
            owners_per_call,
            calls_at_once,
            factors,
        )

    if not filters.any:
        # The common case in one round trip: statistics, stage one, and stage two's memories,
        # with the time-neighbours of the best and the memories of a date the query names.
        survey = await survey_over(date_range)
        stats, _, _ = _corpus(owners, query_terms, survey.owner_stats, survey.df)
        gathered = await _finish(
            redis,
            keys,
            owners,
            filters,
            survey.chosen,
            survey.rows,
            survey.stage_one_cut,
            survey.tf,
            stats,
            survey.owner_stats,
            None,
            0,
            encoding,
            now,
        )
        gathered.neighbours = survey.neighbours
        return gathered

    # Round trip 1: statistics, document frequencies, and the size of each filter.
    async with redis.pipeline(transaction=False) as pipe:
        for owner in owners:
            pipe.hgetall(keys.owner_stats(owner))
        for owner in owners:
            for term in query_terms:
                pipe.zcard(keys.by_term(owner, term))
        filter_sizes = _queue_filter_sizes(pipe, keys, owners, filters)
        replies = await pipe.execute()
    owner_stats = [{k.decode(): int(v) for k, v in r.items()} for r in replies[: len(owners)]]
    pos = len(owners)
    df_by_owner_term: dict[tuple[str, str], int] = {}
    for owner in owners:
        for term in query_terms:
            df_by_owner_term[(owner, term)] = replies[pos]
            pos += 1
    sizes = replies[pos : pos + filter_sizes]

    stats, df, n_docs = _corpus(owners, query_terms, owner_stats, df_by_owner_term)
    filtered_total = sum(sizes) if sizes else 0
    enumerate_filtered = filters.any and len(sizes) > 0 and filtered_total <= ENUMERATE_LIMIT
    if filters.any and sizes and filtered_total == 0:
        return Gathered([], {}, stats, 0, False, 0)

    if not enumerate_filtered:
        survey = await survey_over(None)
        return await _finish(
            redis,
            keys,
            owners,
            filters,
            survey.chosen,
            survey.rows,
            survey.stage_one_cut,
            survey.tf,
            stats,
            owner_stats,
            None,
            filtered_total,
            encoding,
            now,
        )

    posting_plan = [
        (owner, term) for owner in owners for term in query_terms if df_by_owner_term[(owner, term)]
    ]
    tf: dict[str, dict[str, int]] = {}
    chosen, stage_one_cut = await _from_filtered_set(
        redis, keys, owners, filters, posting_plan, df, n_docs, now, config, keep_n, tf, factors
    )
    rows = await _fetch_rows(redis, keys, sorted(chosen), encoding)
    return await _finish(
        redis,
        keys,
        owners,
        filters,
        len(chosen),
        rows,
        stage_one_cut,
        tf,
        stats,
        owner_stats,
        chosen | {key for key, _ in stage_one_cut},
        filtered_total,
        encoding,
        now,
    )


def _corpus(
    owners: Sequence[str],
    query_terms: Sequence[str],
    owner_stats: list[dict[str, int]],
    df_by_owner_term: dict[tuple[str, str], int],
) -> tuple[CorpusStats, dict[str, int], int]:
    n_docs = sum(s.get(STAT_MEMORIES, 0) for s in owner_stats)
    total_len = sum(s.get(STAT_LENGTH, 0) for s in owner_stats)
    df = {t: sum(df_by_owner_term[(o, t)] for o in owners) for t in query_terms}
    return (
        CorpusStats(n_docs=n_docs, avg_len=total_len / n_docs if n_docs else 0.0, df=df),
        df,
        n_docs,
    )


async def _finish(
    redis: Redis,
    keys: RedisKeys,
    owners: Sequence[str],
    filters: Filters,
    chosen: int,
    rows: list[Any],
    stage_one_cut: list[tuple[str, float]],
    tf: dict[str, dict[str, int]],
    stats: CorpusStats,
    owner_stats: list[dict[str, int]],
    enumerated: set[str] | None,
    filtered_total: int,
    encoding: str,
    now: float,
) -> Gathered:
    """Stage two's inputs from the memories read for it (``rows``)."""
    read = await _decode_rows(redis, keys, rows, encoding, now)
    # Ordered by key, whatever order the memories were read in: ranking sees the same list.
    features: list[CandidateFeatures] = []
    items: dict[str, Card] = {}
    no_tf: dict[str, int] = {}
    admits = filters.admits_card if filters.any else None
    for key in sorted(read):
        card, liked, disliked, important, tokens, doc_len = read[key]
        if admits is not None and not admits(key, card):
            continue
        items[key] = card
        features.append(
            CandidateFeatures(
                key,
                card.updated_at,
                doc_len,
                tf.get(key, no_tf),
                liked,
                disliked,
                important,
                card.type,
                card.tags,
                tokens,
            )
        )

    baseline, estimated = await _baseline(
        redis, keys, owners, owner_stats, filters, enumerated, filtered_total, encoding, now
    )
    return Gathered(
        features,
        items,
        stats,
        baseline,
        estimated,
        considered=chosen + len(stage_one_cut),
        stage_one_cut=stage_one_cut,
    )


def _weights(
    df: dict[str, int], n_docs: int, config: RankingConfig, factors: Mapping[str, float]
) -> dict[str, float]:
    return {t: idf(d, n_docs) * (config.k1 + 1.0) * factors.get(t, 1.0) for t, d in df.items()}


def _term_factors(
    terms: Sequence[str], config: RankingConfig, term_weights: Mapping[str, float]
) -> dict[str, float]:
    """What each term's BM25 weight is multiplied by: speaker_weight for a speaker term,
    its ``term_weights`` entry (an expanded term), otherwise 1."""
    return {
        term: config.speaker_weight if is_field_term(term) else term_weights.get(term, 1.0)
        for term in terms
    }


@dataclass(slots=True)
class Survey:
    """What the survey script found: the owners' statistics, each (owner, term)'s document
    frequency, the memories stage one chose (``chosen`` of them; ``rows`` holds those
    still there, read for stage two), their query-term frequencies, and, for an explain
    view, the memories stage one cut with their estimates, best first."""

    owner_stats: list[dict[str, int]]
    df: dict[tuple[str, str], int]
    chosen: int
    rows: list[Any]
    tf: dict[str, dict[str, int]]
    stage_one_cut: list[tuple[str, float]]
    neighbours: dict[str, list[str]]


async def _survey(
    redis: Redis,
    keys: RedisKeys,
    owners: Sequence[str],
    terms: Sequence[str],
    keep_n: int,
    config: RankingConfig,
    explain: bool,
    encoding: str,
    date_range: tuple[float, float] | None = None,
    owners_per_call: int = 1,
    calls_at_once: int = 4,
    factors: Mapping[str, float] | None = None,
) -> Survey:
    factors = factors if factors is not None else _term_factors(terms, config, {})
    expand = NEIGHBOUR_EXPAND if config.neighbour_share > 0.0 else 0
    low, high = (repr(date_range[0]), repr(date_range[1])) if date_range else ("", "")
    if len(owners) > max(owners_per_call, 1) or len({keys.shard_of(o) for o in owners}) > 1:
        # more owners than one call may cover, or (on a Redis Cluster) owners whose
        # indexes are in the slots of different shards: one call per group
        return await _split_survey(
            redis,
            keys,
            owners,
            terms,
            keep_n,
            config,
            explain,
            encoding,
            (low, high),
            expand,
            max(owners_per_call, 1),
            max(calls_at_once, 1),
            factors,
        )
    args: list[EncodableT] = [
        POSTINGS_LIMIT,
        RECENT_LIMIT,
        keep_n,
        repr(config.k1),
        repr(POSTING_TF_SCALE),
        "1" if explain else "0",
        token_field(encoding),
        keys.item_prefix(owners[0]) if owners else keys.item_prefix(""),
        len(owners),
        len(terms),
        expand,
        repr(config.neighbour_gap_s),
        low,
        high,
        DATED_LIMIT,
    ]
    args += [repr(factors[term]) for term in terms]
    args += list(owners)
    rkeys = [keys.owner_stats(owner) for owner in owners]
    rkeys += [keys.by_time(owner) for owner in owners]
    rkeys += [keys.by_term(owner, term) for owner in owners for term in terms]
    rkeys += [keys.by_type(owner, MemoryType.MESSAGE.value) for owner in owners]
    survey = await scripts.RECALL_SURVEY(redis, rkeys, args)
    stats_raw, dfs, rows, tf_flat, cut_flat, chosen, near = survey
    owner_stats = [
        {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)} for flat in stats_raw
    ]
    df_by_owner_term: dict[tuple[str, str], int] = {}
    i = 0
    for owner in owners:
        for term in terms:
            df_by_owner_term[(owner, term)] = dfs[i]
            i += 1
    tf: dict[str, dict[str, int]] = {}
    for j in range(0, len(tf_flat), 2):
        pairs = tf_flat[j + 1]
        tf[tf_flat[j].decode()] = {
            terms[pairs[p] - 1]: pairs[p + 1] for p in range(0, len(pairs), 2)
        }
    # Best first; ties go to the smaller key, byte for byte (ordered here: a script's
    # string order would follow the server's locale).
    cut = sorted(
        ((cut_flat[j], float(cut_flat[j + 1])) for j in range(0, len(cut_flat), 2)),
        key=lambda pair: (-pair[1], pair[0]),
    )
    neighbours: dict[str, list[str]] = {}
    for j in range(0, len(near), 2):
        neighbours.setdefault(near[j].decode(), []).append(near[j + 1].decode())
    return Survey(
        owner_stats,
        df_by_owner_term,
        chosen,
        rows,
        tf,
        [(m.decode(), e) for m, e in cut],
        neighbours,
    )


@dataclass(slots=True)
class _Candidate:
    """A memory a stage-one call found: its estimate, creation time, and place in the
    order the one-call survey would have found it (call, then order within the call)."""

    member: bytes
    estimate: float
    created: float
    found: tuple[int, int]


async def _split_survey(
    redis: Redis,
    keys: RedisKeys,
    owners: Sequence[str],
    terms: Sequence[str],
    keep_n: int,
    config: RankingConfig,
    explain: bool,
    encoding: str,
    dates: tuple[str, str],
    expand: int,
    per_call: int,
    at_once: int,
    factors: Mapping[str, float],
) -> Survey:
    """The survey of a recall over more owners than one script call may cover, as several
    calls that each hold Redis for one group of owners (one survey over sixteen owners of
    500 memories held it for 76 ms, delaying every other tenant's command as long), with
    the same result as the one call: the statistics by plain commands; stage one per group
    with every owner's corpus numbers (``recall_stage_one.lua``: each group's best, which
    hold the best of all); the merge here in the survey's own order; the time-neighbours
    (``recall_neighbours.lua``); the chosen memories and their term frequencies per group
    (``recall_stage_two.lua``). The calls go a few at a time, each on its own connection,
    so Redis serves other clients between them (see ``_in_waves``). Unlike the one call,
    the groups are not read at one instant.
    """
    async with redis.pipeline(transaction=False) as pipe:
        for owner in owners:
            pipe.hgetall(keys.owner_stats(owner))
        for owner in owners:
            for term in terms:
                pipe.zcard(keys.by_term(owner, term))
        replies = await pipe.execute()
    owner_stats = [{k.decode(): int(v) for k, v in r.items()} for r in replies[: len(owners)]]
    dfs = iter(replies[len(owners) :])
    df_by_owner_term = {(owner, term): next(dfs) for owner in owners for term in terms}
    n_docs = sum(s.get(STAT_MEMORIES, 0) for s in owner_stats)
    df = [sum(df_by_owner_term[(owner, term)] for owner in owners) for term in terms]
    groups = _groups(keys, owners, per_call)

    pool: list[_Candidate] = []
    recents: list[bytes] = []
    cut: dict[bytes, float] = {}
    n_members = 0
    stage_one = [
        partial(
            scripts.RECALL_STAGE_ONE,
            redis,
            [keys.by_time(owner) for owner in group]
            + [keys.by_term(owner, term) for owner in group for term in terms],
            [
                POSTINGS_LIMIT,
                RECENT_LIMIT,
                keep_n,
                repr(config.k1),
                repr(POSTING_TF_SCALE),
                "1" if explain else "0",
                len(group),
                len(terms),
                n_docs,
                *dates,
                DATED_LIMIT,
                *df,
                *(repr(factors[term]) for term in terms),
            ],
        )
        for group in groups
    ]
    for g, (found, group_recents, group_members, group_cut) in enumerate(
        await _in_waves(stage_one, at_once)
    ):
        pool += [
            _Candidate(found[j], float(found[j + 1]), float(found[j + 2]), (g, j))
            for j in range(0, len(found), 3)
        ]
        for owned in group_recents:
            recents += owned
        n_members += group_members
        cut.update((group_cut[j], float(group_cut[j + 1])) for j in range(0, len(group_cut), 2))

    chosen = _best(pool, n_members, keep_n)
    is_chosen = {c.member for c in chosen}
    recent_set = set(recents)
    everything = n_members + len(recent_set) <= keep_n
    members = [c.member for c in chosen]
    members += [m for m in dict.fromkeys(recents) if m not in is_chosen]
    is_chosen.update(members)
    by_member = {c.member: c for c in pool}
    near: list[bytes] = []
    if expand > 0 and n_members > 0:
        near = await _neighbours(redis, keys, owners, members, by_member, expand, config)
        for other in near[1::4]:
            if other not in is_chosen:
                is_chosen.add(other)
                members.append(other)
    # As the one call does: a recent memory without a query term is read only when the
    # query has no terms, for the explain view, or as a time-neighbour.
    read_all = not terms or explain
    neighbour = set(near[1::4])

    def recent_flag(member: bytes) -> str:
        if member not in recent_set:
            return "0"
        return "1" if read_all or member in neighbour else "2"

    rows: list[Any] = []
    tf: dict[str, dict[str, int]] = {}
    owner_at = {owner: n for n, owner in enumerate(owners)}
    group_of = {owner: g for g, group in enumerate(groups) for owner in group}
    by_group: list[list[tuple[bytes, int]]] = [[] for _ in groups]
    for m in members:  # each member's owner once (not once per group: 16 x 400 decodes)
        owner = owner_of(m.decode())
        place = group_of.get(owner)
        if place is not None:
            by_group[place].append((m, owner_at[owner] - owner_at[groups[place][0]]))
    stage_two = []
    for group, mine in zip(groups, by_group, strict=True):
        if mine:
            stage_two.append(
                partial(
                    scripts.RECALL_STAGE_TWO,
                    redis,
                    [keys.by_term(owner, term) for owner in group for term in terms]
                    + [keys.item(m.decode()) for m, _ in mine],
                    [
                        token_field(encoding),
                        POSTINGS_LIMIT,
                        repr(POSTING_TF_SCALE),
                        len(group),
                        len(terms),
                        *(v for m, o in mine for v in (m, o + 1, recent_flag(m))),
                    ],
                )
            )
    for group_rows, tf_flat in await _in_waves(stage_two, at_once):
        rows += group_rows
        for j in range(0, len(tf_flat), 2):
            pairs = tf_flat[j + 1]
            tf[tf_flat[j].decode()] = {
                terms[pairs[p] - 1]: pairs[p + 1] for p in range(0, len(pairs), 2)
            }

    stage_one_cut: list[tuple[str, float]] = []
    if explain and not everything:
        cut.update((c.member, c.estimate) for c in pool)
        stage_one_cut = [
            (m.decode(), e)
            for m, e in sorted(cut.items(), key=lambda pair: (-pair[1], pair[0]))
            if m not in is_chosen
        ]
    neighbours: dict[str, list[str]] = {}
    for j in range(0, len(near), 2):
        neighbours.setdefault(near[j].decode(), []).append(near[j + 1].decode())
    return Survey(owner_stats, df_by_owner_term, len(members), rows, tf, stage_one_cut, neighbours)


def _groups(keys: RedisKeys, owners: Sequence[str], per_call: int) -> list[Sequence[str]]:
    """The owners in groups of at most ``per_call``; on a Redis Cluster each group within
    one shard (one call's keys must share a slot), the shards in order of first owner."""
    by_piece: dict[int, list[str]] = {}
    for owner in owners:
        by_piece.setdefault(keys.shard_of(owner), []).append(owner)
    return [
        piece[i : i + per_call]
        for piece in by_piece.values()
        for i in range(0, len(piece), per_call)
    ]


async def _neighbours(
    redis: Redis,
    keys: RedisKeys,
    owners: Sequence[str],
    members: list[bytes],
    by_member: dict[bytes, _Candidate],
    expand: int,
    config: RankingConfig,
) -> list[bytes]:
    """recall_neighbours.lua over ``owners``: one call, or on a Redis Cluster one per
    shard of the owners, each with the chosen memories of its owners. There each call
    expands up to ``expand`` of its own best turns; the pairs of the ``expand`` best turns
    overall are kept, so the turns expanded are the one call's whenever every shard holds
    ``expand`` turns with neighbours (a shard with fewer leaves the rest unexpanded)."""
    by_piece: dict[int, list[str]] = {}
    for owner in owners:
        by_piece.setdefault(keys.shard_of(owner), []).append(owner)
    near: list[bytes] = []
    for group in by_piece.values():
        mine = set(group)
        near += await scripts.RECALL_NEIGHBOURS(
            redis,
            [keys.by_time(owner) for owner in group]
            + [keys.by_type(owner, MemoryType.MESSAGE.value) for owner in group],
            [
                expand,
                repr(config.neighbour_gap_s),
                len(group),
                *group,
                *(
                    value
                    for m in members
                    if m in by_member and owner_of(m.decode()) in mine
                    for value in (m, f"{by_member[m].estimate:.17g}")
                ),
            ],
        )
    if len(by_piece) == 1:
        return near
    expanded = sorted(
        {near[j] for j in range(0, len(near), 2)},
        key=lambda m: (-by_member[m].estimate if m in by_member else 0.0, m),
    )[:expand]
    keep = set(expanded)
    return [v for j in range(0, len(near), 2) if near[j] in keep for v in near[j : j + 2]]


def _best(pool: list[_Candidate], n_members: int, keep: int) -> list[_Candidate]:
    """The ``keep`` best of all the owners, in the order recall_survey.lua's best() gives
    them: everything in the order found when it all fits; otherwise those above the
    threshold estimate in the order found, then those at it by (created, key) descending."""
    in_order = sorted(pool, key=lambda c: c.found)
    if n_members <= keep:
        return in_order
    ranked = sorted(pool, key=lambda c: (c.estimate, c.created, c.member), reverse=True)
    threshold = ranked[keep - 1].estimate
    above = [c for c in in_order if c.estimate > threshold]
    tied = [c for c in ranked if c.estimate == threshold]
    return above + tied[: keep - len(above)]


async def _in_waves(calls: Sequence[Callable[[], Awaitable[Any]]], at_once: int) -> list[Any]:
    """The calls' replies in order, ``at_once`` of them sent together at a time, each on a
    connection of its own: Redis serves its other clients between them (it runs a
    connection's pipelined commands back to back), and no more than ``at_once`` of one
    recall's calls are ever queued ahead of another client's command."""
    out: list[Any] = []
    for i in range(0, len(calls), at_once):
        out += await asyncio.gather(*(call() for call in calls[i : i + at_once]))
    return out


async def _from_filtered_set(
    redis: Redis,
    keys: RedisKeys,
    owners: Sequence[str],
    filters: Filters,
    posting_plan: list[tuple[str, str]],
    df: dict[str, int],
    n_docs: int,
    now: float,
    config: RankingConfig,
    keep_n: int,
    tf: dict[str, dict[str, int]],
    factors: Mapping[str, float],
) -> tuple[set[str], list[tuple[str, float]]]:
    """A small filtered set is read whole and every member's term frequencies looked up,
    so a selective filter never loses a memory to truncated postings."""
    plan: list[tuple[str, str, str]] = []
    async with redis.pipeline(transaction=False) as pipe:
        _queue_filter_members(pipe, keys, owners, filters, plan)
        replies = await pipe.execute()
    allowed = _resolve_filter_sets(plan, replies, set(owners))
    await _term_frequencies(redis, keys, posting_plan, sorted(allowed), tf)
    if len(allowed) <= keep_n:
        return allowed, []
    weights = _weights(df, n_docs, config, factors)
    estimate = {
        key: sum(weights[t] * f / (f + config.k1) for t, f in tf.get(key, {}).items())
        for key in allowed
    }
    ordered = sorted(allowed, key=lambda key: (-estimate[key], key))
    return set(ordered[:keep_n]), [(key, estimate[key]) for key in ordered[keep_n:]]


async def _term_frequencies(
    redis: Redis,
    keys: RedisKeys,
    posting_plan: list[tuple[str, str]],
    members: list[str],
    tf: dict[str, dict[str, int]],
) -> None:
    by_owner: dict[str, list[str]] = {}
    for key in members:
        by_owner.setdefault(owner_of(key), []).append(key)
    queries = [(owner, term, by_owner[owner]) for owner, term in posting_plan if owner in by_owner]
    if not queries:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for owner, term, owned in queries:
            pipe.zmscore(keys.by_term(owner, term), owned)
        replies = await pipe.execute()
    for (_owner, term, owned), scores in zip(queries, replies, strict=True):
        for key, score in zip(owned, scores, strict=True):
            if score is not None:
                tf.setdefault(key, {})[term] = posting_tf(score)


async def fetch_items(
    redis: Redis, tenant: str, keys_: Iterable[str], encoding: str, now: float
) -> dict[str, Card]:
    """The recall cards of the live memories among ``keys_``."""
    keys = RedisKeys(tenant)
    rows = await _fetch_rows(redis, keys, keys_, encoding)
    read = await _decode_rows(redis, keys, rows, encoding, now)
    return {key: entry[0] for key, entry in read.items()}


async def _fetch_rows(
    redis: Redis, keys: RedisKeys, keys_: Iterable[str], encoding: str
) -> list[Any]:
    members = list(keys_)
    if not keys.layout.cluster:
        rkeys = [keys.item(key) for key in members]
        rows: list[Any] = await scripts.RECALL_FETCH(
            redis, rkeys, [token_field(encoding), *members]
        )
        return rows
    # A Redis Cluster: one call per shard of the memories (each call within one slot).
    by_piece: dict[int, list[str]] = {}
    for key in members:
        by_piece.setdefault(keys.shard_of(owner_of(key)), []).append(key)
    rows = []
    for mine in by_piece.values():
        rows += await scripts.RECALL_FETCH(
            redis, [keys.item(key) for key in mine], [token_field(encoding), *mine]
        )
    return rows


_Read = tuple[Card, int, int, int, int, int]  # card, liked, disliked, important, tokens, length


async def _decode_rows(
    redis: Redis, keys: RedisKeys, rows: list[Any], encoding: str, now: float
) -> dict[str, _Read]:
    """Live memories from the scripts' rows (see ``store/recall_read.lua``), with their feedback,
    their token count in ``encoding`` and their document length. A count missing for
    this encoding is computed and cached."""
    out: dict[str, _Read] = {}
    missing: list[tuple[str, int]] = []
    decode_item = _ITEM_DECODER.decode
    blobs = rows[2::_ROW]
    # Memories encrypted at rest (``lifecycle.vault``): their card or item opened first;
    # one whose owner was forgotten is left out. Nothing to do for ordinary ones.
    opened = await open_blobs(
        redis,
        keys.tenant,
        [
            (member.decode(), CARD_FIELD if from_card else DATA_FIELD, blob)
            for member, from_card, blob in zip(rows[0::_ROW], rows[1::_ROW], blobs, strict=True)
        ]
        if any(map(is_sealed, blobs))
        else [],
    )
    # One row is _ROW consecutive values; striding beats slicing row by row.
    for n, (member, from_card, blob, fl, fd, fi, tk, dl) in enumerate(
        zip(*(rows[i::_ROW] for i in range(_ROW)), strict=True)
    ):
        if opened and n in opened:
            blob = opened[n]
            if blob is None:
                continue
        if from_card:
            card = decode_card(blob)
            liked = int(fl) if fl else 0
            disliked = int(fd) if fd else 0
            important = int(fi) if fi else 0
        else:
            # No card for this version: the memory whole, as it was stored.
            item = decode_item(blob)
            card = card_of(item)
            if fl or fd or fi:
                liked, disliked, important = int(fl or 0), int(fd or 0), int(fi or 0)
            else:
                fb = item.feedback
                liked, disliked, important = fb.liked, fb.disliked, fb.important
        expires_at = card.expires_at
        if expires_at is not None and expires_at <= now:
            continue
        key = member.decode()
        if tk is None:
            tokens = count_tokens(card.content, encoding)
            missing.append((key, tokens))
        else:
            tokens = int(tk)
        out[key] = (card, liked, disliked, important, tokens, int(dl) if dl else 0)
    if missing:
        cached_field = token_field(encoding)
        try:
            async with redis.pipeline(transaction=False) as pipe:
                for key, count in missing:
                    # only while the memory exists: never resurrect a hash the reaper removed
                    scripts.CACHE_TOKENS.queue(pipe, [keys.item(key)], [cached_field, count])
                await pipe.execute()
        except ResponseError as exc:
            # A read service's Redis user may not write memories (docs/security.md): the
            # count is only a cache, the workers keep the default encoding's.
            if "NOPERM" not in str(exc):
                raise
    return out


_ROW = 8  # values per memory in the rows the recall scripts return (recall_read.lua)


# --- filters ---------------------------------------------------------------------------


def _filter_queries(
    keys: RedisKeys, owners: Sequence[str], filters: Filters
) -> list[tuple[str, str, str, str]]:
    """(kind, owner, redis key, value) for every set a filter reads."""
    out: list[tuple[str, str, str, str]] = []
    for owner in owners:
        out += [("type", owner, keys.by_type(owner, t), t) for t in sorted(filters.types)]
        out += [("tag", owner, keys.by_tag(owner, t), t) for t in sorted(filters.tags)]
        if filters.since is not None or filters.until is not None:
            out.append(("time", owner, keys.by_time(owner), ""))
    if filters.prefix:  # every piece of the tenant's live keys (one on one Redis)
        out += [("prefix", "", keys.keys(p), filters.prefix) for p in keys.layout.pieces]
    return out


def _time_bounds(filters: Filters) -> tuple[str, str]:
    low = "-inf" if filters.since is None else repr(filters.since)
    high = "+inf" if filters.until is None else repr(filters.until)
    return low, high


def _queue_filter_sizes(
    pipe: Pipeline, keys: RedisKeys, owners: Sequence[str], filters: Filters
) -> int:
    queries = _filter_queries(keys, owners, filters)
    for kind, _owner, rkey, value in queries:
        if kind in ("type", "tag"):
            pipe.scard(rkey)
        elif kind == "time":
            pipe.zcount(rkey, *_time_bounds(filters))
        else:
            pipe.zlexcount(rkey, "[" + value, "[" + value + "\xff")
    return len(queries)


def _queue_filter_members(
    pipe: Pipeline,
    keys: RedisKeys,
    owners: Sequence[str],
    filters: Filters,
    plan: list[tuple[str, str, str]],
) -> None:
    for kind, owner, rkey, value in _filter_queries(keys, owners, filters):
        if kind in ("type", "tag"):
            pipe.smembers(rkey)
        elif kind == "time":
            pipe.zrangebyscore(rkey, *_time_bounds(filters))
        else:
            pipe.zrangebylex(rkey, "[" + value, "[" + value + "\xff")
        plan.append((kind, owner, value))


def _resolve_filter_sets(
    plan: list[tuple[str, str, str]], replies: Sequence[Iterable[object]], owners: set[str]
) -> set[str]:
    """Within a kind, values are alternatives (any of the types, any of the tags) and
    owners add up; across kinds every filter must hold; nothing outside the owners."""
    by_kind: dict[str, set[str]] = {}
    for (kind, _owner, _value), reply in zip(plan, replies, strict=False):
        if kind in ("term", "recent"):
            continue
        members = {as_text(m) for m in reply}
        by_kind.setdefault(kind, set()).update(members)
    sets = list(by_kind.values())
    result = sets[0] if sets else set()
    for other in sets[1:]:
        result &= other
    return {key for key in result if owner_of(key) in owners}


async def _baseline(
    redis: Redis,
    keys: RedisKeys,
    owners: Sequence[str],
    owner_stats: list[dict[str, int]],
    filters: Filters,
    enumerated: set[str] | None,
    filtered_total: int,
    encoding: str,
    now: float,
) -> tuple[int, bool]:
    """Tokens of every memory that passes the filters, and whether that is an estimate.

    Exact from the owner statistics when nothing but types filter; exact from the filtered
    set when it was small enough to read; otherwise the filtered count times the scope's
    mean tokens per memory (flagged as an estimate).
    """
    if not filters.any:
        return sum(s.get(STAT_TOKENS, 0) for s in owner_stats), False
    if not (filters.tags or filters.since or filters.until or filters.prefix):
        return (
            sum(s.get(stat_tokens_of_type(t), 0) for s in owner_stats for t in filters.types),
            False,
        )
    if enumerated is not None:
        # Token counts as the workers cache them (their encoding): exact for that encoding.
        async with redis.pipeline(transaction=False) as pipe:
            for key in enumerated:
                pipe.hget(keys.item(key), token_field(DEFAULT_ENCODING))
            replies = await pipe.execute()
        return sum(int(tk or 0) for tk in replies), encoding != DEFAULT_ENCODING
    n = sum(s.get(STAT_MEMORIES, 0) for s in owner_stats)
    mean = sum(s.get(STAT_TOKENS, 0) for s in owner_stats) / n if n else 0.0
    return math.ceil(filtered_total * mean), True
