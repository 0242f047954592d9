"""The attacks of issue 13, each tried against a secured deployment of its own.

Every test first does something legitimate (so the system demonstrably works), takes a
snapshot of what an attack could damage (the victim tenant's Redis keys, its audit trail,
every stream's message count and last sequence), attacks, then asserts two things: the
server or the service refused, and the snapshot is unchanged. README.md's attack table
lists these tests.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from tests.conftest import TEST_SETTINGS
from zeromem import naming
from zeromem.auth.authority import Authority, Credential, push_account
from zeromem.auth.credentials import load_credential, nats_options
from zeromem.auth.redis_acl import url_with_user
from zeromem.bus import connect_nats, connect_redis
from zeromem.embedded import EmbeddedStack
from zeromem.embedded.inprocess import InProcessServices
from zeromem.lifecycle.audit import read_audit, write_entry
from zeromem.lifecycle.redact import Redactor
from zeromem.schemas import Applied, AuditBatch, Put, encode
from zeromem.sdk import MemoryClient
from zeromem.settings import Settings
from zeromem.store.keys import is_applied_position

STREAMS = (
    naming.COMMAND_STREAM,
    naming.DEAD_LETTER_STREAM,
    naming.CHANGE_STREAM,
    naming.AUDIT_STREAM,
)


@dataclass
class Deployment:
    settings: Settings  # the operator's (admin) view
    authority: Authority
    admin: Any  # NATS connection as admin
    redis: Any  # Redis as admin
    services: InProcessServices
    agents: list[MemoryClient] = field(default_factory=list)

    async def agent(self, tenant: str, agent: str, audit: bool = False) -> MemoryClient:
        self.authority.create_tenant(tenant)
        client = await MemoryClient.connect(
            self.settings.bus.nats_url,
            creds=self.authority.issue_agent(tenant, agent, audit=audit),
            shards=self.settings.shards,
            settings=self.settings,
        )
        self.agents.append(client)
        return client

    async def raw(
        self,
        credential: Credential | None,
        errors: list[str],
        inbox_prefix: str | None = None,
        **extra: Any,
    ) -> Any:
        """A bare NATS connection with ``credential`` (None: anonymous); the server's
        complaints land in ``errors``."""

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        options = nats_options(self.settings, credential, inbox_prefix=inbox_prefix)
        return await nats.connect(
            self.settings.bus.nats_url,
            error_cb=on_error,
            allow_reconnect=False,
            connect_timeout=3,
            **options,
            **extra,
        )

    async def streams(self) -> dict[str, tuple[int, int]]:
        js = self.admin.jetstream()
        out = {}
        for stream in STREAMS:
            state = (await js.stream_info(stream)).state
            out[stream] = (state.messages, state.last_seq)
        return out

    async def subject_counts(self, tenant: str) -> dict[str, int]:
        """Messages on ``tenant``'s subjects, per stream."""
        js = self.admin.jetstream()
        filters = {
            naming.COMMAND_STREAM: naming.command_tenant_subject(tenant),
            naming.AUDIT_STREAM: naming.audit_tenant_subject(tenant),
            naming.CHANGE_STREAM: naming.change_tenant_subject(tenant),
        }
        out = {}
        for stream, subject in filters.items():
            state = (await js.stream_info(stream, subjects_filter=subject)).state
            out[stream] = sum((state.subjects or {}).values())
        return out

    async def store(self, tenant: str) -> dict[bytes, bytes]:
        # A refused message still moves its tenant's applied position (a reader holding
        # its position token must not wait for it): bookkeeping, not stored memories.
        keys = [
            k
            async for k in self.redis.scan_iter(match=f"zm:{tenant}:*")
            if not is_applied_position(k.decode())
        ]
        return {k: await self.redis.dump(k) for k in sorted(keys)}

    async def snapshot(self, *tenants: str) -> Any:
        await asyncio.sleep(0.3)  # let in-flight audit records of reads land first
        return (
            await self.streams(),
            {t: await self.store(t) for t in tenants},
            {t: await read_audit(self.admin, t, idle_timeout=1.0) for t in tenants},
        )

    async def unchanged(self, before: Any, *tenants: str) -> None:
        after = await self.snapshot(*tenants)
        assert after[0] == before[0], "a stream changed"
        assert after[1] == before[1], "a tenant's stored memories changed"
        assert after[2] == before[2], "a tenant's audit trail changed"


