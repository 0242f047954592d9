"""Candidate retrieval for recall: what to rank, read from the indexes the workers keep.

A recall never scans an owner's memories. It reads, per owner in scope:

- the owner's statistics (memory count, term total, token totals overall and per type),
  which give BM25 its corpus numbers and the baseline (what injecting every memory that
  passes the filters would cost) without touching a single memory;
- the postings of each query term. A term's postings are ordered by term frequency, then
  creation time (see ``worker.engine.posting_score``), so a rare term is read whole and a
  very common one only up to ``postings_limit`` best postings;
- the most recent memories, so an empty or unmatched query still recalls something;
- when the scope filters by type, tag, time or key prefix and the filtered set is small,
  that set itself: selective filters then never lose a memory to truncated postings.

The candidates are then scored in two stages: cheaply on posting data alone, then exactly
(with the stored memory: feedback, type, tags, update time) for the best of them.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec
from redis.asyncio import Redis

from zeromem import naming
from zeromem.recall.ranking import CandidateFeatures, CorpusStats, RankingConfig, idf
from zeromem.recall.tokens import count_tokens
from zeromem.schemas import FeedbackCounts, MemoryItem, RecallScope, owner_of
from zeromem.worker.engine import POSTING_TF_SCALE, posting_tf

POSTINGS_LIMIT = 200  # postings read per (owner, term) at most
RECENT_LIMIT = 20  # most recent memories per owner always considered
ENUMERATE_LIMIT = 5000  # a filtered set up to this size is read whole
STAGE_TWO_MIN = 32  # candidates scored exactly, at least (more for a larger k)

_ITEM_DECODER = msgspec.msgpack.Decoder(MemoryItem)


@dataclass(slots=True)
class Gathered:
    features: list[CandidateFeatures]
    items: dict[str, MemoryItem]
    stats: CorpusStats
    baseline_tokens: int
    baseline_estimated: bool
    considered: int  # distinct memories looked at, stage one included
    stage_one_cut: list[tuple[str, float]] = field(default_factory=list)


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
        return cls(frozenset(t.value for t in scope.types), frozenset(scope.tags), since,
                   scope.until, scope.prefix)  # fmt: skip

    @property
    def any(self) -> bool:
        return bool(self.types or self.tags or self.since or self.until or self.prefix)

    def admits(self, item: MemoryItem) -> bool:
        if self.types and item.type.value not in self.types:
            return False
        if self.tags and self.tags.isdisjoint(item.tags):
            return False
        if self.since is not None and item.updated_at < self.since:
            return False
        if self.until is not None and item.updated_at > self.until:
            return False
        return not (self.prefix and not item.key.startswith(self.prefix))


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
) -> Gathered:
    now = time.time() if now is None else now
    keys = naming.RedisKeys(tenant)
    keep_n = max(STAGE_TWO_MIN, 8 * k)
    if not filters.any:
        # The common case in one round trip: statistics, frequencies, postings, recents.
        owner_stats, df_by_owner_term, posting_data = await _survey(redis, keys, owners, query_terms)
        stats, df, n_docs = _corpus(owners, query_terms, owner_stats, df_by_owner_term)
        tf: dict[str, dict[str, int]] = {}
        chosen, stage_one_cut = _choose(posting_data, df, n_docs, config, keep_n, explain, tf)
        return await _finish(redis, tenant, keys, owners, filters, chosen, stage_one_cut, tf,
                             stats, owner_stats, False, 0, encoding, now)  # fmt: skip

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
    enumerate_filtered = filters.any and 0 < len(sizes) and filtered_total <= ENUMERATE_LIMIT
    if filters.any and sizes and filtered_total == 0:
        return Gathered([], {}, stats, 0, False, 0)

    posting_plan = [(owner, term) for owner in owners for term in query_terms
                    if df_by_owner_term[(owner, term)]]  # fmt: skip
    tf: dict[str, dict[str, int]] = {}
    stage_one_cut: list[tuple[str, float]] = []
    if enumerate_filtered:
        chosen, stage_one_cut = await _from_filtered_set(
            redis, keys, owners, filters, posting_plan, df, n_docs, now, config, keep_n, tf
        )
    else:
        _, _, posting_data = await _survey(redis, keys, owners, query_terms)
        chosen, stage_one_cut = _choose(posting_data, df, n_docs, config, keep_n, explain, tf)

    return await _finish(redis, tenant, keys, owners, filters, chosen, stage_one_cut, tf, stats,
                         owner_stats, enumerate_filtered, filtered_total, encoding, now)  # fmt: skip


def _corpus(
    owners: Sequence[str], query_terms: Sequence[str], owner_stats: list[dict[str, int]],
    df_by_owner_term: dict[tuple[str, str], int],
) -> tuple[CorpusStats, dict[str, int], int]:  # fmt: skip
    n_docs = sum(s.get("n", 0) for s in owner_stats)
    total_len = sum(s.get("len", 0) for s in owner_stats)
    df = {t: sum(df_by_owner_term[(o, t)] for o in owners) for t in query_terms}
    return CorpusStats(n_docs=n_docs, avg_len=total_len / n_docs if n_docs else 0.0, df=df), df, n_docs


async def _finish(
    redis: Redis, tenant: str, keys: naming.RedisKeys, owners: Sequence[str], filters: Filters,
    chosen: set[str], stage_one_cut: list[tuple[str, float]], tf: dict[str, dict[str, int]],
    stats: CorpusStats, owner_stats: list[dict[str, int]], enumerate_filtered: bool,
    filtered_total: int, encoding: str, now: float,
) -> Gathered:  # fmt: skip
    chosen_all = chosen | {key for key, _ in stage_one_cut}

    # The last round trip: the memories themselves.
    chosen_list = sorted(chosen)
    items, token_counts, doc_lens = await fetch_items(redis, tenant, chosen_list, encoding, now)
    features: list[CandidateFeatures] = []
    for key in chosen_list:
        item = items.get(key)
        if item is None or not filters.admits(item):
            items.pop(key, None)
            continue
        fb = item.feedback
        features.append(CandidateFeatures(
            key, item.updated_at, doc_lens.get(key, 0), tf.get(key, {}), fb.liked, fb.disliked,
            fb.important, item.type.value, item.tags, token_counts.get(key, 0),
        ))  # fmt: skip

    baseline, estimated = await _baseline(redis, keys, owners, owner_stats, filters,
                                          chosen_all if enumerate_filtered else None,
                                          filtered_total, encoding, now)  # fmt: skip
    return Gathered(features, items, stats, baseline, estimated,
                    considered=len(chosen) + len(stage_one_cut),
                    stage_one_cut=stage_one_cut)  # fmt: skip


def _weights(df: dict[str, int], n_docs: int, config: RankingConfig) -> dict[str, float]:
    return {t: idf(d, n_docs) * (config.k1 + 1.0) for t, d in df.items()}


@dataclass(slots=True)
class PostingData:
    """What stage one works from: the owners' most recent memories, each query term's best
    postings (flat member, score lists), and the recent memories' scores for each term."""

    recent: set[bytes]
    postings: list[tuple[str, list[bytes]]]
    recent_scores: list[tuple[str, list[bytes], list[bytes]]]


