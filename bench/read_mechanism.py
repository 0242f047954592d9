"""Which mechanism should answer the read requests: FastStream or a plain nats-py responder?

    python bench/read_mechanism.py [--memories 2000] [--requests 1000] [--rounds 5]

One run, one machine, the same work on each side. After loading ``--memories`` memories
into one owner through the real write path (two `zeromem worker` processes), a server
process (this file with ``--serve``) answers requests on one subject per mechanism and
kind (``subject_of``), every read admitted (``query.admission``) and
given its tenant's turn (``query.gate``) as the read services do:

- ``raw_echo``: a nats-py subscription that answers at once (the baseline: what a NATS
  request-reply costs with no work at all);
- ``fs_current``: FastStream as the read services used it for get/list/stats
  (``logger=None``, ``max_workers``, the handler takes a ``NatsMessage`` and returns a
  ``NatsResponse``);
- ``fs_tuned``: FastStream with everything that can be turned off turned off
  (``apply_types=False``: no fast_depends; a parser and a decoder that hand over the
  nats-py message untouched, the body decoded with msgspec in the handler; ``no_reply``:
  the handler publishes its reply on the connection itself; ``logger=None``;
  ``max_workers``);
- ``responder``: the read services' own ``query.responder`` (a nats-py subscription whose
  callback starts a task per request), with these two routes.

Kinds: ``info`` (a trivial reply: a few settings encoded) and ``recall`` (k=5, budget
1,500 over the loaded owner). The client sends requests one at a time, mechanisms
interleaved in rounds so the machine's drifting load falls on all alike, and prints
p50/p99 and each p50 over the baseline's. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from recall_latency import load, percentile, query, start_services
from write_throughput import stack_settings

from zeromem import naming
from zeromem.embedded import EmbeddedStack
from zeromem.schemas import InfoReply, InfoRequest, RecallRequest, RecallScope, encode
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings

MECHANISMS = ("raw_echo", "fs_current", "fs_tuned", "responder")
KINDS = ("info", "recall")
OWNER = "user:b1"


# --- the server process ----------------------------------------------------------------


async def serve(nats_url: str, redis_url: str) -> None:
    import msgspec
    from faststream.nats import NatsBroker, NatsMessage, NatsResponse
    from nats.aio.msg import Msg
    from opentelemetry import trace

    from zeromem.bus import connect_nats, connect_redis
    from zeromem.query.admission import Refused, admit_request, tenant_of_query_subject
    from zeromem.query.gate import TenantGate
    from zeromem.query.responder import Answer, Responder
    from zeromem.recall.service import RecallService

    settings = Settings().with_urls(nats_url, redis_url)
    limits = settings.limits
    gate = TenantGate(limits)
    redis = connect_redis(settings)
    recall = RecallService(redis, limits=limits)
    info = encode(InfoReply(1, 8, 120.0, 100, 1000, 60.0, 1 << 20))

    async def answer_info(request: Any) -> bytes:
        return info

    async def answer_recall(request: Any) -> bytes:
        return encode(await recall.answer(request))

    answers: dict[str, tuple[type[Any], Callable[[Any], Awaitable[bytes]]]] = {
        "info": (InfoRequest, answer_info),
        "recall": (RecallRequest, answer_recall),
    }

    async def work(subject: str, data: bytes, kind: str) -> bytes:
        """Admission, the tenant's turn, the answer: the same on every mechanism."""
        type_, answer = answers[kind]
        tenant = tenant_of_query_subject(subject)
        if gate.admit(tenant) is not None:
            return b"refused"
        try:
            request = admit_request(subject, data, type_, limits)
        except Refused:
            return b"refused"
        async with gate.slot(tenant):
            return await answer(request)

    nc = await connect_nats(settings, "bench-raw")

    async def echo(msg: Msg) -> None:
        await msg.respond(b"ok")

    await nc.subscribe("zm.q.*.raw_echo.*", cb=echo)

    # The read services' own responder, its routes under kinds of their own
    # (``responder_<kind>``): its subscriptions (``zm.q.*.*.<kind>``) see no other
    # mechanism's subjects.
    responder = Responder(nc, gate, trace.get_tracer("bench"))

    def route(kind: str) -> None:
        type_, answer = answers[kind]

        async def respond(request: Any) -> Answer:
            return Answer(await answer(request))

        responder.route(f"responder_{kind}", type_, respond)

    for kind in KINDS:
        route(kind)
    await responder.start()

    workers = limits.reads_queued + limits.reads_in_flight
    current = NatsBroker(nats_url, logger=None)
    tuned = NatsBroker(nats_url, logger=None, apply_types=False)

    async def raw_decoder(msg: NatsMessage) -> Any:
        return msg.raw_message  # the handler decodes with msgspec (admit_request)

    def subscribe(kind: str) -> None:
        # One handler per subject, its kind bound here: a parameter of its own would be
        # read from the message by FastStream's argument parsing.
        @current.subscriber(f"zm.q.*.fs_current.{kind}", queue="bench", max_workers=workers)
        async def handle_current(msg: NatsMessage) -> NatsResponse:
            raw = msg.raw_message
            return NatsResponse(await work(raw.subject, raw.data, kind))

        @tuned.subscriber(
            f"zm.q.*.fs_tuned.{kind}",
            queue="bench",
            max_workers=workers,
            decoder=raw_decoder,
            no_reply=True,
        )
        async def handle_tuned(msg: Any) -> None:
            await nc.publish(msg.reply, await work(msg.subject, msg.data, kind))

    for kind in KINDS:
        subscribe(kind)

    await current.start()
    await tuned.start()
    _ = msgspec  # the decode in admit_request is msgspec's, on every mechanism
    print("serving", flush=True)
    await asyncio.Event().wait()