@pytest.fixture(scope="module")
async def deployment(
    tmp_path_factory: pytest.TempPathFactory, authority: Authority
) -> AsyncIterator[Deployment]:
    root = tmp_path_factory.mktemp("attacks")
    stack = EmbeddedStack(root / "stack", authority=authority).start()
    settings = stack.settings_for(
        TEST_SETTINGS.with_(data_dir=root / "data", auth_dir=str(authority.directory)),
        "admin",
    )  # type: ignore[arg-type]
    services = await InProcessServices.start(settings)
    admin = await connect_nats(settings, "attack-observer")
    redis = connect_redis(settings)
    found = Deployment(settings, authority, admin, redis, services)
    try:
        yield found
    finally:
        for client in found.agents:
            await client.close()
        await services.stop()
        await admin.close()
        await redis.aclose()
        stack.stop()


async def legit_write(client: MemoryClient, key: str = "user:u1:pref", value: Any = "zh") -> None:
    receipt = await client.put(key, value, wait="applied")
    assert receipt.status == "applied"


def violation(errors: list[str], kind: str, subject: str) -> bool:
    """Whether the server said it refused ``kind`` (publish, subscription) on ``subject``
    (nats-py lowercases the server's message)."""
    return any(
        "permissions violation" in e.lower() and kind in e.lower() and subject.lower() in e.lower()
        for e in errors
    )


