"""Retrieval quality of recall on a labelled, simulated dataset, through the real stack.

Run: ``.venv/bin/python bench/quality/run.py [--small] [--seed 7] [--turns 40]
[--strategy NAME=JSON ...] [--misses CONFIG]``

``--small`` is 3 users with short sessions (a few seconds); ``--turns`` sets the messages
per session (more turns, more chatter competing with the answers); ``--strategy`` adds a
configuration to compare; ``--misses`` lists the questions a configuration got wrong.

Starts nats-server and redis-server in a temp dir (``zeromem.embedded.EmbeddedStack``),
runs a worker for every shard and the read services in this process (as
``tests/harness.py`` does), loads the dataset of ``generate.py`` through JetStream and
the worker, then asks every question through the SDK's ``recall`` (NATS request-reply to
the real recall service), once per configuration: the default strategy (30-day
half-life, 0.35 floor), ``no_decay``, and a one-week ``time_window``.

Per question and configuration, two recalls:

- ``k=10, budget=1500`` (what an agent would send). ``recall@5`` / ``recall@10``: the
  share of the answer keys among the first 5 / 10 primary memories of the reply together
  with the references each pulled in. ``hit@1``: the first memory is an answer.
  ``stale>ans`` (temporal questions): an older, superseded memory comes before the
  answer (or the answer is missing and a superseded one is there). ``tokens``: the
  reply's ``tokens``, next to the user's full transcript (``history``) and the saving.
- ``k=100, budget=1500``: the budget is then the only limit. ``R@1500tok`` is the share of
  answer keys anywhere in that packed reply: does the answer fit in 1,500 tokens at all?
  (With ``k=10`` the budget hardly ever binds: ten short memories cost a few hundred
  tokens, so the k=10 reply's recall within budget is ``recall@10``.) ``budget_cut_share``
  says how often the budget, rather than a lack of matching memories, ended that reply.

The JSON also has ``mean_scope_tokens`` (the reply's ``baseline_tokens``: every memory
in scope) and ``answers_via_reference`` (answer keys that came in as a reference of
another memory, not on their own rank).

The last line of output is one JSON object with every figure.

Simulated time
--------------
Decay only matters if memories have realistic ages, but the worker stamps ``created_at``
and ``updated_at`` with the JetStream message time, and the recall service reads
``time.time()``. Rewriting timestamps in Redis afterwards would bypass the product, so
the harness moves the two clocks instead, in this process only, leaving every code path
between them real:

1. Writes: each command is published exactly like ``MemoryClient.send`` publishes it
   (same subject, same ``Nats-Msg-Id`` header, msgpack ``Put``), plus a
   ``Zm-Bench-Sim-Time`` header with the memory's simulated creation time (the SDK has no
   way to add a header, so the harness publishes the built command itself).
   ``SimulatedTimeWorker`` is a ``WorkerService`` whose ``process`` notes, per message
   (keyed by its unique JetStream reply subject), the time in that header, and the
   module-level ``stream_position`` of ``zeromem.worker.service`` is wrapped to return
   that time instead of the stream's. Admission, the engine's decisions, the Lua commit
   and every index are the service's own: the memory is simply applied "at" its
   simulated time. Memories are published in creation order, so every owner's commands
   arrive in time order, as in reality.
2. Reads: ``zeromem.recall.service.time`` (the module the recall service reads its
   ``now`` from) is replaced by a clock object whose ``time()`` returns the question's
   simulated time; everything else of ``time`` is passed through. The request still goes
   over NATS to the real recall handler.

A cleaner seam, not taken here because it means changing service code: an injectable
clock (``RecallService(redis, clock=time.time)``, and a ``timestamp_of(msg)`` hook on
``WorkerService``); the harness would then pass its own without patching modules.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from nats.aio.msg import Msg

import zeromem.recall.service as recall_service_module
import zeromem.worker.service as worker_service_module
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.ids import new_command_id
from zeromem.recall.packing import CUT_OVER_BUDGET
from zeromem.schemas import MemoryType, Put, RecallReply, encode, owner_of
from zeromem.sdk import MemoryClient
from zeromem.serve import ReadServices
from zeromem.settings import Settings
from zeromem.worker.service import WorkerService

# run.py is a script next to generate.py; its directory is on sys.path when run as one.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import KINDS, Dataset, Memory, Question, build

TENANT = "bench"
AGENT = "quality-bench"
K = 10
BUDGET = 1500
WIDE_K = 100  # the largest k a request allows: only the budget limits that reply
SIM_TIME_HEADER = "Zm-Bench-Sim-Time"
CONFIGS: dict[str, dict[str, Any] | None] = {
    "default": None,
    "no_decay": {"name": "no_decay"},
    "window_7d": {"name": "time_window", "seconds": 604_800},
}


# --- Simulated time (this process only) ------------------------------------------------

_sim_times: dict[str, float] = {}  # JetStream reply subject -> simulated apply time
_real_stream_position = worker_service_module.stream_position


def _stream_position_at_sim_time(reply: str) -> tuple[int, float]:
    sequence, stream_time = _real_stream_position(reply)
    return sequence, _sim_times.get(reply, stream_time)


class SimulatedTimeWorker(WorkerService):
    """A worker that applies each command at the time its sim-time header says."""

    async def process(self, shard: int, msgs: Sequence[Msg], ack: bool = True,
                      positions: dict[int, int] | None = None) -> int:  # fmt: skip
        noted = []
        for msg in msgs:
            stamp = (msg.headers or {}).get(SIM_TIME_HEADER)
            if stamp is not None and msg.reply:
                # The reply subject is unique per delivery, so concurrent shards never mix.
                _sim_times[msg.reply] = float(stamp)
                noted.append(msg.reply)
        try:
            return await super().process(shard, msgs, ack=ack, positions=positions)
        finally:
            for reply in noted:
                _sim_times.pop(reply, None)


class SimulatedClock:
    """Stands in for the ``time`` module inside ``zeromem.recall.service``."""

    def __init__(self, real: ModuleType, now: float) -> None:
        self._real = real
        self.now = now

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextlib.contextmanager
def simulated_time(now: float) -> Iterator[SimulatedClock]:
    real_time = recall_service_module.time
    clock = SimulatedClock(real_time, now)
    recall_service_module.time = clock  # type: ignore[assignment]
    worker_service_module.stream_position = _stream_position_at_sim_time
    try:
        yield clock
    finally:
        recall_service_module.time = real_time
        worker_service_module.stream_position = _real_stream_position


# --- The stack -------------------------------------------------------------------------


@dataclass(slots=True)
class Services:
    worker: SimulatedTimeWorker
    closers: list[Any] = field(default_factory=list)

    async def stop(self) -> None:
        await self.worker.stop()
        for close in reversed(self.closers):
            with contextlib.suppress(Exception):
                await close()


async def start_services(settings: Settings) -> Services:
    """One worker for every shard and the read services, in this process."""
    nc = await connect_nats(settings, name="quality-bench-worker")
    redis = connect_redis(settings)
    worker = SimulatedTimeWorker(settings, list(range(settings.shards)), nc=nc, redis=redis)
    services = Services(worker, [nc.close, redis.aclose])
    await worker.start()
    await worker.wait_owned()
    read_redis = connect_redis(settings)
    readers = await ReadServices.start(settings, read_redis)
    services.closers += [read_redis.aclose, readers.stop]
    return services


async def load(client: MemoryClient, worker: WorkerService, memories: Sequence[Memory],
               wait_s: float = 120.0) -> float:  # fmt: skip
    """Publish every memory (creation order) and wait until the worker applied them all."""
    started = time.perf_counter()
    done_before = _handled(worker)
    for memory in memories:
        command = Put(
            id=new_command_id(), tenant=TENANT, agent=AGENT, ts=memory.created_at,
            key=memory.key, value=memory.value, content=memory.content,
            type=MemoryType(memory.type), tags=memory.tags, references=memory.references,
        )  # fmt: skip
        shard = naming.shard_for(TENANT, owner_of(memory.key), client.shards)
        headers = {naming.MSG_ID_HEADER: command.id, SIM_TIME_HEADER: repr(memory.created_at)}
        await client.js.publish_async(naming.command_subject(TENANT, shard, AGENT), encode(command),
                                      headers=headers)  # fmt: skip
    await client.js.publish_async_completed()
    deadline = time.monotonic() + wait_s
    while _handled(worker) - done_before < len(memories):
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {_handled(worker) - done_before} of {len(memories)} applied")
        await asyncio.sleep(0.02)
    stats = worker.stats
    if stats.rejected or stats.conflicts or stats.dead_lettered:
        raise RuntimeError(f"load failed: {stats}")
    return time.perf_counter() - started


def _handled(worker: WorkerService) -> int:
    s = worker.stats
    return s.applied + s.rejected + s.conflicts + s.dead_lettered


async def verify_ages(client: MemoryClient, memories: Sequence[Memory]) -> None:
    """The seam worked: stored memories carry their simulated times, not today's."""
    for memory in (memories[0], memories[len(memories) // 2], memories[-1]):
        item = await client.get(memory.key)
        if item is None or abs(item.created_at - memory.created_at) > 1e-3:
            found = None if item is None else item.created_at
            raise RuntimeError(f"{memory.key}: created_at {found}, expected {memory.created_at}")


async def verify_clock(client: MemoryClient, dataset: Dataset) -> None:
    """The recall service runs on simulated time: a one-week window around the simulated
    "now" holds the last sessions (around the real now it would hold nothing)."""
    user = dataset.users[0]
    reply = await client.recall("", owners=user.owners, k=5,
                                strategy={"name": "time_window", "seconds": 7 * 86_400})
    if not reply.memories:
        raise RuntimeError("recall does not run on the simulated clock (did "
                           "zeromem.recall.service stop reading time.time()?)")


# --- Scoring one reply -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    question: Question
    config: str
    recall_at_5: float
    recall_at_10: float
    recall_in_budget: float  # with k=100: the budget is the only limit
    hit_at_1: bool
    stale_first: bool
    via_reference: int  # answer keys that arrived as a reference of another memory (k=10)
    tokens: int  # the k=10 reply
    baseline_tokens: int  # every memory in scope (the reply's baseline_tokens)
    wide_tokens: int  # the k=100 reply
    budget_cut: bool  # the k=100 reply had to leave a matching memory out for the budget
    top: tuple[str, ...]  # the k=10 reply's keys, in context order (for --misses)


def keys_within(reply: RecallReply, primaries: int) -> list[str]:
    """The keys of the first ``primaries`` primary memories and the references each
    pulled in (the packer lists a memory's references right after it)."""
    out: list[str] = []
    seen = 0
    for memory in reply.memories:
        if not memory.via:
            seen += 1
            if seen > primaries:
                break
        out.append(memory.key)
    return out


def share(answers: Sequence[str], found: Sequence[str]) -> float:
    present = set(found)
    return sum(key in present for key in answers) / len(answers)


def stale_before_answer(question: Question, keys: Sequence[str]) -> bool:
    if not question.superseded:
        return False
    position = {key: i for i, key in reversed(list(enumerate(keys)))}
    stale = min((position[k] for k in question.superseded if k in position), default=None)
    answer = min((position[k] for k in question.answers if k in position), default=None)
    return stale is not None and (answer is None or stale < answer)


async def ask(client: MemoryClient, clock: SimulatedClock, question: Question,
              owners: Sequence[str], config: str, strategy: dict[str, Any] | None
              ) -> Outcome:  # fmt: skip
    clock.now = question.asked_at
    reply = await client.recall(question.text, owners=owners, k=K, budget=BUDGET,
                                strategy=strategy)  # fmt: skip
    # explain: the candidates' decisions tell whether the budget, not k, cut anything
    wide = await client.recall(question.text, owners=owners, k=WIDE_K, budget=BUDGET,
                               strategy=strategy, explain=True)  # fmt: skip
    keys = [m.key for m in reply.memories]
    return Outcome(
        question=question, config=config,
        recall_at_5=share(question.answers, keys_within(reply, 5)),
        recall_at_10=share(question.answers, keys_within(reply, 10)),
        recall_in_budget=share(question.answers, [m.key for m in wide.memories]),
        hit_at_1=bool(keys) and keys[0] in question.answers,
        stale_first=stale_before_answer(question, keys),
        via_reference=sum(m.via != "" and m.key in question.answers for m in reply.memories),
        tokens=reply.tokens, baseline_tokens=reply.baseline_tokens, wide_tokens=wide.tokens,
        budget_cut=any(c.decision.startswith(CUT_OVER_BUDGET) for c in wide.candidates),
        top=tuple(keys),
    )  # fmt: skip


# --- Aggregation and report ------------------------------------------------------------


def aggregate(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    n = len(outcomes)
    if not n:
        return {"n": 0}
    tokens = statistics.fmean(o.tokens for o in outcomes)
    history = statistics.fmean(o.question.history_tokens for o in outcomes)
    figures: dict[str, Any] = {
        "n": n,
        "recall_at_5": round(statistics.fmean(o.recall_at_5 for o in outcomes), 3),
        "recall_at_10": round(statistics.fmean(o.recall_at_10 for o in outcomes), 3),
        "recall_in_budget": round(statistics.fmean(o.recall_in_budget for o in outcomes), 3),
        "hit_at_1": round(statistics.fmean(o.hit_at_1 for o in outcomes), 3),
        "mean_tokens": round(tokens, 1),
        "mean_budget_tokens": round(statistics.fmean(o.wide_tokens for o in outcomes), 1),
        "budget_cut_share": round(statistics.fmean(o.budget_cut for o in outcomes), 3),
        "mean_history_tokens": round(history, 1),
        "mean_scope_tokens": round(statistics.fmean(o.baseline_tokens for o in outcomes), 1),
        "saving": round(1.0 - tokens / history, 4) if history else 0.0,
        "answers_via_reference": sum(o.via_reference for o in outcomes),
    }
    temporal = [o for o in outcomes if o.question.superseded]
    if temporal:
        figures["stale_before_answer"] = round(statistics.fmean(o.stale_first for o in temporal),
                                               3)  # fmt: skip
    return figures


def summarise(outcomes: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for config in dict.fromkeys(o.config for o in outcomes):
        mine = [o for o in outcomes if o.config == config]
        rows = {kind: aggregate([o for o in mine if o.question.kind == kind]) for kind in KINDS}
        rows["all"] = aggregate(mine)
        out[config] = rows
    return out


def print_table(figures: dict[str, dict[str, Any]]) -> None:
    header = (f"{'config':<10} {'kind':<15} {'n':>4} {'R@5':>6} {'R@10':>6} "
              f"{'R@1500tok':>9} {'hit@1':>6} {'stale>ans':>9} {'tokens':>7} {'history':>8} "
              f"{'saving':>7}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for config, rows in figures.items():
        for kind, f in rows.items():
            if not f["n"]:
                continue
            stale = f"{f['stale_before_answer']:.3f}" if "stale_before_answer" in f else "-"
            print(f"{config:<10} {kind:<15} {f['n']:>4} {f['recall_at_5']:>6.3f} "
                  f"{f['recall_at_10']:>6.3f} {f['recall_in_budget']:>9.3f} "
                  f"{f['hit_at_1']:>6.3f} {stale:>9} {f['mean_tokens']:>7.1f} "
                  f"{f['mean_history_tokens']:>8.0f} {f['saving']:>7.1%}")  # fmt: skip
        cut = rows["all"]["budget_cut_share"]
        print(f"{'':<10} k={WIDE_K} replies the budget cut short: {cut:.1%}\n")


def print_misses(outcomes: Sequence[Outcome], config: str) -> None:
    print(f"misses under {config} (answer not in the k={K} reply, or a stale memory first):")
    for o in outcomes:
        if o.config != config or (o.recall_at_10 == 1.0 and not o.stale_first):
            continue
        q = o.question
        print(f"  [{q.kind}] {q.id} {q.text!r}")
        print(f"      answers {list(q.answers)}")
        print(f"      got     {list(o.top[:6])}")
    print()


# --- Main ------------------------------------------------------------------------------


async def run(dataset: Dataset, configs: dict[str, dict[str, Any] | None],
              misses: str | None) -> dict[str, Any]:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zeromem-quality-") as tmp, \
            EmbeddedStack(Path(tmp) / "stack") as stack, simulated_time(dataset.now) as clock:
        settings = stack.settings_for(Settings(data_dir=Path(tmp) / "data", auth_dir=str(
            stack.authority.directory)), "admin")  # secured, as `zeromem up` runs it
        services = await start_services(settings)
        try:
            async with await MemoryClient.connect(settings.nats_url, tenant=TENANT, agent=AGENT,
                                                  shards=settings.shards, timeout=10.0,
                                                  settings=settings) as client:  # fmt: skip
                load_s = await load(client, services.worker, dataset.memories)
                await verify_ages(client, dataset.memories)
                await verify_clock(client, dataset)
                owners = {u.id: u.owners for u in dataset.users}
                eval_started = time.perf_counter()
                outcomes = [
                    await ask(client, clock, q, owners[q.user], config, strategy)
                    for config, strategy in configs.items()
                    for q in dataset.questions
                ]
                eval_s = time.perf_counter() - eval_started
        finally:
            await services.stop()
    figures = summarise(outcomes)
    print_table(figures)
    if misses:
        print_misses(outcomes, misses)
    return {
        "load_s": round(load_s, 2),
        "eval_s": round(eval_s, 2),
        "recalls": 2 * len(outcomes),
        "configs": figures,
        "elapsed_s": round(time.perf_counter() - started, 2),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="3 users, short sessions")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--turns", type=int, help="messages per session (default 40, small 24): "
                        "more turns, more chatter to rank the answers against")
    parser.add_argument("--strategy", action="append", default=[], metavar="NAME=JSON",
                        help="an extra configuration to compare, e.g. "
                             "'typed={\"name\":\"by_type\",\"types\":[\"fact\"],\"boost\":2}'")
    parser.add_argument("--misses", metavar="CONFIG",
                        help="also list the questions this configuration got wrong")
    args = parser.parse_args(argv)
    configs = dict(CONFIGS)
    for extra in args.strategy:
        name, _, spec = extra.partition("=")
        try:
            configs[name] = json.loads(spec)
        except ValueError:
            parser.error(f"--strategy {extra!r}: expected NAME=JSON")
    if args.misses and args.misses not in configs:
        parser.error(f"--misses: unknown configuration {args.misses!r}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    users, turns = (3, 24) if args.small else (8, 40)
    turns = args.turns or turns
    dataset = build(args.seed, users, turns)
    summary = dataset.summary()
    print(f"dataset: seed {summary['seed']}, {summary['users']} users, {summary['turns']} turns "
          f"over {summary['span_days']} days, {summary['memories']} memories, "
          f"{summary['questions']} questions {summary['question_kinds']}")
    print(f"recall: k={K}, budget={BUDGET} (R@1500tok: k={WIDE_K}, same budget)\n")
    result = asyncio.run(run(dataset, configs, args.misses))
    print(json.dumps({"bench": "recall_quality", "small": args.small, "turns": turns, "k": K,
                      "budget": BUDGET, "dataset": summary, **result},
                     separators=(",", ":")))  # fmt: skip


if __name__ == "__main__":
    main()
