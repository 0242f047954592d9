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

Variants alternate round after round, each on a fresh server; medians are printed, then
JSON. Only the relative figures of one run mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

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
    args = parser.parse_args()
    items = appends(args.owners, args.per_owner, random.Random(1))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in LAYOUTS}
    started = time.monotonic()
    for _ in range(args.rounds):
        for name in LAYOUTS:
            runs[name].append(await run(name, items, args.owners, args.merge))
    medians = {
        name: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]}
        for name, rs in runs.items()
    }
    base = medians["sorted set per term"]["us_per_append"]
    print(f"{len(items)} appends, {args.rounds} rounds, {time.monotonic() - started:.0f} s")
    for name, m in medians.items():
        print(
            f"{name:26} {m['us_per_append']:7.1f} us/append ({m['us_per_append'] / base:4.2f}x) "
            f"{m['us_per_posting']:5.2f} us/posting  {m['bytes_per_posting']:6.1f} B/posting  "
            f"{m['keys']:7.0f} keys  read {m['read_us']:6.1f} us"
        )
    print(json.dumps(medians))


if __name__ == "__main__":
    asyncio.run(main())
