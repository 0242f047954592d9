"""A worker's own CPU per append, stage by stage, in one process with no server.

    python bench/worker_micro.py [--commands 20000] [--rounds 5]

The append workload's puts (bench/workloads.py), encoded as the SDK sends them, go through
the stages a worker runs for each command that are pure Python: decoding the command,
the engine's decision (analysis and index operations included), the decision encoded for
the commit script, the audit entry, the result encoded for the change feed, and per batch
of 256 the commit script's argument and the audit message. Each stage is timed alone over
all the commands, round after round; the best round is reported (the code's cost: the
machine's noise only adds). The analysis caches are cleared before each round of the
decision stage, so every round analyses the same fresh contents; the stemmer's and
tokenizer's per-word caches stay warm after the first round, as they do in a worker
that has run for a while.

Run it from two trees with the same inputs to compare them (``PYTHONPATH`` first). The
last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from zeromem.lifecycle.audit import write_entry
from zeromem.lifecycle.redact import Redactor
from zeromem.schemas import AuditBatch, decode_command, encode
from zeromem.store.items import KeyState
from zeromem.worker import analysis
from zeromem.worker.analysis import default_engine
from zeromem.worker.store import _PACK, Store

sys.path.insert(0, str(Path(__file__).parent))
from workloads import appends, as_put, take

BATCH = 256


def puts(n: int) -> list[bytes]:
    out = []
    for i, spec in enumerate(take(appends(n, 100), n)):
        put = as_put(spec, i, "01JMICRO")
        out.append(encode(put))
    return out


def best(rounds: int, run: Callable[[], Any], before: Callable[[], None] | None = None) -> float:
    times = []
    for _ in range(rounds):
        if before is not None:
            before()
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = args.commands
    raw = puts(n)
    redactor = Redactor()
    engine = default_engine(redactor=redactor)
    engine.warm_up()
    store = Store(None, result_ttl_s=86_400, tombstone_ttl_s=86_400)  # type: ignore[arg-type]
    encoder = msgspec.msgpack.Encoder().encode
    commands = [decode_command(r) for r in raw]

    def clear() -> None:
        analysis._analyse.cache_clear()

    outcomes: list[Any] = []

    def decode() -> None:
        for r in raw:
            decode_command(r)

    def decide() -> None:
        outcomes.clear()
        for c in commands:
            outcomes.append(engine.decide(c, c.key, KeyState(), c.ts))

    decisions: list[Any] = []

    def decision() -> None:
        decisions.clear()
        for seq, o in enumerate(outcomes, 1):
            o.sequence = seq
            decisions.append(store.decision(o, seq, 3))

    entries: list[Any] = []

    def entry() -> None:
        entries.clear()
        for seq, (c, o) in enumerate(zip(commands, outcomes, strict=True), 1):
            entries.append(write_entry(c, seq, o.result, redactor))

    def result() -> None:
        for o in outcomes:
            encoder(o.result)

    def per_batch() -> None:
        for start in range(0, n, BATCH):
            _PACK(decisions[start : start + BATCH])
            encoder(AuditBatch(entries=tuple(entries[start : start + BATCH])))

    stages: dict[str, float] = {}
    for name, run, before in (
        ("decode", decode, None),
        ("decide", decide, clear),
        ("decision", decision, None),
        ("audit entry", entry, None),
        ("result encode", result, None),
        ("commit arg + audit message", per_batch, None),
    ):
        stages[name] = best(args.rounds, run, before) / n * 1e6
    total = sum(stages.values())
    print(f"worker CPU per append by stage, µs (best of {args.rounds} rounds, {n} appends)")
    for name, us in stages.items():
        print(f"  {name:28s} {us:6.2f}")
    print(f"  {'all':28s} {total:6.2f}")
    print(json.dumps({k: round(v, 2) for k, v in stages.items()} | {"all": round(total, 2)}))


if __name__ == "__main__":
    main()
