"""The issuing authority, the JWTs it signs, the permissions they carry, and the checks
the worker and read services make on identities, without servers."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from zeromem import naming
from zeromem.auth import jwt as nats_jwt
from zeromem.auth.authority import SCOPES, AuthError, Authority, tags_of
from zeromem.auth.credentials import Identity, check_identity, nats_options
from zeromem.auth.mcp_tokens import McpTokens
from zeromem.auth.permissions import agent_permissions, reader_permissions, worker_permissions
from zeromem.auth.redis_acl import acl_file, acl_rules, url_with_user
from zeromem.bus import redis_options
from zeromem.limits import Limits
from zeromem.query.service import reader_from_subject
from zeromem.schemas import GetRequest
from zeromem.settings import BusSettings, Settings, StoreSettings
from zeromem.worker.intake import Invalid, admit
from zeromem.worker.outbox import reply_allowed


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    return Authority.load_or_create(tmp_path / "auth")


def test_jwts_are_signed_by_the_chain_the_server_checks(authority: Authority) -> None:
    operator = nats_jwt.verify(authority.operator_jwt(), authority.operator.public)
    assert operator["sub"] == authority.operator.public
    assert operator["nats"]["system_account"] == authority.system_account.public
    account = nats_jwt.verify(authority.account_jwt(), authority.operator.public)
    assert account["sub"] == authority.account.public
    scoped = [k for k in account["nats"]["signing_keys"] if isinstance(k, dict)]
    assert sorted(k["role"] for k in scoped) == sorted(SCOPES)
    with pytest.raises(ValueError, match="bad signature"):
        nats_jwt.verify(authority.account_jwt(), authority.account.public)


def test_an_agent_credential_carries_only_its_tags(authority: Authority) -> None:
    authority.create_tenant("acme")
    credential = authority.issue_agent("acme", "planner")
    claims = credential.claims
    signer = authority.signing["agent"]
    assert nats_jwt.verify(credential.jwt, signer.public) == claims
    assert claims["nats"]["issuer_account"] == authority.account.public
    # the permissions come from the scoped key's template, never from the credential
    assert "pub" not in claims["nats"] and "sub" not in claims["nats"]
    assert tags_of(credential.jwt) == {"tenant": "acme", "agent": "planner"}
    assert credential.seed.startswith("SU") and credential.public_key.startswith("U")
    jwt, seed = nats_jwt.parse_creds(credential.text())
    assert (jwt, seed) == (credential.jwt, credential.seed)
    bearer = authority.issue_agent("acme", "bot", bearer=True)
    assert bearer.seed == "" and bearer.text().strip() == bearer.jwt
    assert nats_jwt.verify(bearer.jwt, authority.signing["agent-bearer"].public)


def test_issuing_refuses_unknown_tenants_bad_ids_and_service_names(authority: Authority) -> None:
    with pytest.raises(AuthError, match="unknown tenant"):
        authority.issue_agent("nobody", "a")
    authority.create_tenant("acme")
    for bad in ("Planner", "a.b", "a*", ">", "a:b", "", "x" * 65, "zeromem-archiver"):
        with pytest.raises(AuthError):
            authority.issue_agent("acme", bad)
    # unrecorded (what the local CLI mints for itself): no registry entry
    authority.issue_agent("other", "cli", record=False)
    assert [i.agent for i in authority.issued()] == []


def test_revocation_is_recorded_and_raises_the_account_version(authority: Authority) -> None:
    authority.create_tenant("acme")
    keep = authority.issue_agent("acme", "keep")
    drop = [authority.issue_agent("acme", "drop") for _ in range(2)]
    before = nats_jwt.claims_of(authority.account_jwt())
    revoked = authority.revoke(tenant="acme", agent="drop")
    assert {r.user for r in revoked} == {c.public_key for c in drop}
    after = nats_jwt.claims_of(authority.account_jwt())
    assert after["iat"] > before["iat"]  # the servers take it as newer
    assert set(after["nats"]["revocations"]) == {c.public_key for c in drop}
    statuses = {i.user: i.status for i in Authority.load(authority.directory).issued("acme")}
    assert statuses[keep.public_key] == "valid"
    assert authority.revoke(tenant="acme", agent="drop") == []  # nothing left to revoke
    with pytest.raises(AuthError):
        authority.revoke()


def test_agent_permissions_name_only_its_own_subjects() -> None:
    perms = agent_permissions("acme", "planner")
    assert naming.command_subject("acme", "*", "planner") in perms.publish  # type: ignore[arg-type]
    assert naming.query_subject("acme", "planner", "*") in perms.publish
    assert perms.subscribe == (naming.agent_inbox_prefix("acme", "planner") + ".>",)
    assert not any("AUDIT" in p or "audit" in p for p in perms.publish)
    assert any("ZM_AUDIT" in p for p in agent_permissions("acme", "p", audit=True).publish)
    assert all(
        p.startswith(("zm.cmd.acme.", "zm.q.acme.planner.", "$JS.API.CONSUMER."))
        for p in perms.publish
    )
    template = agent_permissions().claims()
    assert template["pub"]["allow"][0] == "zm.cmd.{{tag(tenant)}}.*.{{tag(agent)}}"
    assert reader_permissions().responses and "resp" in reader_permissions().claims()
    assert ">" not in worker_permissions().publish


def test_identity_and_inbox_prefix(authority: Authority) -> None:
    authority.create_tenant("acme")
    credential = authority.issue_agent("acme", "planner")
    assert Identity.of(credential).inbox_prefix() == "_INBOX.zm.acme.planner"
    assert Identity.of(
        authority.service_credential("worker")
    ).inbox_prefix() == naming.service_inbox_prefix("worker")
    assert check_identity(credential, "", "") == ("acme", "planner")
    with pytest.raises(AuthError, match="for tenant 'acme'"):
        check_identity(credential, "other", "planner")
    with pytest.raises(AuthError, match="for agent 'planner'"):
        check_identity(credential, "acme", "coder")
    assert check_identity(None, "t", "a") == ("t", "a")


def test_worker_replies_only_inside_the_senders_inbox() -> None:
    subject = naming.command_subject("acme", 3, "planner")
    assert reply_allowed(subject, "_INBOX.zm.acme.planner.abc.cmd1")
    for target in (
        "zm.audit.bravo.w.0",
        "zm.cmd.bravo.3.bob",
        "_INBOX.zm.acme.coder.x.y",
        "_INBOX.zm.acme.planner",
        "_INBOX.zm.acme.plannerx.y",
        "_INBOX.zm.acme.planner.>",
        "_INBOX.zm.acme.planner.*",
    ):
        assert not reply_allowed(subject, target), target
    assert not reply_allowed("zm.cmd.acme.x.planner", "_INBOX.zm.acme.planner.a")


def test_the_payload_must_name_the_subjects_tenant_and_agent() -> None:
    from zeromem.schemas import Put, encode

    data = encode(Put(id="c1", tenant="acme", agent="planner", ts=1.0, key="user:u1:k", value=1))
    shard = naming.shard_for("acme", "user:u1", 8)
    ok = admit(
        "acme",
        data,
        shard=shard,
        shards=8,
        limits=Limits(value_bytes=1024),
        subject_agent="planner",
    )
    assert not isinstance(ok, Invalid)
    forged = admit(
        "acme", data, shard=shard, shards=8, limits=Limits(value_bytes=1024), subject_agent="bob"
    )
    assert isinstance(forged, Invalid) and forged.reason.startswith("agent_mismatch")
    request = GetRequest(tenant="acme", key="user:u1:k")
    assert reader_from_subject(request, naming.query_subject("acme", "bob", "get")).reader == "bob"  # type: ignore[union-attr]
    assert "reader" in reader_from_subject(
        GetRequest(tenant="acme", reader="eve", key="user:u1:k"),
        naming.query_subject("acme", "bob", "get"),
    )  # type: ignore[operator]
    assert "tenant" in reader_from_subject(request, naming.query_subject("other", "bob", "get"))  # type: ignore[operator]
    subject = naming.command_subject("acme", 3, "bob")
    assert naming.parse_command_subject(subject) == ("acme", 3, "bob")
    with pytest.raises(ValueError):
        naming.parse_command_subject("zm.cmd.acme.3")


def test_redis_acl_users(authority: Authority) -> None:
    text = acl_file({r: authority.redis_password(r) for r in ("admin", "worker", "reader")})
    # default: every permission (the server replays its AOF as default) but no usable password
    assert text.splitlines()[0].startswith("user default on #")
    assert "nopass" not in text
    assert authority.redis_password("worker") not in text  # only hashes are written
    assert "%R~zm:*" in acl_rules("reader") and "~zm:*:usage:*" in acl_rules("reader")
    assert "-@dangerous" in acl_rules("worker")
    url = url_with_user("redis://127.0.0.1:6380/0", "reader", "p@ss/word")
    assert url == "redis://zm-reader:p%40ss%2Fword@127.0.0.1:6380/0"


def test_tls_settings_reach_the_connections(tmp_path: Path) -> None:
    plain = nats_options(Settings(bus=BusSettings(nats_url="nats://h:4222")), None)
    assert "tls" not in plain
    secured = nats_options(
        Settings(bus=BusSettings(nats_url="tls://h:4222", nats_tls_hostname="nats.svc")),
        None,
        inbox_prefix="_INBOX.zm.t.a",
    )
    assert isinstance(secured["tls"], ssl.SSLContext) and secured["tls_hostname"] == "nats.svc"
    assert secured["inbox_prefix"] == "_INBOX.zm.t.a"
    assert redis_options(Settings(store=StoreSettings(redis_url="redis://h:6379/0"))) == {}
    options = redis_options(
        Settings(
            store=StoreSettings(
                redis_url="rediss://h:6379/0",
                redis_tls_ca="/ca.pem",
                redis_username="zm-worker",
                redis_password="pw",
            )
        )
    )
    assert options["ssl_ca_certs"] == "/ca.pem" and options["username"] == "zm-worker"


def test_settings_read_the_conventional_credential_variables() -> None:
    def bus(env: dict[str, str]) -> BusSettings:
        return Settings.from_env(env).bus

    assert bus({"NATS_CREDS": "/a.creds"}).nats_creds == "/a.creds"
    assert bus({"ZEROMEM_CREDS": "/b.creds"}).nats_creds == "/b.creds"
    assert bus({"ZEROMEM_NATS_CREDS": "/c", "NATS_CREDS": "/d"}).nats_creds == "/c"
    assert bus({"NATS_CREDS": "/d", "ZEROMEM_CREDS": "/e"}).nats_creds == "/d"
    assert bus({"ZEROMEM_TOKEN": "x.y.z"}).nats_token == "x.y.z"
    assert bus({"ZEROMEM_NATS_TOKEN": "a.b.c", "ZEROMEM_TOKEN": "x.y.z"}).nats_token == "a.b.c"
    telemetry = Settings.from_env({"ZEROMEM_METRICS_HOST": "0.0.0.0"}).telemetry
    assert telemetry.metrics_host == "0.0.0.0"


def test_mcp_tokens_are_stored_hashed(tmp_path: Path) -> None:
    tokens = McpTokens(tmp_path / "t.json")
    token = tokens.add("acme", "claude", tmp_path / "claude.creds")
    assert token not in (tmp_path / "t.json").read_text()
    found = tokens.lookup(token)
    assert found is not None and (found.tenant, found.agent) == ("acme", "claude")
    assert tokens.lookup("") is None and tokens.lookup(token + "x") is None