async def _survey(
    redis: Redis, keys: naming.RedisKeys, owners: Sequence[str], terms: Sequence[str]
) -> tuple[list[dict[str, int]], dict[tuple[str, str], int], PostingData]:
    """Everything stage one needs in one script call: the owners' statistics, each term's
    document frequency and best postings, the recent memories and their term scores."""
    args: list[object] = [POSTINGS_LIMIT, RECENT_LIMIT, len(owners), len(terms)]
    args += [keys.owner_stats(owner) for owner in owners]
    args += [keys.by_time(owner) for owner in owners]
    args += [keys.by_term(owner, term) for owner in owners for term in terms]
    stats_raw, dfs, recents, postings, recent_scores = await redis.eval(_SURVEY_LUA, 0, *args)
    owner_stats = [
        {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)} for flat in stats_raw
    ]
    df_by_owner_term: dict[tuple[str, str], int] = {}
    data = PostingData({m for recent in recents for m in recent}, [], [])
    i = 0
    for o, owner in enumerate(owners):
        for term in terms:
            df_by_owner_term[(owner, term)] = dfs[i]
            if dfs[i]:
                data.postings.append((term, postings[i]))
                data.recent_scores.append((term, recents[o], recent_scores[i]))
            i += 1
    return owner_stats, df_by_owner_term, data