# --- the client ------------------------------------------------------------------------


def subject_of(mechanism: str, kind: str) -> str:
    if mechanism == "responder":
        return f"zm.q.bench.bench.responder_{kind}"
    return f"zm.q.bench.{mechanism}.{kind}"


async def measure(settings: Settings, requests: int, rounds: int) -> dict[str, list[float]]:
    from zeromem.bus import connect_nats

    nc = await connect_nats(settings, "bench-client")
    rng = random.Random(3)
    samples: dict[str, list[float]] = {f"{m}/{k}": [] for k in KINDS for m in MECHANISMS}

    def body(kind: str) -> bytes:
        if kind == "info":
            return encode(InfoRequest(tenant="bench"))
        scope = RecallScope(owners=(OWNER,))
        return encode(RecallRequest(tenant="bench", query=query(rng), scope=scope))

    per_round = max(1, requests // rounds)
    for kind in KINDS:
        for mechanism in MECHANISMS:  # warm every path
            for _ in range(20):
                await nc.request(subject_of(mechanism, kind), body(kind), timeout=5)
    for _ in range(rounds):
        for kind in KINDS:
            n = per_round if kind == "info" else max(1, per_round // 3)
            for mechanism in MECHANISMS:
                subject = subject_of(mechanism, kind)
                out = samples[f"{mechanism}/{kind}"]
                for _ in range(n):
                    data = body(kind)
                    start = time.perf_counter()
                    reply = await nc.request(subject, data, timeout=5)
                    out.append((time.perf_counter() - start) * 1000)
                    if reply.data == b"refused" or naming.ERROR_HEADER in (reply.headers or {}):
                        raise RuntimeError(f"{subject} refused a request")
    await nc.close()
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=1000, help="info requests per mechanism")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp), secure=False) as stack:
        settings = stack_settings(stack, Settings())
        procs = await start_services(settings, 2)
        try:
            async with await MemoryClient.connect(
                stack.nats_url, tenant="bench", agent="bench", timeout=300, settings=settings
            ) as client:
                await load(client, OWNER, args.memories, random.Random(7))
        finally:
            for p in procs:  # `zeromem serve` would answer the bench's subjects too
                p.terminate()
            for p in procs:
                p.wait(10)
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", stack.nats_url, stack.redis_url],
            stdout=subprocess.PIPE,
            env=dict(os.environ),
        )
        try:
            assert server.stdout is not None
            await asyncio.to_thread(server.stdout.readline)  # "serving"
            samples = await measure(settings, args.requests, args.rounds)
        finally:
            server.terminate()
            server.wait(10)

    base = percentile(samples["raw_echo/info"] + samples["raw_echo/recall"], 50)
    results = {}
    for name, values in samples.items():
        p50, p99 = percentile(values, 50), percentile(values, 99)
        results[name] = {"p50_ms": round(p50, 3), "p99_ms": round(p99, 3), "n": len(values)}
        print(f"{name:<20} p50 {p50:6.3f} ms   p99 {p99:6.3f} ms   ({p50 / base:.2f}x raw p50)")
    print(json.dumps({"memories": args.memories, "raw_p50_ms": round(base, 3), **results}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        asyncio.run(serve(sys.argv[2], sys.argv[3]))
    else:
        asyncio.run(main())
