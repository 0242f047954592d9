"""What writing recall's postings costs Redis, layout by layout: the design question of
issue 15 ("Redis CPU per append <= 40 us") asked of the inverted index alone.

    python bench/postings_layouts.py [--owners 100] [--per-owner 300] [--rounds 3]

Appends of 10 to 40 words drawn from a Zipf-like vocabulary of 5,000 (about 21 distinct
terms each), spread over ``--owners`` owners, sent as the worker sends them: one script
call per 64 appends, to a private redis-server with its append-only file on. Per layout,
Redis's main-thread CPU per append and per posting (INFO cpu), memory per posting, keys,
and the CPU of reading one (owner, term)'s postings (200 reads, Zipf-drawn terms):

- ``sorted set per term`` (what ``store/commit.lua`` writes today, ``RedisKeys.by_term``):
  a ZADD per (owner, term), score = ``posting_score``;
- ``one sorted set per owner``: one ZADD per append carrying all its postings, members
  ``term NUL inverted-score NUL key`` at score 0, read by lexical range;
- ``string per term``: an APPEND of a fixed record per (owner, term), read whole;
- ``merged per owner``: the postings of ``--merge`` appends of one owner grouped by term
  (by the caller, as a worker merging an owner's recent appends would) and written as one
  ZADD per term into the same sorted sets per term: what a merge into today's readable
  index costs, per posting;
- ``log per owner``: one APPEND per append of its whole posting list to its owner's log
  (no term lookup at all: what a write-optimised layout pays at write time, before the
  merge into a readable index that it would need; the merge is not measured here).
- ``segments per owner (L0 n, T t)``: an LSM-style index per owner, read and write side.
  Write: one APPEND per owner per script call of the call's postings to the owner's
  level-0 log, records ``\x1e term \x1f score(12 digits) member`` (a term is found with
  a plain string.find of ``\x1e term \x1f``). When an owner's log holds ``--l0`` appends,
  the client (as a worker would: Redis's main thread is the scarce CPU, and the worker
  owning the owner's shard is its only writer) GETs it, groups it by term, sorts each term
  best first and writes an immutable segment: a hash, field = term, value = a 6-digit
  count then the postings ``score(12 digits) length(2 bytes) member``, best first (with
  ``--buckets B``, terms are hashed into B fields instead, each holding the blocks
  ``\x1e term \x1f size count postings`` of its terms: fewer, longer fields), and a header
  field longer than 64 bytes, so that Redis builds the hash as a hashtable at once. Tiered
  merging: when a level would hold more than ``--tiers`` segments, they are read
  (HGETALL), merged with the new one in the client and written as one segment of the next
  level; the new segment, the DELs of the log and the merged segments and the owner's
  segment list (``sm:owner``, what readers look up) go in one MULTI. Reported: Redis CPU
  per append with the compactions amortised in (and the compactions' share), the
  client's CPU for them (time.process_time: all of it, and the parse/merge/pack alone),
  segments per owner at the end. Read: for the same data (today's sorted sets per term
  are then written into the same server, unmeasured) and 200 Zipf-drawn (owner, term),
  one Lua script per query term each way, the same result checked for all 200: today's
  ZCARD + ZREVRANGE 0 199 WITHSCORES, and the segments' df (their counts plus the log's
  matches) and best 200 postings merged across the owner's log and segments (HGET of the
  term in each segment, a lazy k-way merge parsing only the records it takes). Redis CPU
  and wall time per query term, blocks of 200 alternating.
- ``raw SET (baseline)``: pipelined SETs (64 a round trip) of a 100-byte value, Redis CPU
  per SET, so every figure of the run can be quoted as a multiple of it.

    python bench/postings_layouts.py --l0 32 128 --tiers 4 --buckets 0 64   # the default

Variants alternate round after round, each on a fresh server; medians are printed, then
JSON. Only the relative figures of one run mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, cast

import msgpack
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).parent))
from commit_breakdown import private_redis

BATCH = 64  # appends per script call, as the worker batches them
VOCAB = [f"w{i}" for i in range(5000)]
ZIPF = [1 / (i + 1) for i in range(len(VOCAB))]
NEVER = 10**20 - 1  # an inverted score sorts the best posting first in a lexical range

# ARGV: (owner, key, msgpack [term, score, term, score, ...]) per append.
LAYOUTS = {
    "sorted set per term": """
