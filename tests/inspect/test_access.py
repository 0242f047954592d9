"""The inspector is not a way around tenant security: one tenant's token sees nothing of
another tenant through any route, the NATS server refuses it even where the page's own
check is taken away, and no route writes (not even with the operator's token)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.inspect.conftest import Inspector
from zeromem import naming
from zeromem.bus import connect_nats, connect_redis
from zeromem.inspect.access import Viewer
from zeromem.inspect.app import PAGES
from zeromem.lifecycle.snapshot import snapshot
from zeromem.sdk import MemoryClient
from zeromem.sdk.errors import ServiceUnavailableError

A_MARK = "apricot-of-tenant-a"
B_MARK = "blueberry-of-tenant-b"
EVENT_ROUTES = ("/t/{tenant}/live/changes?scope=user:u1", "/t/{tenant}/live/dead")
# query parameters that name data (the same key names exist in both tenants)
PARAMS = "?prefix=user:u1:&key=user:u1:pref&owner=user:u1&q=fruit&owners=user:u1&scope=user:u1"


async def _fill(inspector: Inspector, tenant: str, mark: str) -> None:
    writer = await inspector.agent(tenant)
    await writer.put(
        "user:u1:pref", {"fruit": mark}, content=f"likes the fruit {mark}", tags=["fruit"]
    )
    await writer.put(
        "user:u1:slide", mark, content=f"sliding {mark}", ttl=600, refresh_on_read=True
    )
    await writer.recall("fruit", owners=["user:u1"])  # a row in its usage ledger
    await writer.put("user:u1:old", mark, content=f"old fruit {mark}", wait="applied")


def _paths(tenant: str) -> list[str]:
    paths = [path.replace("{tenant}", tenant) + PARAMS for path, *_ in PAGES]
    return paths + ["/api" + p for p in paths]


async def test_a_tenant_token_sees_no_other_tenant_through_any_route(inspector: Inspector) -> None:
    await _fill(inspector, inspector.a, A_MARK)
    await _fill(inspector, inspector.b, B_MARK)
    for path in _paths(inspector.b):
        response = await inspector.get(path, who="a")
        assert B_MARK not in response.text, path
        if "/tenants" in path:  # lists the viewer's own tenant only
            assert inspector.b not in response.text, path
        else:  # tenant b's routes, and the operator's
            assert response.status_code == 403, (path, response.status_code)
    for path in EVENT_ROUTES:
        response = await inspector.get(path.replace("{tenant}", inspector.b), who="a")
        assert response.status_code == 403 and B_MARK not in response.text, path
    # its own tenant's routes, asked for the same key names, show its own data only
    seen = ""
    for path in _paths(inspector.a):
        if "/ops" in path:
            assert (await inspector.get(path, who="a")).status_code == 403, path
            continue
        response = await inspector.get(path, who="a")
        assert B_MARK not in response.text, path
        seen += response.text
    assert A_MARK in seen
    # the operator may look at both
    both = await inspector.api(f"/t/{inspector.b}/memories?prefix=user:u1:", who="operator")
    assert any(B_MARK in str(i["value"]) for i in both["items"])


async def test_the_server_refuses_where_the_page_would_not(
    inspector: Inspector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Take the page's own tenant check away: tenant a's token still reaches nothing of
    tenant b. The page has no connection that could: a tenant's viewer reads through a
    client bound to its credential's tenant, and the NATS server holds that credential to
    its own tenant's subjects even when a client addresses another's."""
    await _fill(inspector, inspector.b, B_MARK)
    monkeypatch.setattr(Viewer, "check", lambda self, tenant: None)
    for path, *_ in PAGES:
        if path.startswith(("/ops", "/tenants")):
            continue
        response = await inspector.get(
            "/api" + path.replace("{tenant}", inspector.b) + PARAMS, who="a"
        )
        assert B_MARK not in response.text, path
    connections = inspector.app.state.inspector.connections
    viewer = inspector.app.state.inspector.access.viewer(inspector.tokens["a"])
    own = await connections.client(viewer, inspector.b)
    assert own.tenant == inspector.a  # bound to its credential's tenant, whatever was asked
    # one level down: tenant a's connection addressing tenant b's subjects
    forged = MemoryClient(own.nc, tenant=inspector.b, agent=viewer.agent, timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="zeromem.sdk.connection"):
        for attempt in (
            forged.get("user:u1:pref"),
            forged.list("user:u1:"),
            forged.owners(),
            forged.recall("fruit", owners=["user:u1"]),
            forged.stats(),
        ):
            with pytest.raises(ServiceUnavailableError):  # the server let no request through
                await attempt
        with pytest.raises(TimeoutError):  # no consumer on b's change feed either
            await asyncio.wait_for(forged.watch("user:u1"), 1.0)
    refused = [
        r.getMessage() for r in caplog.records if "permissions violation" in r.getMessage().lower()
    ]
    for kind in ("get", "list", "owners", "recall", "stats"):
        subject = naming.query_subject(inspector.b, viewer.agent, kind)
        assert any(subject in line for line in refused), (kind, refused)


async def _state(inspector: Inspector) -> dict[str, Any]:
    redis = connect_redis(inspector.settings)
    nc = await connect_nats(inspector.settings, name="test-state")
    try:
        js = nc.jetstream()
        streams = {}
        for stream in (naming.COMMAND_STREAM, naming.CHANGE_STREAM, naming.DEAD_LETTER_STREAM):
            state = (await js.stream_info(stream)).state
            streams[stream] = (state.messages, state.last_seq)
        tenants = {t: await snapshot(redis, t) for t in (inspector.a, inspector.b)}
        return {"streams": streams, "tenants": tenants}
    finally:
        await nc.close()
        await redis.aclose()


async def test_no_route_writes_whoever_asks(inspector: Inspector) -> None:
    await _fill(inspector, inspector.a, A_MARK)
    await _fill(inspector, inspector.b, B_MARK)
    await asyncio.sleep(0.5)  # the sliding memories' own writes settled
    before = await _state(inspector)
    for who in ("a", "a_plain", "b", "operator"):
        for tenant in (inspector.a, inspector.b):
            for path in _paths(tenant):
                await inspector.get(path, who=who)
    for path in _paths(inspector.a):  # no route takes any other method, whoever asks
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = await inspector.http.request(
                method, inspector.base + path, headers=inspector.headers("operator")
            )
            assert response.status_code == 405, (method, path)
    for method in ("PUT", "PATCH", "DELETE"):
        for path in ("/login", "/logout"):
            assert (await inspector.http.request(method, inspector.base + path)).status_code == 405
    await asyncio.sleep(0.5)  # anything a read had set off would have been applied by now
    assert await _state(inspector) == before