async def eventually(check: Callable[[], bool], seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


# --- the attacks -------------------------------------------------------------------------


async def test_anonymous_connection_is_refused(deployment: Deployment) -> None:
    alice = await deployment.agent("alpha", "alice")
    await legit_write(alice)
    before = await deployment.snapshot("alpha")
    with pytest.raises(Exception, match="Authorization Violation"):
        await deployment.raw(None, [])
    # Redis too: the default user has no usable password, and a wrong password is refused.
    from redis.asyncio import Redis

    host_port = deployment.settings.store.redis_url.rsplit("@", 1)[1]
    for url in (
        f"redis://{host_port}",
        url_with_user(deployment.settings.store.redis_url, "worker", "not-the-password"),
    ):
        anonymous = Redis.from_url(url)
        with pytest.raises((AuthenticationError, ResponseError)):
            await anonymous.get("zm:alpha:m:user:u1:pref")
        await anonymous.aclose()
    await deployment.unchanged(before, "alpha")


async def test_another_tenants_valid_credential_reaches_nothing(deployment: Deployment) -> None:
    alice = await deployment.agent("alpha", "alice")
    await legit_write(alice, "user:u2:secret", "alpha's")
    before = await deployment.snapshot("alpha")
    errors: list[str] = []
    mallory = deployment.authority.issue_agent("bravo", "mallory", audit=True, record=False)
    nc = await deployment.raw(mallory, errors, naming.agent_inbox_prefix("bravo", "mallory"))
    try:
        shard = naming.shard_for("alpha", "user:u2", deployment.settings.shards)
        put = Put(
            id="x1",
            tenant="alpha",
            agent="alice",
            ts=time.time(),
            key="user:u2:secret",
            value="mallory's",
        )
        await nc.publish(naming.command_subject("alpha", shard, "alice"), encode(put))
        with pytest.raises(Exception):  # noqa: B017  (refused: no reply ever comes)
            await nc.request(
                naming.query_subject("alpha", "alice", "get"), b'{"tenant":"alpha"}', timeout=0.3
            )
        # its change feed and audit trail, through JetStream
        for stream, subject in (
            (naming.CHANGE_STREAM, naming.change_tenant_subject("alpha")),
            (naming.AUDIT_STREAM, naming.audit_tenant_subject("alpha")),
        ):
            with pytest.raises(Exception):  # noqa: B017
                await nc.jetstream(timeout=0.3).add_consumer(
                    stream, name="peek", filter_subject=subject
                )
        await nc.flush()
        assert await eventually(lambda: violation(errors, "publish", "zm.cmd.alpha"))
        assert violation(errors, "publish", "zm.q.alpha.alice.get")
        assert violation(errors, "publish", "$JS.API.CONSUMER.CREATE.ZM_CHANGES.peek.zm.chg.alpha")
        assert violation(errors, "publish", "$JS.API.CONSUMER.CREATE.ZM_AUDIT.peek.zm.audit.alpha")
    finally:
        await nc.close()
    await deployment.unchanged(before, "alpha")
    assert (await alice.get("user:u2:secret")).value == "alpha's"


async def test_a_revoked_credential_is_cut_off_at_once(deployment: Deployment) -> None:
    authority = deployment.authority
    authority.create_tenant("alpha")
    credential = authority.issue_agent("alpha", "temp")
    errors: list[str] = []
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    nc = await deployment.raw(
        credential, errors, naming.agent_inbox_prefix("alpha", "temp"), closed_cb=on_closed
    )
    client = MemoryClient(nc, tenant="alpha", agent="temp", shards=deployment.settings.shards)
    await legit_write(client, "user:u3:before", 1)  # it worked while valid
    before = await deployment.snapshot("alpha")

    revoked = authority.revoke(user=credential.public_key)
    assert [r.user for r in revoked] == [credential.public_key]

    async def connect(creds: Path) -> Any:
        options = nats_options(deployment.settings, load_credential(creds))
        return await nats.connect(deployment.settings.bus.nats_url, **options)

    await push_account(authority, connect)  # what `zeromem auth revoke` does
    # The server closes the live connection itself, without a restart...
    await asyncio.wait_for(closed.wait(), 5)
    assert nc.is_closed
    # ...and refuses it from then on.
    with pytest.raises(Exception, match="Authorization Violation"):
        await deployment.raw(credential, [])
    await deployment.unchanged(before, "alpha")
    assert [i.status for i in authority.issued("alpha") if i.user == credential.public_key] == [
        "revoked"
    ]


async def test_a_forged_agent_id_is_refused(deployment: Deployment) -> None:
    alice = await deployment.agent("alpha", "alice")
    bob = await deployment.agent("alpha", "bob")
    await legit_write(bob, "user:u4:owner", "bob")
    before_streams = await deployment.streams()
    before = await deployment.snapshot("alpha")
    shard = naming.shard_for("alpha", "user:u4", deployment.settings.shards)
    forged = Put(
        id="forged1",
        tenant="alpha",
        agent="bob",
        ts=time.time(),
        key="user:u4:owner",
        value="alice as bob",
    )
    # 1. On bob's subject: the server refuses alice's publish.
    errors: list[str] = []
    nc = await deployment.raw(
        deployment.authority.issue_agent("alpha", "alice", record=False),
        errors,
        naming.agent_inbox_prefix("alpha", "alice"),
    )
    try:
        await nc.publish(naming.command_subject("alpha", shard, "bob"), encode(forged))
        await nc.flush()
        assert await eventually(lambda: violation(errors, "publish", "zm.cmd.alpha"))
    finally:
        await nc.close()
    await deployment.unchanged(before, "alpha")
    # 2. On her own subject, claiming bob in the payload: the worker refuses it (a dead
    # letter naming the real sender); nothing is applied, nothing is attributed to bob.
    await alice.js.publish(naming.command_subject("alpha", shard, "alice"), encode(forged))
    letters = await _dead_letters(deployment, "alpha", after=before_streams)
    assert letters and letters[-1]["reason"].startswith("agent_mismatch")
    assert (await bob.get("user:u4:owner")).value == "bob"
    trail = await read_audit(deployment.admin, "alpha", idle_timeout=1.0)
    assert not [e for e in trail if e.command_id == "forged1" and e.status != "dead_letter"]
    assert await deployment.store("alpha") == before[1]["alpha"]


async def _dead_letters(
    deployment: Deployment, tenant: str, after: dict[str, tuple[int, int]]
) -> list[dict[str, Any]]:
    from zeromem.schemas import DeadLetter, decode

    js = deployment.admin.jetstream()
    start = after[naming.DEAD_LETTER_STREAM][1] + 1
    for _ in range(60):
        sub = await js.pull_subscribe(
            f"{naming.dead_letter_subject(tenant, 0)[:-2]}.*",
            stream=naming.DEAD_LETTER_STREAM,
            config=_from(start),
        )
        try:
            msgs = await sub.fetch(10, timeout=0.2)
        except Exception:
            msgs = []
        await sub.unsubscribe()
        if msgs:
            return [msgspec.to_builtins(decode(m.data, DeadLetter)) for m in msgs]
        await asyncio.sleep(0.05)
    return []


def _from(sequence: int) -> Any:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    return ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=sequence,
        ack_policy=AckPolicy.NONE,
    )