for i = 1, #ARGV, 3 do
  local owner, key, terms = ARGV[i], ARGV[i + 1], cmsgpack.unpack(ARGV[i + 2])
  for t = 1, #terms, 2 do
    redis.call('ZADD', 'p:' .. owner .. ':' .. terms[t], terms[t + 1], key)
  end
end
return 1
""",
    "one sorted set per owner": """
for i = 1, #ARGV, 3 do
  local owner, key, terms = ARGV[i], ARGV[i + 1], cmsgpack.unpack(ARGV[i + 2])
  local args = {}
  for t = 1, #terms, 2 do
    args[#args + 1] = 0
    args[#args + 1] = terms[t] .. '\\0' ..
      string.format('%020d', %NEVER% - terms[t + 1]) .. '\\0' .. key
  end
  redis.call('ZADD', 'q:' .. owner, unpack(args))
end
return 1
""".replace("%NEVER%", str(NEVER)),
    "string per term": """
for i = 1, #ARGV, 3 do
  local owner, key, terms = ARGV[i], ARGV[i + 1], cmsgpack.unpack(ARGV[i + 2])
  for t = 1, #terms, 2 do
    redis.call('APPEND', 'c:' .. owner .. ':' .. terms[t],
      string.sub(key, -8) .. tostring(terms[t + 1]))
  end
end
return 1
""",
    # ARGV here: (term, n, score, key, score, key, ...) per term: a merge of an owner's
    # appends, grouped by term before the call, one ZADD per term.
    "merged per owner": """
local i = 1
while i <= #ARGV do
  local key, n = 'm:' .. ARGV[i], tonumber(ARGV[i + 1])
  redis.call('ZADD', key, unpack(ARGV, i + 2, i + 1 + 2 * n))
  i = i + 2 + 2 * n
end
return 1
""",
    "log per owner": """
for i = 1, #ARGV, 3 do
  redis.call('APPEND', 'd:' .. ARGV[i], ARGV[i + 2])
end
return 1
""",
}


def appends(owners: int, per_owner: int, rng: random.Random) -> list[tuple[str, str, list]]:
    out = []
    for m in range(per_owner):
        for o in range(owners):
            tf: dict[str, int] = {}
            for word in rng.choices(VOCAB, ZIPF, k=rng.randint(10, 40)):
                tf[word] = tf.get(word, 0) + 1
            created = 1_700_000_000 + m
            flat = [x for w, n in tf.items() for x in (w, n * 10_000_000_000 + created)]
            out.append((f"o{o}", f"user:o{o}:m{m}", flat))
    return out


async def _cpu(redis: Redis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_sys_main_thread"] + info["used_cpu_user_main_thread"])


async def read_one(redis: Redis, layout: str, owner: str, term: str) -> None:
    if layout in ("sorted set per term", "merged per owner"):
        prefix = "p" if layout == "sorted set per term" else "m"
        await redis.zrevrange(f"{prefix}:{owner}:{term}", 0, 49, withscores=True)
        await redis.zcard(f"{prefix}:{owner}:{term}")
    elif layout == "one sorted set per owner":
        await redis.zrangebylex(f"q:{owner}", f"[{term}\0", f"[{term}\1", 0, 50)
        await redis.zlexcount(f"q:{owner}", f"[{term}\0", f"[{term}\1")
    elif layout == "string per term":
        await redis.get(f"c:{owner}:{term}")
    else:  # the log has no term lookup: reading it is reading the owner's whole log
        await redis.get(f"d:{owner}")


def merges(items: list[tuple[str, str, list]], merge: int) -> list[list[object]]:
    """The calls of ``merged per owner``: each owner's appends ``merge`` at a time, their
    postings grouped by (owner, term), at most ``BATCH * 21`` postings a call."""
    by_owner: dict[str, list[tuple[str, list]]] = {}
    for owner, key, terms in items:
        by_owner.setdefault(owner, []).append((key, terms))
    calls: list[list[object]] = []
    for owner, appended in by_owner.items():
        for start in range(0, len(appended), merge):
            grouped: dict[str, list[object]] = {}
            for key, terms in appended[start : start + merge]:
                for t in range(0, len(terms), 2):
                    grouped.setdefault(terms[t], []).extend((terms[t + 1], key))
            argv: list[object] = []
            for term, members in grouped.items():
                argv += [f"{owner}:{term}", len(members) // 2, *members]
                if len(argv) > BATCH * 21 * 2:
                    calls.append(argv)
                    argv = []
            if argv:
                calls.append(argv)
    return calls


# --- segments per owner -------------------------------------------------------------------

# ARGV: (owner, the call's level-0 records for that owner) per owner of the call.
SEGMENT_APPEND = """
for i = 1, #ARGV, 2 do
  redis.call('APPEND', 'l0:' .. ARGV[i], ARGV[i + 1])
end
return 1
"""

# What recall needs of one (owner, term) today, in Lua as recall_survey.lua reads it: df,
# then the best ARGV[3] postings as (member, number). ARGV: owner, term, limit, full ('1':
# return the postings, to check the two layouts agree; else only their number, so that
# the reply's size does not weigh in the CPU measured).
TODAY_READ = """
local key = 'p:' .. ARGV[1] .. ':' .. ARGV[2]
local df = redis.call('ZCARD', key)
local members, scores = {}, {}
if df > 0 then
  local flat = redis.call('ZREVRANGE', key, 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
  for j = 1, #flat, 2 do
    members[#members + 1] = flat[j]
    scores[#scores + 1] = tonumber(flat[j + 1])
  end
end
if ARGV[4] ~= '1' then return {df, #members} end
local out = {df}
for j = 1, #members do out[#out + 1] = members[j]; out[#out + 1] = scores[j] end
return out
"""

# The same from the segments: ARGV as TODAY_READ's, then the buckets (0: a field per term;
# else the term's field is its bucket, holding blocks 'RS term US size count postings').
SEGMENT_READ = """
local owner, term, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local buckets = tonumber(ARGV[5])
local call, sub, byte, find = redis.call, string.sub, string.byte, string.find
local field, block = term, '\\30' .. term .. '\\31'
if buckets > 0 then
  local h = 0
  for c = 1, #term do h = (h * 31 + byte(term, c)) % 65536 end
  field = tostring(h % buckets)
end
local df = 0
-- sources 1..k: the term's packed postings in each segment, read from position pos[i],
-- left[i] of them not taken; the head (next best) of each is hs[i] (score) and hm[i]
-- (member), nil when exhausted
local vals, pos, left, hs, hm, k = {}, {}, {}, {}, {}, 0
for _, segment in ipairs(call('LRANGE', 'sm:' .. owner, 0, -1)) do
  local v = call('HGET', segment, field)
  local at = v and 1
  if v and buckets > 0 then
    local _, e = find(v, block, 1, true)
    at = e and e + 9 -- past the block's size (8 digits)
  end
  if at then
    k = k + 1
    vals[k], pos[k], left[k] = v, at + 6, tonumber(sub(v, at, at + 5))
    df = df + left[k]
  end
end
-- the level-0 log: every match (score .. member), sorted by the C comparator rather than
-- a Lua function (fixed-width scores first, so the string order is the score order)
local recs = {}
local log = call('GET', 'l0:' .. owner)
if log then
  local pattern, at = '\\30' .. term .. '\\31', 1
  while true do
    local _, e = find(log, pattern, at, true)
    if not e then break end
    local stop = find(log, '\\30', e + 1, true) or (#log + 1)
    recs[#recs + 1] = sub(log, e + 1, stop - 1)
    at = stop
  end
  df = df + #recs
  table.sort(recs)
end
local L, next_rec = k + 1, #recs -- the log is source k + 1, taken from its end
local function advance(i)
  if i == L then
    local r = recs[next_rec]
    if r then
      hs[i], hm[i] = tonumber(sub(r, 1, 12)), sub(r, 13)
      next_rec = next_rec - 1
    else
      hs[i] = nil
    end
    return
  end
  if left[i] == 0 then hs[i] = nil return end
  left[i] = left[i] - 1
  local v, p = vals[i], pos[i]
  local n = byte(v, p + 12) * 256 + byte(v, p + 13)
  hs[i], hm[i] = tonumber(sub(v, p, p + 11)), sub(v, p + 14, p + 13 + n)
  pos[i] = p + 14 + n
end
for i = 1, L do advance(i) end
-- lazy k-way merge: only the records taken (and one head per source) are parsed
local members, scores = {}, {}
while #members < limit do
  local best, bs = nil, -1
  for i = 1, L do
    local s = hs[i]
    if s and (s > bs or (s == bs and hm[i] > hm[best])) then best, bs = i, s end
  end
  if not best then break end
  members[#members + 1], scores[#scores + 1] = hm[best], bs
  advance(best)
end
if ARGV[4] ~= '1' then return {df, #members} end
local out = {df}
for j = 1, #members do out[#out + 1] = members[j]; out[#out + 1] = scores[j] end
return out
"""

SCORE_WIDTH = 12  # posting_score = tf * 1e10 + created seconds: 12 digits up to tf 99
READ_LIMIT = 200  # postings recall reads per query term (recall_survey's postings limit)

# term -> its postings best first: [(score digits, member)], or still packed as read from a
# segment (count, postings), passed through unparsed when no other segment has the term
Postings = dict[bytes, list[tuple[bytes, bytes]] | bytes]


def level0_records(terms: list, key: str) -> str:
    """An append's postings as level-0 log records (what the worker would build)."""
    return "".join(
        f"\x1e{terms[t]}\x1f{terms[t + 1]:0{SCORE_WIDTH}d}{key}" for t in range(0, len(terms), 2)
    )


def parse_log(log: bytes) -> Postings:
    grouped: dict[bytes, list[tuple[bytes, bytes]]] = {}
    for record in log.split(b"\x1e")[1:]:
        term, rest = record.split(b"\x1f", 1)
        grouped.setdefault(term, []).append((rest[:SCORE_WIDTH], rest[SCORE_WIDTH:]))
    for postings in grouped.values():
        # (score digits, member) descending: exactly ZREVRANGE's order, ties included
        postings.sort(reverse=True)
    return dict(grouped)


# A segment's first field, longer than hash-max-listpack-value (64): HSET then makes the
# hash a hashtable before inserting (a listpack would take the first 128 fields at O(n)
# each, then be converted): about 1.1 against 2.5 to 4 us of Redis CPU per field here.
HEADER = b"\0segment"


def unpack_postings(value: bytes, at: int) -> tuple[list[tuple[bytes, bytes]], int]:
    """The count-prefixed postings at ``at``, and where they end."""
    count, at = int(value[at : at + 6]), at + 6
    out = []
    for _ in range(count):
        n = (value[at + SCORE_WIDTH] << 8) | value[at + SCORE_WIDTH + 1]
        start = at + SCORE_WIDTH + 2
        out.append((value[at : at + SCORE_WIDTH], value[start : start + n]))
        at = start + n
    return out, at


def pack_postings(postings: list[tuple[bytes, bytes]]) -> bytes:
    return b"%06d" % len(postings) + b"".join(
        s + len(m).to_bytes(2, "big") + m for s, m in postings
    )


@functools.cache  # a worker would keep it too: the same few thousand terms, every merge
def bucket_of(term: bytes, buckets: int) -> bytes:
    h = 0
    for c in term:  # as SEGMENT_READ hashes it
        h = (h * 31 + c) % 65536
    return b"%d" % (h % buckets)


def packed(postings: list[tuple[bytes, bytes]] | bytes) -> bytes:
    return postings if isinstance(postings, bytes) else pack_postings(postings)


def count_of(postings: list[tuple[bytes, bytes]] | bytes) -> int:
    return int(postings[:6]) if isinstance(postings, bytes) else len(postings)


def encode_segment(segment: Postings, buckets: int, header: bytes) -> dict[Any, bytes]:
    """The segment's hash: a field per term, or per bucket of terms."""
    mapping = {HEADER: header}
    if not buckets:
        mapping.update((term, packed(p)) for term, p in segment.items())
        return mapping
    blocks: dict[bytes, list[bytes]] = {}
    for term, p in segment.items():
        value = packed(p)
        # the block's size, so the client can cut blocks out without walking postings
        blocks.setdefault(bucket_of(term, buckets), []).append(
            b"\x1e" + term + b"\x1f" + b"%08d" % len(value) + value
        )
    mapping.update((b, b"".join(parts)) for b, parts in blocks.items())
    return mapping


def decode_segment(mapping: dict[bytes, bytes], buckets: int) -> Postings:
    mapping.pop(HEADER, None)
    if not buckets:
        return dict(mapping)
    segment: Postings = {}
    for value in mapping.values():
        at = 0
        while at < len(value):  # at a block: RS term US size count postings
            us = value.index(b"\x1f", at)
            end = us + 9 + int(value[us + 1 : us + 9])
            segment[value[at + 1 : us]], at = value[us + 9 : end], end
    return segment


def merge_segments(first: Postings, others: list[Postings]) -> Postings:
    runs: dict[bytes, list[list[tuple[bytes, bytes]] | bytes]] = {t: [p] for t, p in first.items()}
    for segment in others:
        for term, postings in segment.items():
            runs.setdefault(term, []).append(postings)
    merged: Postings = {}
    for term, parts in runs.items():
        if len(parts) == 1:  # most terms of a Zipf tail: left as they are, even packed
            merged[term] = parts[0]
        else:
            lists = [unpack_postings(p, 0)[0] if isinstance(p, bytes) else p for p in parts]
            # each list is sorted: Timsort merges the runs rather than sorting afresh
            merged[term] = sorted((p for part in lists for p in part), reverse=True)
    return merged


class Segments:
    """The client's side of the segment layout: the owners' segments by level (the worker
    owning the shard is the only writer, so it can keep this; readers use ``sm:owner``),
    compactions done in Python."""

    def __init__(self, redis: Redis, l0: int, tiers: int, buckets: int) -> None:
        self.redis, self.l0, self.tiers, self.buckets = redis, l0, tiers, buckets
        self.pending: dict[str, int] = {}  # appends in the owner's level-0 log
        self.levels: dict[str, dict[int, list[str]]] = {}
        self.serial = 0
        self.merge_s = 0.0  # client CPU in parse / merge / pack alone
        self.flushes = self.merges = 0
        self.postings_written = 0  # postings written into segments, all levels

    async def compact(self, owner: str) -> None:
        log = cast(bytes, await self.redis.get(f"l0:{owner}"))
        started = time.process_time()
        segment = parse_log(log)
        self.merge_s += time.process_time() - started
        levels = self.levels.setdefault(owner, {})
        level, replaced = 1, []
        # the new segment joins level 1; a level that would then hold more than T merges
        # into the next, and so on (the intermediate segments are never written)
        while len(levels.get(level, ())) >= self.tiers:
            keys = levels.pop(level)
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hgetall(key)
                others = await pipe.execute()
            started = time.process_time()
            segment = merge_segments(segment, [decode_segment(o, self.buckets) for o in others])
            self.merge_s += time.process_time() - started
            replaced += keys
            level += 1
            self.merges += 1
        self.serial += 1
        key = f"s:{owner}:{level}:{self.serial}"
        levels.setdefault(level, []).append(key)
        started = time.process_time()
        header = f"level {level} of {owner}, {len(segment)} terms".encode().ljust(80)
        mapping = encode_segment(segment, self.buckets, header)
        self.merge_s += time.process_time() - started
        self.postings_written += sum(count_of(p) for p in segment.values())
        self.flushes += 1
        # one MULTI: a reader sees the log and the old segments or the new segment, never
        # both nor neither
        every = [k for keys in levels.values() for k in keys]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=mapping)
            pipe.delete(f"l0:{owner}", *replaced)
            pipe.delete(f"sm:{owner}")
            pipe.rpush(f"sm:{owner}", *every)
            await pipe.execute()
        self.pending[owner] = 0


async def _info_overhead(redis: Redis) -> float:
    """Redis CPU between two back-to-back INFO cpu calls: subtracted for each pair of them
    taken around the compactions."""
    deltas = []
    for _ in range(30):
        before = await _cpu(redis)
        deltas.append(await _cpu(redis) - before)
    return statistics.median(deltas)


async def run_segments(
    items: list[tuple[str, str, list]], owners: int, l0: int, tiers: int, buckets: int
) -> dict[str, float]:
    async with private_redis() as redis:
        segments = Segments(redis, l0, tiers, buckets)
        sha = await redis.script_load(SEGMENT_APPEND)
        overhead = await _info_overhead(redis)
        memory_before = (await redis.info("memory"))["used_memory"]
        client_before = time.process_time()
        cpu_before = await _cpu(redis)
        compact_redis_s = compact_client_s = 0.0
        pairs_of_info = 0
        for i in range(0, len(items), BATCH):
            by_owner: dict[str, list[str]] = {}
            for owner, key, terms in items[i : i + BATCH]:
                by_owner.setdefault(owner, []).append(level0_records(terms, key))
                segments.pending[owner] = segments.pending.get(owner, 0) + 1
            argv: list[object] = []
            for owner, records in by_owner.items():
                argv += [owner, "".join(records)]
            await redis.evalsha(sha, 0, *argv)
            due = [o for o in by_owner if segments.pending[o] >= l0]
            if due:
                # the compactions of this call, between a pair of INFO cpu calls
                redis_before = await _cpu(redis)
                started = time.process_time()
                for owner in due:
                    await segments.compact(owner)
                compact_client_s += time.process_time() - started
                compact_redis_s += await _cpu(redis) - redis_before - overhead
                pairs_of_info += 1
        write_s = await _cpu(redis) - cpu_before - 2 * overhead * pairs_of_info
        client_s = time.process_time() - client_before
        memory = (await redis.info("memory"))["used_memory"] - memory_before
        keys = await redis.dbsize()
        postings = sum(len(terms) // 2 for _, _, terms in items)
        per_owner = [sum(len(k) for k in lv.values()) for lv in segments.levels.values()]
        per_owner += [0] * (owners - len(per_owner))
        top_level = max((max(lv) for lv in segments.levels.values() if lv), default=0)

        # read side: today's sorted sets for the same data, in the same server, unmeasured
        today = await redis.script_load(LAYOUTS["sorted set per term"])
        for i in range(0, len(items), BATCH):
            argv = []
            for owner, key, terms in items[i : i + BATCH]:
                argv += [owner, key, msgpack.packb(terms)]
            await redis.evalsha(today, 0, *argv)
        reads = {
            "today": await redis.script_load(TODAY_READ),
            "segments": await redis.script_load(SEGMENT_READ),
        }
        rng = random.Random(2)
        pairs = [(f"o{rng.randrange(owners)}", rng.choices(VOCAB, ZIPF)[0]) for _ in range(200)]
        mismatches = 0
        for owner, term in pairs:
            got = [
                await redis.evalsha(s, 0, owner, term, READ_LIMIT, 1, buckets)
                for s in reads.values()
            ]
            mismatches += got[0] != got[1]
        cpu_us: dict[str, list[float]] = {name: [] for name in reads}
        wall_us: dict[str, list[float]] = {name: [] for name in reads}
        for _ in range(5):  # blocks of 200 queries, the two alternating
            for name, script in reads.items():
                before = await _cpu(redis)
                for owner, term in pairs:
                    started = time.perf_counter()
                    await redis.evalsha(script, 0, owner, term, READ_LIMIT, 0, buckets)
                    wall_us[name].append((time.perf_counter() - started) * 1e6)
                cpu_us[name].append((await _cpu(redis) - before) / len(pairs) * 1e6)
    return {
        "us_per_append": write_s / len(items) * 1e6,
        "us_per_posting": write_s / postings * 1e6,
        "bytes_per_posting": memory / postings,
        "keys": keys,
        "read_us": statistics.median(cpu_us["segments"]),
        "postings_per_append": postings / len(items),
        "compact_redis_us_per_append": compact_redis_s / len(items) * 1e6,
        "append_redis_us_per_append": (write_s - compact_redis_s) / len(items) * 1e6,
        "compact_client_us_per_append": compact_client_s / len(items) * 1e6,
        "merge_client_us_per_append": segments.merge_s / len(items) * 1e6,
        "client_us_per_append": client_s / len(items) * 1e6,
        "rewrites_per_posting": segments.postings_written / postings,
        "flushes": segments.flushes,
        "merges": segments.merges,
        "segments_per_owner": statistics.mean(per_owner),
        "segments_per_owner_max": max(per_owner),
        "top_level": top_level,
        "read_today_us": statistics.median(cpu_us["today"]),
        "read_wall_us": statistics.median(wall_us["segments"]),
        "read_today_wall_us": statistics.median(wall_us["today"]),
        "read_mismatches": mismatches,
    }


async def run_raw_set(n: int) -> dict[str, float]:
    """Redis CPU of a plain SET of 100 bytes, pipelined 64 a round trip: the unit."""
    async with private_redis() as redis:
        value = bytes(random.Random(3).randrange(256) for _ in range(100))
        cpu_before = await _cpu(redis)
        for i in range(0, n, BATCH):
            async with redis.pipeline(transaction=False) as pipe:
                for j in range(i, min(i + BATCH, n)):
                    pipe.set(f"k:{j}", value)
                await pipe.execute()
        return {"us_per_set": (await _cpu(redis) - cpu_before) / n * 1e6}


async def run(
    layout: str, items: list[tuple[str, str, list]], owners: int, merge: int
) -> dict[str, float]:
    async with private_redis() as redis:
        sha = await redis.script_load(LAYOUTS[layout])
        calls = merges(items, merge) if layout == "merged per owner" else None
        memory_before = (await redis.info("memory"))["used_memory"]
        cpu_before = await _cpu(redis)
        if calls is not None:
            for argv in calls:
                await redis.evalsha(sha, 0, *argv)
        for i in range(0, len(items) if calls is None else 0, BATCH):
            argv = []
            for owner, key, terms in items[i : i + BATCH]:
                argv += [owner, key, msgpack.packb(terms)]
            await redis.evalsha(sha, 0, *argv)
        write_s = await _cpu(redis) - cpu_before
        memory = (await redis.info("memory"))["used_memory"] - memory_before
        postings = sum(len(terms) // 2 for _, _, terms in items)
        keys = await redis.dbsize()
        rng = random.Random(2)
        pairs = [(f"o{rng.randrange(owners)}", rng.choices(VOCAB, ZIPF)[0]) for _ in range(200)]
        cpu_before = await _cpu(redis)
        for owner, term in pairs:
            await read_one(redis, layout, owner, term)
        read_s = await _cpu(redis) - cpu_before
    return {
        "us_per_append": write_s / len(items) * 1e6,
        "us_per_posting": write_s / postings * 1e6,
        "bytes_per_posting": memory / postings,
        "keys": keys,
        "read_us": read_s / len(pairs) * 1e6,
        "postings_per_append": postings / len(items),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--per-owner", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--merge", type=int, default=256, help="appends of an owner a merge takes")
    parser.add_argument(
        "--l0",
        type=int,
        nargs="+",
        default=[32, 128],
        help="segments: appends an owner's level-0 log holds before it is compacted",
    )
    parser.add_argument(
        "--tiers",
        type=int,
        nargs="+",
        default=[4],
        help="segments: a level holding more than this many segments merges into the next",
    )
    parser.add_argument(
        "--buckets",
        type=int,
        nargs="+",
        default=[0, 64],
        help="segments: 0, a hash field per term; else terms hashed into this many fields",
    )
    args = parser.parse_args()
    items = appends(args.owners, args.per_owner, random.Random(1))
    segment_variants = {
        f"segments per owner (L0 {l0}, T {t}{f', B {b}' if b else ''})": (l0, t, b)
        for l0 in args.l0
        for t in args.tiers
        for b in args.buckets
    }
    raw = "raw SET (baseline)"
    runs: dict[str, list[dict[str, float]]] = {
        name: [] for name in [*LAYOUTS, *segment_variants, raw]
    }
    started = time.monotonic()
    for _ in range(args.rounds):
        for name in LAYOUTS:
            runs[name].append(await run(name, items, args.owners, args.merge))
        for name, (l0, tiers, buckets) in segment_variants.items():
            runs[name].append(await run_segments(items, args.owners, l0, tiers, buckets))
        runs[raw].append(await run_raw_set(len(items)))
    medians = {
        name: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]}
        for name, rs in runs.items()
    }
    base = medians["sorted set per term"]["us_per_append"]
    unit = medians[raw]["us_per_set"]
    width = max(map(len, medians))
    print(f"{len(items)} appends, {args.rounds} rounds, {time.monotonic() - started:.0f} s")
    print(f"{raw:{width}} {unit:7.2f} us/SET (Redis CPU; 'SETs' below are multiples of it)")
    for name, m in medians.items():
        if name == raw:
            continue
        print(
            f"{name:{width}} {m['us_per_append']:7.1f} us/append "
            f"({m['us_per_append'] / base:4.2f}x) "
            f"{m['us_per_posting']:5.2f} us/posting  {m['bytes_per_posting']:6.1f} B/posting  "
            f"{m['keys']:7.0f} keys  read {m['read_us']:6.1f} us  "
            f"= {m['us_per_append'] / unit:5.1f} SETs/append"
        )
    for name in segment_variants:
        m = medians[name]
        print(
            f"{name}: Redis/append {m['append_redis_us_per_append']:.1f} appends + "
            f"{m['compact_redis_us_per_append']:.1f} compaction us; client/append "
            f"{m['compact_client_us_per_append']:.1f} us compaction "
            f"({m['merge_client_us_per_append']:.1f} parse/merge/pack), "
            f"{m['client_us_per_append']:.1f} us all; each posting written "
            f"{m['rewrites_per_posting']:.2f}x into segments; {m['flushes']:.0f} flushes, "
            f"{m['merges']:.0f} merges, segments/owner {m['segments_per_owner']:.1f} "
            f"(max {m['segments_per_owner_max']:.0f}, top level {m['top_level']:.0f})"
        )
        print(
            f"{'':4}read per query term: Redis {m['read_us']:.1f} us vs today's "
            f"{m['read_today_us']:.1f} ({m['read_us'] / m['read_today_us']:.2f}x; "
            f"{m['read_us'] / unit:.0f} vs {m['read_today_us'] / unit:.0f} SETs), wall "
            f"{m['read_wall_us']:.0f} vs {m['read_today_wall_us']:.0f} us, "
            f"{m['read_mismatches']:.0f} of 200 results differ"
        )
    print(json.dumps(medians))


if __name__ == "__main__":
    asyncio.run(main())
