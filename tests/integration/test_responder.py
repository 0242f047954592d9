"""The read responder's own guarantees, on a real NATS server with routes of the test's
own: a refusal and a failure are error replies with their code in the header, a request
in hand when the service stops is still answered (drain), and one tenant's requests
waiting for their turn never hold up another tenant's."""

from __future__ import annotations

import asyncio

import msgspec
from msgspec.structs import replace
from opentelemetry import trace

from zeromem import naming
from zeromem.bus import connect_nats
from zeromem.query.admission import Refused
from zeromem.query.gate import TenantGate
from zeromem.query.responder import Answer, Responder
from zeromem.schemas import ErrorReply, InfoRequest, decode
from zeromem.settings import Settings


async def test_errors_drain_and_turns(settings: Settings, tenant: str) -> None:
    limits = replace(settings.limits, tenant_in_flight=1, tenant_in_flight_shared=1)
    nc = await connect_nats(settings, "responder-test")
    caller = await connect_nats(settings, "responder-test-caller")
    held = asyncio.Event()
    release = asyncio.Event()

    async def answer(request: InfoRequest) -> Answer:
        if request.reader == "hold":
            held.set()
            await release.wait()
        if request.reader == "refuse":
            raise Refused("refused on purpose")
        if request.reader == "fail":
            raise RuntimeError("a bug")
        return Answer(request.tenant.encode())

    # A kind no deployment serves, so the suite's own read services never answer it.
    kind = "responder_test"
    responder = Responder(nc, TenantGate(limits), trace.get_tracer("test"))
    responder.route(kind, InfoRequest, answer)
    await responder.start()

    async def ask(tenant_: str, agent: str) -> tuple[bytes, dict[str, str]]:
        msg = await caller.request(
            naming.query_subject(tenant_, agent, kind),
            msgspec.msgpack.encode({"tenant": tenant_}),
            timeout=5.0,
        )
        return msg.data, msg.headers or {}

    try:
        for agent, code, reason in (
            ("refuse", "bad_request", "refused on purpose"),
            ("fail", "internal", "responder_test failed; see the service log"),
        ):
            data, headers = await ask(tenant, agent)
            assert headers.get(naming.ERROR_HEADER) == code
            assert decode(data, ErrorReply) == ErrorReply(error=reason, code=code)
        # The tenant's one slot is held: its next request waits for its turn, another
        # tenant's is answered meanwhile.
        holding = asyncio.create_task(ask(tenant, "hold"))
        await asyncio.wait_for(held.wait(), 5.0)
        waiting = asyncio.create_task(ask(tenant, "next"))
        other = f"{tenant}-other"
        assert (await ask(other, "a"))[0] == other.encode()
        assert not waiting.done()
        # Stopping drains: no more requests are taken, those in hand are answered.
        stopping = asyncio.create_task(responder.stop())
        await asyncio.sleep(0.1)
        assert not stopping.done()
        release.set()
        await asyncio.wait_for(stopping, 5.0)
        assert (await holding)[0] == tenant.encode()
        assert (await waiting)[0] == tenant.encode()
        assert responder.in_hand == 0
    finally:
        release.set()
        await responder.stop()
        await caller.close()
        await nc.close()