def _choose(
    data: PostingData, df: dict[str, int], n_docs: int, config: RankingConfig, keep_n: int,
    explain: bool, tf: dict[str, dict[str, int]],
) -> tuple[set[str], list[tuple[str, float]]]:  # fmt: skip
    """Stage one: estimate every posting's memory from posting data alone (BM25 at the
    average document length); the best ``keep_n`` and every recent memory go on to stage
    two. Fills ``tf`` for them. Works on the raw member bytes and decodes only the chosen."""
    k1 = config.k1
    weights = {t: idf(d, n_docs) * (k1 + 1.0) for t, d in df.items()}
    raw_tf: dict[bytes, dict[str, int]] = {}
    estimate: dict[bytes, float] = {}
    created: dict[bytes, float] = {}
    for term, flat in data.postings:
        weight = weights[term]
        for member, raw_score in zip(flat[::2], flat[1::2], strict=True):
            score = float(raw_score)
            f = int(score // POSTING_TF_SCALE)
            freqs = raw_tf.get(member)
            if freqs is None:
                raw_tf[member] = freqs = {}
                estimate[member] = 0.0
                created[member] = score - f * POSTING_TF_SCALE
            freqs[term] = f
            estimate[member] += weight * f / (f + k1)
    for term, members, scores in data.recent_scores:
        # a recent memory's frequency for a term whose best postings did not include it
        for member, raw_score in zip(members, scores, strict=True):
            if raw_score and term not in raw_tf.get(member, ()):
                raw_tf.setdefault(member, {})[term] = posting_tf(float(raw_score))
    recent = data.recent
    if len(estimate) + len(recent) <= keep_n:
        chosen_raw = set(raw_tf) | recent
        cut_raw: list[tuple[bytes, float]] = []
    else:
        # ties (a common term, tf 1 everywhere) go to the most recently created
        best = heapq.nlargest(keep_n, estimate, key=lambda m: (estimate[m], created[m], m))
        chosen_raw = set(best) | recent  # an unmatched query still ranks by recency
        cut_raw = sorted(((m, e) for m, e in estimate.items() if m not in chosen_raw),
                         key=lambda pair: (-pair[1], pair[0])) if explain else []  # fmt: skip
    for member in chosen_raw:
        freqs = raw_tf.get(member)
        if freqs:
            tf[member.decode()] = freqs
    return {m.decode() for m in chosen_raw}, [(m.decode(), e) for m, e in cut_raw]


async def _from_filtered_set(
    redis: Redis, keys: naming.RedisKeys, owners: Sequence[str], filters: Filters,
    posting_plan: list[tuple[str, str]], df: dict[str, int], n_docs: int, now: float,
    config: RankingConfig, keep_n: int, tf: dict[str, dict[str, int]],
) -> tuple[set[str], list[tuple[str, float]]]:  # fmt: skip
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
    weights = _weights(df, n_docs, config)
    estimate = {key: sum(weights[t] * f / (f + config.k1) for t, f in tf.get(key, {}).items())
                for key in allowed}  # fmt: skip
    ordered = sorted(allowed, key=lambda key: (-estimate[key], key))
    return set(ordered[:keep_n]), [(key, estimate[key]) for key in ordered[keep_n:]]


async def _term_frequencies(
    redis: Redis, keys: naming.RedisKeys, posting_plan: list[tuple[str, str]],
    members: list[str], tf: dict[str, dict[str, int]],
) -> None:  # fmt: skip
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
) -> tuple[dict[str, MemoryItem], dict[str, int], dict[str, int]]:
    """Live memories (feedback included) with their token counts in ``encoding`` and
    document lengths. A count missing for this encoding is computed and cached."""
    keys = naming.RedisKeys(tenant)
    keys_ = list(keys_)
    token_field = f"tk:{encoding}"
    flat = await redis.eval(_FETCH_LUA, 0, token_field, *[keys.item(key) for key in keys_])
    replies = [flat[i : i + 6] for i in range(0, len(flat), 6)]
    items: dict[str, MemoryItem] = {}
    tokens: dict[str, int] = {}
    lens: dict[str, int] = {}
    missing: list[tuple[str, int]] = []
    for key, (data, fl, fd, fi, tk, dl) in zip(keys_, replies, strict=True):
        if not data:
            continue
        item = _ITEM_DECODER.decode(data)
        if item.expires_at is not None and item.expires_at <= now:
            continue
        if fl or fd or fi:
            item = msgspec.structs.replace(
                item, feedback=FeedbackCounts(int(fl or 0), int(fd or 0), int(fi or 0))
            )
        items[key] = item
        lens[key] = int(dl or 0)
        if tk is None:
            tokens[key] = count_tokens(item.content, encoding)
            missing.append((key, tokens[key]))
        else:
            tokens[key] = int(tk)
    if missing:
        async with redis.pipeline(transaction=False) as pipe:
            for key, count in missing:
                # only while the memory exists: never resurrect a hash the reaper removed
                pipe.eval(_CACHE_TOKENS_LUA, 1, keys.item(key), token_field, count)
            await pipe.execute()
    return items, tokens, lens


# ARGV: postings limit, recent limit, owners n, terms m, then n owner-stats keys, n time
# index keys, n*m term keys (owner-major). Flat replies: redis-py's per-pair score parsing
# cost more than the rest of a recall. A missing score is '' so every list stays dense.
_SURVEY_LUA = """
local limit, nrecent = tonumber(ARGV[1]), tonumber(ARGV[2])
local n, m = tonumber(ARGV[3]), tonumber(ARGV[4])
local stats, dfs, recents, postings, rscores = {}, {}, {}, {}, {}
for o = 1, n do
  stats[o] = redis.call('HGETALL', ARGV[4 + o])
  local recent = redis.call('ZREVRANGE', ARGV[4 + n + o], 0, nrecent - 1)
  recents[o] = recent
  for t = 1, m do
    local i = (o - 1) * m + t
    local key = ARGV[4 + 2 * n + i]
    dfs[i] = redis.call('ZCARD', key)
    postings[i] = {}
    rscores[i] = {}
    if dfs[i] > 0 then
      postings[i] = redis.call('ZREVRANGE', key, 0, limit - 1, 'WITHSCORES')
      for r = 1, #recent do
        rscores[i][r] = redis.call('ZSCORE', key, recent[r]) or ''
      end
    end
  end
end
return {stats, dfs, recents, postings, rscores}
"""

