"""Recall latency over NATS at growing scope sizes, next to a raw NATS request-reply.

    python bench/recall_latency.py [--sizes 1000,10000,100000] [--store 1000000] [--queries 300]
    python bench/recall_latency.py --encryption [--sizes 2000] [--queries 300]

Loads memories through the real write path (SDK -> JetStream -> `zeromem worker`
processes -> Redis) into owners of 1k, 10k and 100k memories, plus filler owners so the
store holds --store memories in all; then, with `zeromem serve` running as its own process,
times SDK recalls (k=5, budget 1,500) of random 1-3 word queries in each scope. The
baseline is a raw NATS request-reply round trip to a responder that answers at once,
measured in the same run. The last line is JSON.

``--compare-serve PYTHON``: a second `zeromem serve` run by another interpreter (another
checkout's virtualenv: its code), alternating with this tree's over two rounds on the same
stack and memories; each side's figures are the mean of its rounds. The way to measure a
change of the read path A/B in one run.

Every line also says where a recall's time went: the CPU each process spent per request
(the client, ``zeromem serve``, nats-server and redis-server; from the scheduler's own
accounting in /proc, every thread), next to the raw request-reply's. The processes run one
after another for a recall, so their sum is about its wall time on an idle machine.

``--encryption``: the same memories in one owner of a plain tenant and one of a tenant
listed in ZEROMEM_ENCRYPT_TENANTS (every memory sealed with its owner's data key, no term
postings), timed in one run: a filtered recall (type ``fact``, no query terms: both read
and rank every card, the encrypted one opening each), and how many memories a term query
finds in each (none in the encrypted one: its terms are not indexed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from write_throughput import role_env, stack_settings, start_reader, wait_for_workers

from zeromem.bus import connect_nats, provision
from zeromem.embedded import EmbeddedStack
from zeromem.sdk import MemoryClient
from zeromem.sdk.errors import ServiceUnavailableError
from zeromem.settings import LifecycleSettings, Settings

WORDS = [f"w{i}" for i in range(5000)]  # a vocabulary with a Zipf-like use: w0 common, w4999 rare
TOPICS = [
    "invoice",
    "deploy",
    "meeting",
    "refund",
    "password",
    "shipment",
    "language",
    "budget",
    "schedule",
    "contract",
    "ticket",
    "upgrade",
    "release",
    "account",
    "report",
]


def content(rng: random.Random) -> str:
    picked = [WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)] for _ in range(6)]
    return f"{rng.choice(TOPICS)} {' '.join(picked)} {rng.choice(TOPICS)} id{rng.randrange(10**6)}"


def query(rng: random.Random) -> str:
    words = [rng.choice(TOPICS)] + [WORDS[rng.randrange(200)] for _ in range(rng.randrange(3))]
    return " ".join(words)


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def cpu_ns(pid: int) -> int:
    """CPU time ``pid`` has run (ns, all its threads: /proc/<pid>/task/*/schedstat)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    return total


def stack_processes() -> dict[str, int]:
    """The nats-server and redis-server this process started (the embedded stack's)."""
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != os.getpid():
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                # redis-server rewrites its title: "/usr/bin/redis-server 127.0.0.1:port"
                program = os.path.basename(f.read().split(b"\0")[0].decode().split(" ")[0])
            if program in ("nats-server", "redis-server"):
                found[program] = int(entry)
    return found


class CpuMeter:
    """CPU per request of the processes a request goes through (ms), between ``start``
    and ``stop``."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._at: dict[str, int] = {}

    def start(self) -> None:
        self._at = {name: cpu_ns(pid) for name, pid in self.pids.items()}

    def stop(self, requests: int) -> dict[str, float]:
        return {
            name: (cpu_ns(pid) - self._at[name]) / requests / 1e6 for name, pid in self.pids.items()
        }


def cpu_line(cpu: dict[str, float]) -> str:
    parts = " ".join(f"{name} {ms:.2f}" for name, ms in cpu.items())
    return f"cpu ms/request: {parts}, sum {sum(cpu.values()):.2f}"


async def load(client: MemoryClient, owner: str, n: int, rng: random.Random) -> None:
    for i in range(n):
        await client.put(
            f"{owner}:m{i}",
            i,
            content=content(rng),
            type="fact",
            wait="applied" if i == n - 1 else "none",
        )


async def raw_round_trips(
    settings: Settings, n: int, meter: CpuMeter | None = None
) -> tuple[list[float], dict[str, float]]:
    """Round trips (ms) to a responder in this process that answers at once, and the
    CPU per round trip of ``meter``'s processes."""
    nc = await connect_nats(settings, "bench-raw")  # the operator's identity, on a secured stack

    async def echo(msg) -> None:  # type: ignore[no-untyped-def]
        await msg.respond(b"ok")

    await nc.subscribe("bench.echo", cb=echo)
    samples = []
    meter = meter or CpuMeter({})
    meter.start()
    for _ in range(n):
        start = time.perf_counter()
        await nc.request("bench.echo", b"ping" * 16, timeout=2)
        samples.append((time.perf_counter() - start) * 1000)
    cpu = meter.stop(n)
    await nc.close()
    return samples, cpu


async def start_services(settings: Settings, workers: int) -> list[subprocess.Popen[bytes]]:
    """The streams provisioned, ``workers`` worker processes and a read service, each
    under its service identity on a secured stack; returns once recall answers."""
    nc = await connect_nats(settings, "bench")
    await provision(nc.jetstream(), settings)
    await nc.close()

    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "zeromem.cli.main",
                "worker",
                "--index",
                str(i),
                "--count",
                str(workers),
            ],
            env=role_env(settings, "worker"),
            stderr=subprocess.DEVNULL,
        )
        for i in range(workers)
    ]
    await wait_for_workers(settings)
    procs.append(await start_reader(settings))
    return procs


Timed = dict[int, tuple[float, float, float, dict[str, float]]]


async def time_sizes(
    client: MemoryClient,
    sizes: list[int],
    queries: int,
    rng: random.Random,
    meter: CpuMeter | None = None,
) -> Timed:
    """p50 and p99 (ms), mean tokens, and the CPU per recall of ``meter``'s processes, of
    ``queries`` recalls in each scope size."""
    results = {}
    meter = meter or CpuMeter({})
    for size in sizes:
        for _ in range(20):  # warm the service
            await client.recall(query(rng), owners=[f"user:s{size}"])
        samples = []
        tokens = []
        meter.start()
        for _ in range(queries):
            q = query(rng)
            start = time.perf_counter()
            reply = await client.recall(q, owners=[f"user:s{size}"], k=5, budget=1500)
            samples.append((time.perf_counter() - start) * 1000)
            tokens.append(reply.tokens)
        results[size] = (
            percentile(samples, 50),
            percentile(samples, 99),
            statistics.mean(tokens),
            meter.stop(queries),
        )
    return results


def mean_rounds(rounds: list[Timed]) -> Timed:
    return {
        size: (
            statistics.fmean(r[size][0] for r in rounds),
            statistics.fmean(r[size][1] for r in rounds),
            statistics.fmean(r[size][2] for r in rounds),
            {
                name: statistics.fmean(r[size][3][name] for r in rounds)
                for name in rounds[0][size][3]
            },
        )
        for size in rounds[0]
    }


async def start_serve(
    settings: Settings, python: str = sys.executable, extra: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A `zeromem serve` run by ``python`` (its code: another checkout's virtualenv
    measures that checkout), once it answers."""
    if python == sys.executable:
        return await start_reader(settings, extra)
    reader = subprocess.Popen(
        [python, "-m", "zeromem.cli.main", "serve"],
        env=role_env(settings, "reader", extra),
        stderr=subprocess.DEVNULL,
    )
    async with await MemoryClient.connect(
        settings.bus.nats_url, tenant="bench-probe", agent="bench", settings=settings
    ) as probe:
        deadline = time.monotonic() + 60
        while True:
            try:
                await probe.info()
                return reader
            except ServiceUnavailableError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(10)


async def encryption_cost(args: argparse.Namespace) -> None:
    """Recall over a plain owner and over an encrypted one, the same memories, one run."""
    size = int(args.sizes.split(",")[0])
    tenants = {"plain": "bench", "encrypted": "bench-enc"}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp)) as stack:
        settings = stack_settings(
            stack, Settings(lifecycle=LifecycleSettings(encrypt_tenants=tenants["encrypted"]))
        )
        procs = await start_services(settings, args.workers)
        results: dict[str, tuple[float, float, float]] = {}
        try:
            for name, tenant in tenants.items():
                async with await MemoryClient.connect(
                    stack.nats_url, tenant=tenant, agent="bench", timeout=600, settings=settings
                ) as client:
                    await load(client, "user:s", size, random.Random(7))
                    rng = random.Random(11)
                    for _ in range(20):  # warm the service
                        await client.recall("", owners=["user:s"], types=["fact"])
                    samples = []
                    for _ in range(args.queries):
                        start = time.perf_counter()
                        await client.recall("", owners=["user:s"], types=["fact"], k=5)
                        samples.append((time.perf_counter() - start) * 1000)
                    found = [
                        len((await client.recall(query(rng), owners=["user:s"], k=5)).memories)
                        for _ in range(50)
                    ]
                    results[name] = (
                        percentile(samples, 50),
                        percentile(samples, 99),
                        statistics.mean(found),
                    )
        finally:
            stop(procs)
    plain, sealed = results["plain"], results["encrypted"]
    print(f"filtered recall over {size} memories (type=fact, k=5), {args.queries} recalls")
    for name, (p50, p99, found) in results.items():
        print(
            f"  {name:9}  p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   "
            f"term queries find {found:.1f} memories on average"
        )
    print(f"encrypted / plain: p50 {sealed[0] / plain[0]:.2f}x, p99 {sealed[1] / plain[1]:.2f}x")
    print(
        json.dumps(
            {
                "memories": size,
                "plain_p50_ms": round(plain[0], 3),
                "encrypted_p50_ms": round(sealed[0], 3),
                "p50_ratio": round(sealed[0] / plain[0], 3),
                "p99_ratio": round(sealed[1] / plain[1], 3),
                "term_query_found": {"plain": plain[2], "encrypted": sealed[2]},
            }
        )
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--store", type=int, default=1_000_000, help="memories in the store in all")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-auth", action="store_true", help="open servers (no credentials)")
    parser.add_argument(
        "--encryption", action="store_true", help="recall over plain vs encrypted memories"
    )
    comparison = parser.add_mutually_exclusive_group()
    comparison.add_argument(
        "--compare-expansion",
        action="store_true",
        help="also time each scope with query expansion off (a second `zeromem serve` with "
        "ZEROMEM_RECALL_EXPANSION=0, alternating with the default over two rounds)",
    )
    comparison.add_argument(
        "--compare-serve",
        metavar="PYTHON",
        help="also time each scope with a `zeromem serve` run by this interpreter (another "
        "checkout's .venv/bin/python: its code), alternating with this tree's over two rounds",
    )
    args = parser.parse_args()
    if args.encryption:
        await encryption_cost(args)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = random.Random(7)

    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedStack(Path(tmp), secure=not args.no_auth) as stack,
    ):
        settings = stack_settings(stack, Settings())
        servers = stack_processes()
        client_and_bus = {
            "client": os.getpid(),
            "nats": servers["nats-server"],
            "redis": servers["redis-server"],
        }
        procs = await start_services(settings, args.workers)

        def meter() -> CpuMeter:
            return CpuMeter({**client_and_bus, "serve": procs[-1].pid})

        try:
            # Each owner is loaded fire-and-forget and its last put waits for the backlog:
            # for the 100k owner that took over 30 s on a busy machine (load average 6 on 2
            # cores), so the wait may take 10 minutes.
            async with await MemoryClient.connect(
                stack.nats_url, tenant="bench", agent="bench", timeout=600, settings=settings
            ) as client:
                started = time.perf_counter()
                for size in sizes:
                    await load(client, f"user:s{size}", size, rng)
                filler = max(0, args.store - sum(sizes))
                owners = 1000
                for o in range(owners):
                    await load(client, f"user:f{o}", filler // owners, rng)
                load_s = time.perf_counter() - started
                print(
                    f"loaded {sum(sizes) + filler // owners * owners} memories in {load_s:.0f} s",
                    file=sys.stderr,
                )

                raw, raw_cpu = await raw_round_trips(
                    settings, args.queries * 2, CpuMeter(client_and_bus)
                )
                results = await time_sizes(client, sizes, args.queries, rng, meter())
                other: Timed = {}
                other_name = ""
                if args.compare_expansion or args.compare_serve:
                    other_name = (
                        "expansion off"
                        if args.compare_expansion
                        else f"serve of {args.compare_serve}"
                    )
                    other_env = {"ZEROMEM_RECALL_EXPANSION": "0"} if args.compare_expansion else {}
                    other_python = args.compare_serve or sys.executable
                    # Alternate the two readers over two rounds (this, other, this, other);
                    # each size's figures are the mean of its rounds.
                    this_rounds, other_rounds = [results], []
                    for round_ in range(2):
                        for side in ("other", "this") if round_ == 0 else ("other",):
                            stop(procs[-1:])
                            procs[-1] = await (
                                start_serve(settings, other_python, other_env)
                                if side == "other"
                                else start_serve(settings)
                            )
                            timed = await time_sizes(client, sizes, args.queries, rng, meter())
                            (other_rounds if side == "other" else this_rounds).append(timed)
                    results = mean_rounds(this_rounds)
                    other = mean_rounds(other_rounds)
        finally:
            stop(procs)

    raw50, raw99 = percentile(raw, 50), percentile(raw, 99)
    print(f"raw NATS request-reply        p50 {raw50:6.2f} ms   p99 {raw99:6.2f} ms")
    print(f"    {cpu_line(raw_cpu)}")
    for size, (p50, p99, tok, cpu) in results.items():
        print(
            f"recall, {size:>7} in scope   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   "
            f"({p50 / raw50:.1f}x raw p50; mean {tok:.0f} tokens)"
        )
        print(f"    {cpu_line(cpu)}")
    small, large = results[sizes[0]][0], results[sizes[-1]][0]
    print(f"scaling p50 {sizes[-1]} / {sizes[0]}: {large / small:.2f}x")
    for size, (p50, p99, _tok, cpu) in other.items():
        this50, this99, _, _ = results[size]
        print(
            f"{other_name}, {size:>7} in scope   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   "
            f"({p50 / raw50:.1f}x raw p50; this / that: p50 {this50 / p50:.2f}x, "
            f"p99 {this99 / p99:.2f}x)"
        )
        print(f"    {cpu_line(cpu)}")

    def figures(timed: Timed) -> dict[str, dict[str, object]]:
        return {
            str(size): {
                "p50_ms": round(v[0], 3),
                "p99_ms": round(v[1], 3),
                "cpu_ms_per_request": {name: round(ms, 3) for name, ms in v[3].items()},
            }
            for size, v in timed.items()
        }

    print(
        json.dumps(
            {
                "store": args.store,
                "raw_p50_ms": round(raw50, 3),
                "raw_p99_ms": round(raw99, 3),
                "raw_cpu_ms_per_request": {name: round(ms, 3) for name, ms in raw_cpu.items()},
                "recall": figures(results),
                "scaling_p50_largest_over_smallest": round(large / small, 3),
                "compared": other_name,
                "compared_recall": figures(other),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