async def test_a_subscription_to_everything_is_refused(deployment: Deployment) -> None:
    errors: list[str] = []
    seen: list[str] = []
    nc = await deployment.raw(
        deployment.authority.issue_agent("bravo", "eve", record=False),
        errors,
        naming.agent_inbox_prefix("bravo", "eve"),
    )

    async def spy(msg: Any) -> None:
        seen.append(msg.subject)

    try:
        for subject in (">", "zm.>", "zm.cmd.>", "zm.chg.>", "zm.audit.>", "_INBOX.>"):
            await nc.subscribe(subject, cb=spy)
        await nc.flush()
        alice = await deployment.agent("alpha", "alice")
        await legit_write(alice, "user:u5:k", "seen by nobody else")
        await alice.get("user:u5:k")
        await asyncio.sleep(0.3)
        for subject in (">", "zm.>", "zm.cmd.>", "zm.chg.>", "zm.audit.>", "_INBOX.>"):
            assert violation(errors, "subscription", f'"{subject}"'), (subject, errors)
        assert seen == []
    finally:
        await nc.close()


async def test_purging_or_deleting_any_stream_is_refused(deployment: Deployment) -> None:
    alice = await deployment.agent("alpha", "alice")
    await legit_write(alice, "user:u6:k", 1)
    before = await deployment.snapshot("alpha")
    errors: list[str] = []
    nc = await deployment.raw(
        deployment.authority.issue_agent("alpha", "alice", audit=True, record=False),
        errors,
        naming.agent_inbox_prefix("alpha", "alice"),
    )
    try:
        for stream in STREAMS:
            for action in ("PURGE", "DELETE", "UPDATE"):
                subject = f"{naming.JS_API_PREFIX}.STREAM.{action}.{stream}"
                with pytest.raises(Exception):  # noqa: B017  (no answer: the server dropped it)
                    await nc.request(subject, b"{}", timeout=0.2)
                assert await eventually(lambda s=subject: violation(errors, "publish", s))
        for stream in STREAMS:  # nor may it list the consumers (the workers' names)
            with pytest.raises(Exception):  # noqa: B017
                await nc.request(
                    f"{naming.JS_API_PREFIX}.CONSUMER.LIST.{stream}", b"{}", timeout=0.2
                )
    finally:
        await nc.close()
    await deployment.unchanged(before, "alpha")


async def test_a_forged_audit_record_is_refused(deployment: Deployment) -> None:
    alice = await deployment.agent("alpha", "alice", audit=True)
    await legit_write(alice, "user:u7:k", 1)
    before = await deployment.snapshot("alpha")
    fake = write_entry(
        Put(id="fake", tenant="alpha", agent="root", ts=time.time(), key="user:u7:k", value=0),
        1,
        Applied(
            command_id="fake",
            tenant="alpha",
            key="user:u7:k",
            op="put",
            version=9,
            applied_at=time.time(),
        ),
        Redactor(""),
    )
    errors: list[str] = []
    nc = await deployment.raw(
        deployment.authority.issue_agent("alpha", "alice", record=False),
        errors,
        naming.agent_inbox_prefix("alpha", "alice"),
    )
    try:
        for subject in (
            naming.audit_write_subject("alpha", 0),
            naming.audit_read_subject("alpha", "get"),
        ):
            await nc.publish(subject, encode(AuditBatch(entries=(fake,))))
            with pytest.raises(Exception):  # noqa: B017  (through JetStream: no ack either)
                await nc.jetstream().publish(
                    subject, encode(AuditBatch(entries=(fake,))), timeout=0.3
                )
        await nc.flush()
        assert await eventually(lambda: violation(errors, "publish", "zm.audit.alpha"))
    finally:
        await nc.close()
    await deployment.unchanged(before, "alpha")
    assert not [e for e in await alice.audit() if e.command_id == "fake"]