# One call for every memory of a recall (a pipeline of HMGETs cost more in redis-py's
# argument packing than in Redis).
_FETCH_LUA = """
local out = {}
for i = 1, #ARGV - 1 do
  local r = redis.call('HMGET', ARGV[i + 1], 'd', 'fl', 'fd', 'fi', ARGV[1], 'dl')
  for j = 1, 6 do out[#out + 1] = r[j] end
end
return out
"""

_CACHE_TOKENS_LUA = """
if redis.call('HSTRLEN', KEYS[1], 'd') > 0 then
  return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 0
"""


# --- filters ---------------------------------------------------------------------------


def _filter_queries(
    keys: naming.RedisKeys, owners: Sequence[str], filters: Filters
) -> list[tuple[str, str, str, str]]:
    """(kind, owner, redis key, value) for every set a filter reads."""
    out: list[tuple[str, str, str, str]] = []
    for owner in owners:
        out += [("type", owner, keys.by_type(owner, t), t) for t in sorted(filters.types)]
        out += [("tag", owner, keys.by_tag(owner, t), t) for t in sorted(filters.tags)]
        if filters.since is not None or filters.until is not None:
            out.append(("time", owner, keys.by_time(owner), ""))
    if filters.prefix:
        out.append(("prefix", "", keys.keys(), filters.prefix))
    return out


def _time_bounds(filters: Filters) -> tuple[str, str]:
    low = "-inf" if filters.since is None else repr(filters.since)
    high = "+inf" if filters.until is None else repr(filters.until)
    return low, high


def _queue_filter_sizes(pipe, keys, owners, filters) -> int:  # type: ignore[no-untyped-def]
    queries = _filter_queries(keys, owners, filters)
    for kind, _owner, rkey, value in queries:
        if kind in ("type", "tag"):
            pipe.scard(rkey)
        elif kind == "time":
            pipe.zcount(rkey, *_time_bounds(filters))
        else:
            pipe.zlexcount(rkey, "[" + value, "[" + value + "\xff")
    return len(queries)


def _queue_filter_members(pipe, keys, owners, filters, plan) -> None:  # type: ignore[no-untyped-def]
    for kind, owner, rkey, value in _filter_queries(keys, owners, filters):
        if kind in ("type", "tag"):
            pipe.smembers(rkey)
        elif kind == "time":
            pipe.zrangebyscore(rkey, *_time_bounds(filters))
        else:
            pipe.zrangebylex(rkey, "[" + value, "[" + value + "\xff")
        plan.append((kind, owner, value))


def _resolve_filter_sets(
    plan: list[tuple[str, str, str]], replies: list[object], owners: set[str]
) -> set[str]:
    """Within a kind, values are alternatives (any of the types, any of the tags) and
    owners add up; across kinds every filter must hold; nothing outside the owners."""
    by_kind: dict[str, set[str]] = {}
    for (kind, _owner, _value), reply in zip(plan, replies, strict=False):
        if kind in ("term", "recent"):
            continue
        members = {m.decode() for m in reply}  # type: ignore[attr-defined]
        by_kind.setdefault(kind, set()).update(members)
    sets = list(by_kind.values())
    result = sets[0] if sets else set()
    for other in sets[1:]:
        result &= other
    return {key for key in result if owner_of(key) in owners}


async def _baseline(
    redis: Redis,
    keys: naming.RedisKeys,
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
        return sum(s.get("tok", 0) for s in owner_stats), False
    if not (filters.tags or filters.since or filters.until or filters.prefix):
        return sum(s.get(f"tok:{t}", 0) for s in owner_stats for t in filters.types), False
    if enumerated is not None:
        # Token counts as the workers cache them (cl100k_base): exact for that encoding.
        async with redis.pipeline(transaction=False) as pipe:
            for key in enumerated:
                pipe.hget(keys.item(key), "tk:cl100k_base")
            replies = await pipe.execute()
        return sum(int(tk or 0) for tk in replies), encoding != "cl100k_base"
    n = sum(s.get("n", 0) for s in owner_stats)
    mean = sum(s.get("tok", 0) for s in owner_stats) / n if n else 0.0
    return math.ceil(filtered_total * mean), True
