"""Where one recall's time goes, hop by hop, in the client and in the read service.

    python bench/recall_hops.py [--size 10000] [--queries 1000] [--cpu]

Starts a secured stack with two workers, loads ``--size`` memories into one owner through
the SDK (the benchmark's memories, ``recall_latency.py``), runs ``zeromem serve`` under
this script (its ``serve`` sub-command: the same service with a timestamp at each hop) and
times ``--queries`` recalls one after another (k=5, budget 1,500, the benchmark's
queries). Prints each hop's p50, mean and p99, then the hops of the slowest 2%; the last
line is JSON.

Timestamps are ``time.perf_counter`` (CLOCK_MONOTONIC, one clock for every process on the
machine), so the hops between the processes (client -> read service, and back) are
measured too. ``--cpu``: each process's thread CPU instead (``time.thread_time``): the hops
inside one process only, and immune to the waits for a CPU that a loaded machine adds.
Redis's own time for the survey script is its commandstats over the same recalls.

The stamps patch nats-py and zeromem functions in the two processes (wrappers that call
the originals): a measuring tool, not a picture of the service as it runs elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOPS_FILE = "ZEROMEM_BENCH_HOPS_FILE"  # where the timed read service writes its stamps
HOPS_CPU = "ZEROMEM_BENCH_HOPS_CPU"  # "1": thread CPU instead of the monotonic clock

Stamps = dict[str, float]


def clock() -> Callable[[], float]:
    return time.thread_time if os.environ.get(HOPS_CPU) == "1" else time.perf_counter


def patch(*replacements: tuple[object, str, object]) -> None:
    """Each (owner, name, wrapper): ``owner.name`` becomes the wrapper (which calls the
    original it took beforehand)."""
    for owner, name, wrapper in replacements:
        setattr(owner, name, wrapper)


def timed_serve() -> int:
    """``zeromem serve`` with a stamp at each hop of every recall, written at exit."""
    import nats.aio.client as nats_client
    import nats.aio.transport as nats_transport

    import zeromem.query.responder as responder
    import zeromem.query.service as query_service
    import zeromem.recall.service as recall_service
    from zeromem.cli.main import main
    from zeromem.store import scripts

    now = clock()
    records: list[Stamps] = []
    current: Stamps = {}

    process_msg: Any = nats_client.Client._process_msg

    async def on_message(
        self: nats_client.Client, sid: int, subject: bytes, reply: bytes, data: bytes, hdr: bytes
    ) -> None:
        nonlocal current
        if subject.startswith(b"zm.q.") and subject.endswith(b".recall"):
            current = {"arrived": now()}
            records.append(current)
        await process_msg(self, sid, subject, reply, data, hdr)

    answer: Any = responder.Responder._answer

    async def on_answer(self: responder.Responder, msg: Any, tenant: str, route: Any) -> None:
        recall = route.kind == "recall"
        if recall:
            current["task"] = now()
        await answer(self, msg, tenant, route)

    see_writes: Any = query_service._see_writes

    async def on_see_writes(redis: Any, after: Any, *args: Any) -> None:
        current["admitted"] = now()
        await see_writes(redis, after, *args)
        current["seen"] = now()

    gather: Any = recall_service.gather

    async def on_gather(*args: Any, **kwargs: Any) -> Any:
        current["gather"] = now()
        gathered = await gather(*args, **kwargs)
        current["gathered"] = now()
        return gathered

    call: Any = scripts.Script.__call__

    async def on_call(self: scripts.Script, redis: Any, keys: Any = (), args: Any = ()) -> Any:
        current.setdefault("script", now())
        reply = await call(self, redis, keys, args)
        current["scripted"] = now()
        return reply

    pack: Any = recall_service.pack

    def on_pack(*args: Any, **kwargs: Any) -> Any:
        current["ranked"] = now()
        result = pack(*args, **kwargs)
        current["packed"] = now()
        return result

    publish: Any = nats_client.Client.publish

    async def on_publish(
        self: nats_client.Client,
        subject: str,
        payload: bytes = b"",
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        if current and "_INBOX" in subject and "reply" not in current:
            current["reply"] = now()
        await publish(self, subject, payload, reply, headers)

    writelines: Any = nats_transport.TcpTransport.writelines

    def on_writelines(self: nats_transport.TcpTransport, payload: list[bytes]) -> Any:
        if "reply" in current:
            current.setdefault("written", now())
        return writelines(self, payload)

    answered: Any = recall_service.RecallService.answered

    def on_answered(self: recall_service.RecallService, *args: Any) -> None:
        started = now()
        answered(self, *args)
        current["after_reply_s"] = now() - started

    patch(
        (nats_client.Client, "_process_msg", on_message),
        (nats_client.Client, "publish", on_publish),
        (nats_transport.TcpTransport, "writelines", on_writelines),
        (responder.Responder, "_answer", on_answer),
        (query_service, "_see_writes", on_see_writes),
        (recall_service, "gather", on_gather),
        (recall_service, "pack", on_pack),
        (recall_service.RecallService, "answered", on_answered),
        (scripts.Script, "__call__", on_call),
    )

    def write() -> None:
        Path(os.environ[HOPS_FILE]).write_text(json.dumps(records))

    atexit.register(write)
    return main(["serve"])


# --- the client side -------------------------------------------------------------------

SERVE_HOPS = [  # (name, from stamp, to stamp) in the read service
    ("serve: arrival -> its task", "arrived", "task"),
    ("serve: task -> admitted, its turn", "task", "admitted"),
    ("serve: read your writes", "admitted", "seen"),
    ("serve: terms, expansion, strategy", "seen", "gather"),
    ("serve: survey arguments", "gather", "script"),
    ("serve: survey script call", "script", "scripted"),
    ("serve: stage two's rows, features", "scripted", "gathered"),
    ("serve: ranking", "gathered", "ranked"),
    ("serve: packing", "ranked", "packed"),
    ("serve: reply built, published", "packed", "reply"),
    ("serve: publish -> socket write", "reply", "written"),
    ("serve: arrival -> reply written", "arrived", "written"),
]
CLIENT_HOPS = [
    ("client: own writes' positions", "start", "positions"),
    ("client: request built, encoded", "positions", "request"),
    ("client: request() -> socket write", "request", "written"),
    ("client: reply read -> returned", "replied", "done"),
    ("client: whole recall", "start", "done"),
]
BETWEEN = [  # (name, client stamp or serve stamp, ...): wall clock only
    ("net: client write -> serve arrival", ("client", "written"), ("serve", "arrived")),
    ("net: serve write -> client reply", ("serve", "written"), ("client", "replied")),
]


def instrument_client(now: Callable[[], float], current: Stamps) -> None:
    import nats.aio.client as nats_client
    import nats.aio.transport as nats_transport

    from zeromem.sdk import reads

    own_writes: Any = reads.ReadMethods._own_writes

    async def on_own_writes(self: reads.ReadMethods, owners: Any) -> Any:
        positions = await own_writes(self, owners)
        current["positions"] = now()
        return positions

    request: Any = nats_client.Client.request

    async def on_request(self: nats_client.Client, *args: Any, **kwargs: Any) -> Any:
        current["request"] = now()
        return await request(self, *args, **kwargs)

    writelines: Any = nats_transport.TcpTransport.writelines

    def on_writelines(self: nats_transport.TcpTransport, payload: list[bytes]) -> Any:
        if "request" in current:
            current.setdefault("written", now())
        return writelines(self, payload)

    process_msg: Any = nats_client.Client._process_msg

    async def on_message(
        self: nats_client.Client, sid: int, subject: bytes, reply: bytes, data: bytes, hdr: bytes
    ) -> None:
        if "written" in current and b"_INBOX" in subject:
            current.setdefault("replied", now())
        await process_msg(self, sid, subject, reply, data, hdr)

    patch(
        (reads.ReadMethods, "_own_writes", on_own_writes),
        (nats_client.Client, "request", on_request),
        (nats_transport.TcpTransport, "writelines", on_writelines),
        (nats_client.Client, "_process_msg", on_message),
    )


def spans(records: list[Stamps], start: str, end: str) -> list[float]:
    return [r[end] - r[start] for r in records if start in r and end in r]


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples) or [float("nan")]
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1e3, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1e3, 3),
    }


async def run(args: argparse.Namespace) -> None:
    import recall_latency as bench
    from write_throughput import role_env, stack_settings

    from zeromem.bus import connect_redis
    from zeromem.embedded import EmbeddedStack
    from zeromem.sdk import MemoryClient
    from zeromem.sdk.errors import NoResponderError, ServiceUnavailableError
    from zeromem.settings import Settings

    now = time.thread_time if args.cpu else time.perf_counter
    current: Stamps = {}
    instrument_client(now, current)
    rng = random.Random(7)
    owner = f"user:s{args.size}"
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedStack(Path(tmp), secure=True) as stack,
    ):
        settings = stack_settings(stack, Settings())
        procs = await bench.start_services(settings, 2)
        bench.stop(procs[-1:])
        hops_file = Path(tmp) / "hops.json"
        extra = {HOPS_FILE: str(hops_file), HOPS_CPU: "1" if args.cpu else "0"}
        procs[-1] = subprocess.Popen(
            [sys.executable, __file__, "serve"],
            env=role_env(settings, "reader", extra),
            stderr=subprocess.DEVNULL,
        )
        records: list[Stamps] = []
        redis = connect_redis(settings)
        try:
            async with await MemoryClient.connect(
                stack.nats_url, tenant="bench", agent="bench", timeout=600, settings=settings
            ) as client:
                await bench.load(client, owner, args.size, rng)
                deadline = time.monotonic() + 60
                while True:  # until the timed read service answers
                    try:
                        await client.info()
                        break
                    except (NoResponderError, ServiceUnavailableError):
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.1)
                for _ in range(50):  # warm
                    await client.recall(bench.query(rng), owners=[owner])
                await redis.config_resetstat()
                for _ in range(args.queries):
                    current.clear()
                    current["start"] = now()
                    await client.recall(bench.query(rng), owners=[owner], k=5, budget=1500)
                    current["done"] = now()
                    records.append(dict(current))
                survey = (await redis.info("commandstats")).get("cmdstat_evalsha_ro", {})
        finally:
            await redis.aclose()
            bench.stop(procs)
        served: list[Stamps] = json.loads(hops_file.read_text())[-args.queries :]

    out: dict[str, dict[str, float]] = {}
    for name, start, end in CLIENT_HOPS:
        out[name] = figures(spans(records, start, end))
    for name, start, end in SERVE_HOPS:
        out[name] = figures(spans(served, start, end))
    out["serve: after the reply (metrics, usage, audit)"] = figures(
        [s["after_reply_s"] for s in served if "after_reply_s" in s]
    )
    paired = len(served) == len(records)
    if paired and not args.cpu:
        for name, (side_a, a), (side_b, b) in BETWEEN:
            sides = {"client": records, "serve": served}
            out[name] = figures(
                [
                    y[b] - x[a]
                    for x, y in zip(sides[side_a], sides[side_b], strict=True)
                    if a in x and b in y
                ]
            )
    unit = "thread CPU" if args.cpu else "wall"
    print(f"{args.queries} recalls, {args.size} in scope, {unit} per hop:")
    for name, fig in out.items():
        print(
            f"  {name:48} p50 {fig['p50_ms']:7.3f} ms   mean {fig['mean_ms']:7.3f}"
            f"   p99 {fig['p99_ms']:7.3f}"
        )
    redis_ms = survey.get("usec_per_call", 0.0) / 1e3
    print(f"  {'redis: the survey script, server side (mean)':48} {redis_ms:7.3f} ms")
    if paired and not args.cpu:
        print("the slowest 2%: whole recall / client -> serve / in serve / of it the survey")
        print("call / serve -> client (ms)")
        slowest = sorted(
            range(len(records)), key=lambda i: records[i]["start"] - records[i]["done"]
        )
        for i in slowest[: max(1, args.queries // 50)]:
            c, s = records[i], served[i]
            parts = [
                c["done"] - c["start"],
                s["arrived"] - c["written"],
                s["written"] - s["arrived"],
                s["scripted"] - s["script"],
                c["replied"] - s["written"],
            ]
            print("  " + " / ".join(f"{p * 1e3:6.2f}" for p in parts))
    print(json.dumps({"size": args.size, "clock": unit, "hops": out, "survey_ms": redis_ms}))


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        sys.exit(timed_serve())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000, help="memories in the one owner")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--cpu", action="store_true", help="thread CPU per hop, not wall time")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
