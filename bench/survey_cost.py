"""Redis's time for recall's survey script, step by step, on real calls.

    python bench/survey_cost.py [--size 10000] [--queries 300] [--rounds 2]

Loads ``--size`` memories into one owner through the real write path (the memories of
``recall_latency.py``), records the survey calls (keys and arguments) of ``--queries``
recalls (its queries, k=5, budget 1,500) made by a recall service in this process, then
replays them against variants of ``store/recall_survey.lua`` that return early after each
step, alternating over ``--rounds``. Each line is Redis's own time per call (INFO
commandstats) and that of the commands the script called; a step's cost is the difference
between the variants around it. The commands called inside the script, most costly first,
follow for the whole script. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import recall_latency as bench
from write_throughput import stack_settings

from zeromem.bus import connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.limits import Limits
from zeromem.recall.expansion import shared_expander
from zeromem.recall.service import RecallService
from zeromem.schemas import RecallRequest, RecallScope
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store import scripts

# (variant, the line of the script it returns before, what it returns): each a prefix of
# the whole script's work, the last the whole script.
EARLY = "do return {stats, dfs, {}, {}, {}, 0, {}} end\n"
CUTS = [
    ("nothing (the call itself)", "local call, tonumber, floor", "do return 1 end\n"),
    ("statistics, document frequencies", "-- BM25's idf as ranking.idf computes it", EARLY),
    (
        "+ the query terms' postings (stage one)",
        "-- a recent memory's frequency for a term whose best postings",
        EARLY,
    ),
    (
        "+ recent memories, stage one's choice",
        "local rows, tfs = {}, {}",
        "do return {stats, dfs, {}, {}, cut, #chosen, pairs_out} end\n",
    ),
]


def variants(source: str) -> dict[str, str]:
    out = {}
    for name, before, returned in CUTS:
        if before not in source:
            raise SystemExit(f"recall_survey.lua has no line {before!r} any more: update CUTS")
        out[name] = source.replace(before, returned + before, 1)
    out["+ stage two's cards read (the whole script)"] = source
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rng = random.Random(7)
    owner = f"user:s{args.size}"
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp), secure=True) as stack:
        settings = stack_settings(stack, Settings())
        procs = await bench.start_services(settings, 2)
        try:
            async with await MemoryClient.connect(
                stack.nats_url, tenant="bench", agent="bench", timeout=600, settings=settings
            ) as client:
                await bench.load(client, owner, args.size, rng)
        finally:
            bench.stop(procs)
        redis = connect_redis(settings)
        try:
            calls = await survey_calls(redis, owner, args.queries, rng)
            times: dict[str, list[float]] = {}
            inner: dict[str, float] = {}
            for _ in range(args.rounds):
                for name, source in variants(scripts.RECALL_SURVEY.source).items():
                    sha = await redis.script_load(source)
                    await redis.config_resetstat()
                    for keys, argv in calls:
                        await redis.evalsha_ro(sha, len(keys), *keys, *argv)
                    stats = await redis.info("commandstats")
                    times.setdefault(name, []).append(stats["cmdstat_evalsha_ro"]["usec_per_call"])
                    if source is scripts.RECALL_SURVEY.source:
                        inner = {
                            command.removeprefix("cmdstat_"): v["usec"] / len(calls)
                            for command, v in stats.items()
                            if command not in ("cmdstat_evalsha_ro", "cmdstat_config|resetstat")
                            and not command.startswith("cmdstat_script")
                        }
        finally:
            await redis.aclose()
    print(f"survey script over {args.size} memories, {len(calls)} recalls' calls, µs per call:")
    for name, values in times.items():
        rounds = " ".join(f"{v:7.1f}" for v in values)
        print(f"  {name:46} {rounds}")
    print("commands inside the whole script, µs per call:")
    for command, usec in sorted(inner.items(), key=lambda kv: -kv[1]):
        print(f"  {command:46} {usec:7.1f}")
    print(json.dumps({"size": args.size, "usec_per_call": times, "inner_usec": inner}))


async def survey_calls(
    redis: Any, owner: str, queries: int, rng: random.Random
) -> list[tuple[list[Any], list[Any]]]:
    """The survey calls (keys, arguments) of ``queries`` recalls over ``owner``."""
    service = RecallService(redis, limits=Limits())
    service.expander = shared_expander()
    calls: list[tuple[list[Any], list[Any]]] = []
    call = scripts.Script.__call__

    async def recording(self: scripts.Script, redis_: Any, keys: Any = (), argv: Any = ()) -> Any:
        if self is scripts.RECALL_SURVEY:
            calls.append((list(keys), list(argv)))
        return await call(self, redis_, keys, argv)

    scripts.Script.__call__ = recording  # type: ignore[method-assign]
    try:
        for _ in range(queries):
            scope = RecallScope(owners=(owner,))
            request = RecallRequest(
                tenant="bench",
                reader="bench",
                query=bench.query(rng),
                scope=scope,
                k=5,
                budget=1500,
            )
            await service.answer(request)
    finally:
        scripts.Script.__call__ = call  # type: ignore[method-assign]
    return calls


if __name__ == "__main__":
    asyncio.run(main())