async def test_a_reply_header_cannot_redirect_the_worker(deployment: Deployment) -> None:
    alice = await deployment.agent("alpha", "alice")
    bob = await deployment.agent("bravo", "bob", audit=True)
    await legit_write(bob, "user:u8:k", "bravo's")
    heard: list[bytes] = []

    async def listen(msg: Any) -> None:
        heard.append(msg.data)

    spy = await bob.nc.subscribe(f"{naming.agent_inbox_prefix('bravo', 'bob')}.spy.*", cb=listen)
    before = await deployment.snapshot("bravo")
    before_counts = await deployment.subject_counts("bravo")
    shard = naming.shard_for("alpha", "user:u8", deployment.settings.shards)
    targets = (
        naming.audit_write_subject("bravo", 0),  # another tenant's audit trail
        naming.command_subject("bravo", shard, "bob"),  # its command stream
        f"{naming.agent_inbox_prefix('bravo', 'bob')}.spy.x",  # another agent's inbox
    )
    for n, target in enumerate(targets):
        command = Put(
            id=f"redirect{n}",
            tenant="alpha",
            agent="alice",
            ts=time.time(),
            key="user:u8:k",
            value=n,
        )
        await alice.js.publish(
            naming.command_subject("alpha", shard, "alice"),
            encode(command),
            headers={naming.REPLY_HEADER: target},
        )
    await legit_write(alice, "user:u8:k", "last")  # applied after the three, in order
    assert (await alice.get("user:u8:k")).version == 4  # the commands themselves applied
    await spy.unsubscribe()
    assert heard == []  # nothing reached bob's inbox
    after = await deployment.snapshot("bravo")
    after_counts = await deployment.subject_counts("bravo")
    assert after[1] == before[1], "bravo's stored memories changed"
    assert after[2] == before[2], "bravo's audit trail changed"
    # nothing went into bravo's audit or command subjects (alpha's own records did)
    assert after_counts == before_counts
    assert len(await bob.audit()) == len(before[2]["bravo"])  # and it still reads


async def test_audit_dedupe_ids_cannot_be_taken_first(deployment: Deployment) -> None:
    alice = await deployment.agent("alpha", "alice", audit=True)
    await legit_write(alice, "user:u9:k", 0)
    streams = await deployment.streams()
    shard = naming.shard_for("alpha", "user:u9", deployment.settings.shards)
    next_sequence = streams[naming.COMMAND_STREAM][1] + 1
    taken = naming.audit_dedupe_id("alpha", shard, next_sequence)
    errors: list[str] = []
    nc = await deployment.raw(
        deployment.authority.issue_agent("alpha", "alice", record=False),
        errors,
        naming.agent_inbox_prefix("alpha", "alice"),
    )
    try:
        await nc.publish(
            naming.audit_write_subject("alpha", shard),
            b"\x80",
            headers={naming.MSG_ID_HEADER: taken},
        )
        await nc.flush()
        assert await eventually(lambda: violation(errors, "publish", "zm.audit.alpha"))
    finally:
        await nc.close()
    receipt = await alice.put("user:u9:k", 1, wait="applied")
    assert receipt.stream_seq == next_sequence
    trail = await alice.audit(key="user:u9:k")
    assert [e.command_id for e in trail if e.kind == "write"][-1] == receipt.command_id


async def test_command_ids_do_not_collide_across_tenants(deployment: Deployment) -> None:
    alice = await deployment.agent("alpha", "alice")
    bob = await deployment.agent("bravo", "bob")
    same = "order-1"  # a caller-chosen id, used by both tenants
    for client, value in ((alice, "alpha"), (bob, "bravo")):
        command = Put(
            id=same,
            tenant=client.tenant,
            agent=client.agent,
            ts=time.time(),
            key="user:u10:k",
            value=value,
        )
        receipt = await client.send(command, wait="applied")
        assert receipt.status == "applied" and not receipt.duplicate
    assert (await alice.get("user:u10:k")).value == "alpha"
    assert (await bob.get("user:u10:k")).value == "bravo"
    # Nor can one tenant publish another's dedupe id first: the id is scoped to the
    # publisher and keyed with its credential's secret.
    guess = naming.command_dedupe_id("bravo", "bob", "order-2")
    await alice.js.publish(
        naming.command_subject("alpha", 0, "alice"), b"\x80", headers={naming.MSG_ID_HEADER: guess}
    )
    command = Put(
        id="order-2", tenant="bravo", agent="bob", ts=time.time(), key="user:u10:k", value="bravo 2"
    )
    receipt = await bob.send(command, wait="applied")
    assert receipt.status == "applied" and not receipt.duplicate


