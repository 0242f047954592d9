"""Retrieval quality of recall on long multi-session dialogues, next to a plain BM25.

Run: ``.venv/bin/python bench/quality/run.py [--ablations] [--misses dev|heldout]``
(``make bench-quality`` runs it with ``--ablations``).

Data (``dialogue_model.py``): conversations between two named people over 16 sessions on
real dates, every turn longer than 200 characters, written by this project's generator
from two separate worlds: the development split (``stories_dev.py``, used to choose
methods and weights) and the held-out split (``stories_heldout.py``: other people,
storylines and small talk; never used to choose anything). Questions per category:
single, multi (two turns of different sessions), temporal ("when did ...", "what did ...
say about ... in <Month YYYY>"), no_answer.

The real path end to end: each split is written as a JSON Lines file and loaded with
``zeromem.sdk.importer.import_file`` (what ``zeromem import`` runs: the import subject,
the turns' original times, batched fire-and-forget) into an embedded NATS and Redis, with
a worker for every shard and the read services in this process; every question is a
``recall`` through the SDK over NATS, scoped to its conversation (one owner). Each turn's
value is the transcript line (``"Mara: ..."``); its content is what the project's encoder
derives from it.

Figures per question: ``R@5`` / ``R@10``, the share of the answer turns among the first 5
/ 10 memories of a ``k=10, budget=1500`` reply; ``R@1500tok``, their share in a
``k=100, budget=1500`` reply (the budget is then the only limit); ``tokens``, what that
reply injected. For no-answer questions, ``empty`` is the share of replies with nothing
in them. ``bm25`` is ``baseline.py`` on the same turns in the same run.

Encoder retention: the share of labelled facts (names, places, numbers of a storyline's
beats) that the memory content keeps, for the encoder and for a plain 200-character cut.

With ``--ablations``, the read-side ideas (speaker field, neighbour context, query
dates, query expansion, the name rule: a speaker's name counts little as a text word) are
switched off one at a time and on one at a time on top of text-only BM25, and abstention
is tried at two levels (the same stored data, the recall service's ranking settings
changed between runs). ``--try NAME:FIELD=VALUE,...`` adds the default with other
ranking settings (how the defaults were chosen, on the development split only).

The last line of output is one JSON object with every figure.
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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zeromem.bus import connect_nats, connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.encoding import encode_value
from zeromem.recall.packing import PackItem, render_line
from zeromem.recall.ranking import RankingConfig
from zeromem.sdk import MemoryClient
from zeromem.sdk.importer import import_file
from zeromem.serve import ReadServices
from zeromem.settings import Settings
from zeromem.store.tokens import count_tokens
from zeromem.worker.service import WorkerService

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stories_dev
import stories_heldout
from baseline import BM25, Doc, cut, pack
from dialogue_model import KINDS, Dataset, Question, build, check

K = 10
BUDGET = 1500
WIDE_K = 100
SPLITS = {"dev": (stories_dev.WORLD, 6), "heldout": (stories_heldout.WORLD, 4)}
SEED = 1
ABSTENTION_LEVELS = (0.2, 0.3)  # min_evidence values the ablations try


@dataclass(frozen=True, slots=True)
class Outcome:
    question: Question
    system: str
    r5: float
    r10: float
    in_budget: float
    tokens: int
    empty: bool
    top: tuple[str, ...]


def share(answers: Sequence[str], found: Sequence[str]) -> float:
    present = set(found)
    return sum(a in present for a in answers) / len(answers) if answers else 0.0


def outcome(
    q: Question, system: str, ranked: Sequence[str], wide: Sequence[str], tokens: int
) -> Outcome:
    return Outcome(
        q,
        system,
        share(q.answers, ranked[:5]),
        share(q.answers, ranked[:10]),
        share(q.answers, wide),
        tokens,
        not wide,
        tuple(ranked[:6]),
    )


# --- the two systems ------------------------------------------------------------------


async def ask_zeromem(client: MemoryClient, q: Question, system: str) -> Outcome:
    reply = await client.recall(q.text, owners=[q.conversation], k=K, budget=BUDGET)
    wide = await client.recall(q.text, owners=[q.conversation], k=WIDE_K, budget=BUDGET)
    return outcome(
        q, system, [m.key for m in reply.memories], [m.key for m in wide.memories], wide.tokens
    )


def ask_bm25(indexes: dict[str, BM25], q: Question) -> Outcome:
    ranked = indexes[q.conversation].rank(q.text)

    def line(doc: Doc) -> str:
        return render_line(PackItem(doc.key, cut(doc.text), "message", doc.at))

    kept, used = pack(ranked, BUDGET, line, lambda text: count_tokens(text, "cl100k_base"))
    return outcome(q, "bm25", [d.key for d in ranked], kept, used)


# --- loading --------------------------------------------------------------------------


def write_jsonl(dataset: Dataset, path: Path) -> None:
    with path.open("w") as out:
        for turn in dataset.turns:
            stamp = datetime.fromtimestamp(turn.at, UTC).isoformat()
            out.write(
                json.dumps(
                    {"key": turn.key, "value": turn.value, "type": "message", "created_at": stamp}
                )
                + "\n"
            )


async def start_stack(settings: Settings) -> tuple[WorkerService, ReadServices, list[Any]]:
    nc = await connect_nats(settings, name="quality-bench-worker")
    redis = connect_redis(settings)
    worker = WorkerService(settings, list(range(settings.shards)), nc=nc, redis=redis)
    await worker.start()
    await worker.wait_owned()
    read_redis = connect_redis(settings)
    readers = await ReadServices.start(settings, read_redis)
    closers = [readers.stop, read_redis.aclose, worker.stop, nc.close, redis.aclose]
    return worker, readers, closers


# --- encoder retention ----------------------------------------------------------------


def retention(dataset: Dataset) -> dict[str, Any]:
    facts = kept = kept_cut = speakers = artefacts = 0
    for turn in dataset.turns:
        content = encode_value(turn.value)
        speakers += content.startswith(turn.speaker + ":")
        artefacts += " | " in content
        if not turn.facts:
            continue
        low, low_cut = content.lower(), cut(turn.value).lower()
        for fact in turn.facts:
            facts += 1
            kept += fact.lower() in low
            kept_cut += fact.lower() in low_cut
    turns = len(dataset.turns)
    return {
        "facts": facts,
        "encoder": round(kept / facts, 3),
        "cut_200": round(kept_cut / facts, 3),
        "speaker_kept": round(speakers / turns, 3),
        "tails": artefacts,
    }


# --- report ---------------------------------------------------------------------------


def aggregate(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    if not outcomes:
        return {"n": 0}
    answerable = [o for o in outcomes if o.question.answers]
    figures: dict[str, Any] = {
        "n": len(outcomes),
        "tokens": round(statistics.fmean(o.tokens for o in outcomes), 1),
    }
    if answerable:
        for name in ("r5", "r10", "in_budget"):
            figures[name] = round(statistics.fmean(getattr(o, name) for o in answerable), 3)
    else:
        figures["empty"] = round(statistics.fmean(o.empty for o in outcomes), 3)
    return figures


def summarise(outcomes: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for system in dict.fromkeys(o.system for o in outcomes):
        mine = [o for o in outcomes if o.system == system]
        rows = {kind: aggregate([o for o in mine if o.question.kind == kind]) for kind in KINDS}
        rows["all"] = aggregate([o for o in mine if o.question.answers])
        out[system] = rows
    return out


def print_table(split: str, figures: dict[str, dict[str, Any]]) -> None:
    print(
        f"\n{split}: {'system':<22} {'kind':<10} {'n':>4} {'R@5':>6} {'R@10':>6} "
        f"{'R@1500tok':>9} {'tokens':>7}"
    )
    for system, rows in figures.items():
        for kind, f in rows.items():
            if not f["n"]:
                continue
            if "r10" in f:
                print(
                    f"{'':<{len(split) + 2}}{system:<22} {kind:<10} {f['n']:>4} {f['r5']:>6.3f} "
                    f"{f['r10']:>6.3f} {f['in_budget']:>9.3f} {f['tokens']:>7.0f}"
                )
            else:
                print(
                    f"{'':<{len(split) + 2}}{system:<22} {kind:<10} {f['n']:>4} "
                    f"{'empty ' + format(f['empty'], '.3f'):>23} {f['tokens']:>7.0f}"
                )


def print_misses(outcomes: Sequence[Outcome], system: str, texts: dict[str, str]) -> None:
    for o in outcomes:
        if o.system != system or not o.question.answers or o.r10 == 1.0:
            continue
        q = o.question
        print(f"  [{q.kind}] {q.text}")
        for a in q.answers:
            print(f"      answer {a}: {texts[a][:150]}")
        for key in o.top[:3]:
            print(f"      got    {key}: {texts.get(key, '?')[:150]}")


# --- main -----------------------------------------------------------------------------


def variants(ablations: bool) -> dict[str, RankingConfig]:
    """Ranking settings to compare. The default first; with ablations, each idea off
    alone, text-only BM25 with each idea on alone, and the default with abstention."""
    default = RankingConfig()
    out = {"default": default}
    if not ablations:
        return out
    text_only = replace(
        default,
        speaker_weight=0.0,
        neighbour_share=0.0,
        date_weight=1.0,
        expansion_weight=0.0,
        name_text_weight=1.0,
    )
    ideas = {
        "speaker field": {"speaker_weight": 0.0},
        "neighbours": {"neighbour_share": 0.0},
        "query dates": {"date_weight": 1.0},
        "expansion": {"expansion_weight": 0.0},
        "name rule": {"name_text_weight": 1.0},
    }
    for idea, off in ideas.items():
        out[f"- {idea}"] = replace(default, **off)
    out["text only"] = text_only
    for idea, off in ideas.items():
        out[f"text + {idea}"] = replace(text_only, **{name: getattr(default, name) for name in off})
    for level in ABSTENTION_LEVELS:
        out[f"abstain < {level}"] = replace(default, min_evidence=level)
    return out


async def run(datasets: dict[str, Dataset], configs: dict[str, RankingConfig]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    outcomes: dict[str, list[Outcome]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="zeromem-quality-") as tmp,
        EmbeddedStack(Path(tmp) / "stack") as stack,
    ):
        # secured, as `zeromem up` runs it; the admin credential may publish on the import
        # subjects
        settings = stack.settings_for(
            Settings(data_dir=Path(tmp) / "data", auth_dir=str(stack.authority.directory)), "admin"
        )
        _worker, readers, closers = await start_stack(settings)
        try:
            for split, dataset in datasets.items():
                path = Path(tmp) / f"{split}.jsonl"
                write_jsonl(dataset, path)
                connecting = MemoryClient.connect(
                    settings.bus.nats_url,
                    tenant=split,
                    agent="quality-bench",
                    timeout=30.0,
                    shards=settings.shards,
                    settings=settings,
                )
                async with await connecting as client:
                    started = time.perf_counter()
                    report = await import_file(client, path, state_dir=settings.data_dir)
                    load_s = time.perf_counter() - started
                    if report.rejected or report.lines != len(dataset.turns):
                        raise RuntimeError(f"import of {split} failed: {report}")
                    found: list[Outcome] = []
                    for name, config in configs.items():
                        readers.recall.config = config
                        found += [await ask_zeromem(client, q, name) for q in dataset.questions]
                indexes = {
                    c.owner: BM25([Doc(t.key, t.value, t.at) for t in c.turns])
                    for c in dataset.conversations
                }
                found += [ask_bm25(indexes, q) for q in dataset.questions]
                outcomes[split] = found
                results[split] = {
                    "import_s": round(load_s, 2),
                    "import_rate": round(len(dataset.turns) / load_s),
                    "figures": summarise(found),
                }
        finally:
            for close in closers:
                with contextlib.suppress(Exception):
                    await close()
    return {"results": results, "outcomes": outcomes}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ablations",
        action="store_true",
        help="also each read-side idea off alone, and on alone over BM25",
    )
    parser.add_argument("--misses", choices=list(SPLITS), help="list the default's misses")
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="NAME:FIELD=VALUE,...",
        help="also the default with these ranking settings changed (repeatable), e.g. 'b.5:b=0.5'",
    )
    parser.add_argument(
        "--split",
        choices=list(SPLITS),
        action="append",
        help="only this split (repeatable; default both)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    datasets = {}
    for split in args.split or SPLITS:
        world, conversations = SPLITS[split]
        datasets[split] = build(world, split, SEED, conversations)
        check(datasets[split])
        print(f"{split}: {json.dumps(datasets[split].summary())}")
    encoder = {split: retention(d) for split, d in datasets.items()}
    for split, figures in encoder.items():
        print(f"{split}: encoder retention {json.dumps(figures)}")
    configs = variants(args.ablations)
    for spec in args.tries:
        name, _, settings = spec.partition(":")
        overrides = dict(pair.split("=", 1) for pair in settings.split(",") if pair)
        configs[name] = RankingConfig.from_dict(
            {field: float(value) for field, value in overrides.items()}
        )
    found = asyncio.run(run(datasets, configs))
    for split, result in found["results"].items():
        print(
            f"\n{split}: imported {len(datasets[split].turns)} turns in "
            f"{result['import_s']} s ({result['import_rate']} turns/s)"
        )
        print_table(split, result["figures"])
        figures = result["figures"]
        for metric in ("r10", "in_budget"):
            ours, base = figures["default"]["all"][metric], figures["bm25"]["all"][metric]
            gain = (ours / base - 1) if base else float("inf")
            print(
                f"{split}: default vs bm25 {metric}: {ours:.3f} vs {base:.3f} "
                f"({gain:+.1%} relative)"
            )
    if args.misses:
        texts = {t.key: t.value for t in datasets[args.misses].turns}
        print(f"\nmisses of the default on {args.misses}:")
        print_misses(found["outcomes"][args.misses], "default", texts)
    print(
        json.dumps(
            {
                "bench": "recall_quality_dialogues",
                "k": K,
                "budget": BUDGET,
                "datasets": {s: d.summary() for s, d in datasets.items()},
                "encoder_retention": encoder,
                "results": found["results"],
                "elapsed_s": round(time.perf_counter() - started, 1),
            },
            separators=(",", ":"),
        )
    )


if __name__ == "__main__":
    main()