async def test_a_change_feed_consumer_stays_in_its_tenant(deployment: Deployment) -> None:
    """An agent may create consumers on the change feed, with a filter inside its own
    tenant. It may not pick another tenant's filter; and a push consumer aimed at another
    tenant's subjects delivers nothing there (no one subscribes to them)."""
    alice = await deployment.agent("alpha", "alice")
    bob = await deployment.agent("bravo", "bob", audit=True)
    await legit_write(alice, "user:u11:k", 1)
    await legit_write(bob, "user:u11:k", 1)
    before = await deployment.snapshot("bravo")
    js = alice.nc.jetstream()
    from nats.js.api import ConsumerConfig, DeliverPolicy

    with pytest.raises(Exception):  # noqa: B017  (bravo's filter: refused by the server)
        await alice.nc.jetstream(timeout=0.3).add_consumer(
            naming.CHANGE_STREAM,
            ConsumerConfig(name="cross", filter_subject=naming.change_tenant_subject("bravo")),
        )
    # a filter of its own in the subject, another tenant's in the request: refused
    request = {
        "stream_name": naming.CHANGE_STREAM,
        "config": {
            "name": "sly",
            "filter_subject": naming.change_tenant_subject("bravo"),
            "deliver_policy": "all",
            "ack_policy": "none",
        },
    }
    reply = await alice.nc.request(
        naming.consumer_create_subject(
            naming.CHANGE_STREAM, "sly", naming.change_tenant_subject("alpha")
        ),
        json.dumps(request).encode(),
        timeout=2,
    )
    assert "error" in json.loads(reply.data)
    # its own tenant's feed, delivered into bravo's audit and command subjects
    for n, target in enumerate(
        (naming.audit_write_subject("bravo", 0), naming.command_subject("bravo", 0, "bob"))
    ):
        await js.add_consumer(
            naming.CHANGE_STREAM,
            ConsumerConfig(
                name=f"aim{n}",
                filter_subject=naming.change_tenant_subject("alpha"),
                deliver_subject=target,
                deliver_policy=DeliverPolicy.ALL,
            ),
        )
    await asyncio.sleep(0.5)
    await deployment.unchanged(before, "bravo")
    await bob.audit()


async def test_mcp_over_http_needs_a_bearer_token(deployment: Deployment, tmp_path: Path) -> None:
    import httpx

    from zeromem.auth.mcp_tokens import McpTokens
    from zeromem.embedded import free_port
    from zeromem.mcp_server import MemoryToolServer

    authority = deployment.authority
    authority.create_tenant("alpha")
    tokens = McpTokens(tmp_path / "mcp-tokens.json")
    token = tokens.add(
        "alpha", "claude", authority.issue_agent("alpha", "claude").write(tmp_path / "claude.creds")
    )
    alice = await deployment.agent("alpha", "alice")
    await legit_write(alice, "user:u12:k", 1)
    before = await deployment.snapshot("alpha")
    server = MemoryToolServer(deployment.settings, tenant=None, agent=None, tokens=tokens)
    port = free_port()
    task = asyncio.create_task(server.serve_http("127.0.0.1", port))
    url = f"http://127.0.0.1:{port}/mcp"
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "attacker", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            for _ in range(100):
                try:
                    await http.get(url)
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            missing = await http.post(url, json=call, headers=headers)
            wrong = await http.post(
                url, json=call, headers={**headers, "Authorization": "Bearer not-a-token"}
            )
            good = await http.post(
                url, json=call, headers={**headers, "Authorization": f"Bearer {token}"}
            )
        assert missing.status_code == 401
        assert wrong.status_code == 401
        assert good.status_code == 200  # the same request with the token is served
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await server.close()
    await deployment.unchanged(before, "alpha")


async def test_the_read_services_redis_user_cannot_write_memories(deployment: Deployment) -> None:
    from redis.asyncio import Redis

    reader_url = url_with_user(
        deployment.settings.store.redis_url, "reader", deployment.authority.redis_password("reader")
    )
    reader = Redis.from_url(reader_url)
    try:
        assert await reader.exists("zm:alpha:keys") in (0, 1)  # it may read
        with pytest.raises(NoPermissionError):
            await reader.hset("zm:alpha:m:user:u1:pref", "d", b"forged")
        with pytest.raises(NoPermissionError):
            await reader.flushall()
        await reader.hincrby("zm:alpha:usage:20260101", "probe", 1)  # its ledger: allowed
        await reader.expire("zm:alpha:usage:20260101", 1)
    finally:
        await reader.aclose()
