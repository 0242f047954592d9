"""The issuing authority: one NATS operator, its system account, the application
account every zeromem process connects to, the account's signing keys, and the record
of every credential issued. ``zeromem up`` keeps it under ``{data_dir}/auth``; in a
cluster it lives wherever the operator keeps secrets, and only its outputs (the server
configuration, the service credentials) are mounted into pods.

Why decentralized JWT (operator mode) rather than a static user list or auth callout:
see docs/security.md. In short: an agent credential is signed here and never has to be
pushed to the servers (they check the signature chain), so issuing is free and works
offline; a revocation is one updated account JWT pushed to the running servers
(``$SYS.REQ.CLAIMS.UPDATE``), which cut the revoked connections at once.

Files: ``authority.json`` (the seeds: keep it secret, mode 0600), ``registry.json``
(tenants and issued credentials), ``creds/<role>.creds`` (the service credentials).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zeromem.auth import jwt as nats_jwt
from zeromem.auth.jwt import KeyPair
from zeromem.auth.permissions import (
    AGENT_TAG,
    ROLE_TAG,
    SERVICE_PERMISSIONS,
    TENANT_TAG,
    agent_permissions,
)
from zeromem.schemas.keys import AGENT_REGEX, RESERVED_AGENT_PREFIX, TENANT_REGEX

STATE_FILE = "authority.json"
REGISTRY_FILE = "registry.json"
CREDS_DIR = "creds"
ACCOUNT_NAME = "ZEROMEM"
SYSTEM_ACCOUNT_NAME = "SYS"
SERVICE_ROLES = ("admin", "worker", "reader")
REDIS_ROLES = ("admin", "worker", "reader")

_UNLIMITED = {
    "subs": -1,
    "data": -1,
    "payload": -1,
    "imports": -1,
    "exports": -1,
    "wildcards": True,
    "conn": -1,
    "leaf": -1,
}
_JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


class AuthError(ValueError):
    """A request the authority refuses (an unknown tenant, a reserved agent id...)."""


def _scope(audit: bool, bearer: bool) -> str:
    """The scoped signing key for a kind of agent credential: templates cannot vary by
    tag, so auditors (who may also read their tenant's audit trail) and bearer tokens
    (no key pair to prove: the token alone connects) each have their own."""
    return ("auditor" if audit else "agent") + ("-bearer" if bearer else "")


SCOPES = tuple(_scope(a, b) for a in (False, True) for b in (False, True))


@dataclass(frozen=True, slots=True)
class Credential:
    """A user JWT and, unless it is a bearer token, the seed that proves holding it."""

    jwt: str
    seed: str = ""

    @property
    def claims(self) -> dict[str, Any]:
        return nats_jwt.claims_of(self.jwt)

    @property
    def public_key(self) -> str:
        return str(self.claims["sub"])

    def tags(self) -> dict[str, str]:
        return tags_of(self.jwt)

    def text(self) -> str:
        """What to hand over: a creds file, or for a bearer token the JWT alone."""
        return nats_jwt.format_creds(self.jwt, self.seed) if self.seed else self.jwt + "\n"

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(path, self.text())
        return path


def tags_of(token: str) -> dict[str, str]:
    """``{"tenant": ..., "agent": ..., "role": ...}``: the identity tags of a user JWT
    (read, not verified: the server verifies)."""
    out: dict[str, str] = {}
    for tag in nats_jwt.claims_of(token).get("nats", {}).get("tags", []) or []:
        name, sep, value = str(tag).partition(":")
        if sep:
            out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class Issued:
    """A credential on record (the registry never holds a secret)."""

    user: str  # the credential's public key (U...), what a revocation names
    tenant: str
    agent: str
    audit: bool
    bearer: bool
    issued_at: int
    expires_at: int = 0  # 0: never
    revoked_at: int = 0  # 0: valid

    @property
    def status(self) -> str:
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at < time.time():
            return "expired"
        return "valid"


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Authority:
    def __init__(self, directory: Path, state: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self._state = state
        self.operator = KeyPair.from_seed(state["operator"])
        self.system_account = KeyPair.from_seed(state["system_account"])
        self.account = KeyPair.from_seed(state["account"])
        self.signing = {name: KeyPair.from_seed(seed) for name, seed in state["signing"].items()}

    # --- creation and loading ------------------------------------------------------------

    @staticmethod
    def exists(directory: Path) -> bool:
        return (Path(directory) / STATE_FILE).is_file()

    @classmethod
    def load(cls, directory: Path) -> Authority:
        path = Path(directory) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise AuthError(
                f"no authority in {directory} (run `zeromem up`, or `zeromem auth init`)"
            ) from None
        return cls(Path(directory), state)

    @classmethod
    def load_or_create(cls, directory: Path) -> Authority:
        directory = Path(directory)
        with _locked(directory):
            if cls.exists(directory):
                return cls.load(directory)
            state = {
                "operator": KeyPair.generate("operator").seed,
                "system_account": KeyPair.generate("account").seed,
                "account": KeyPair.generate("account").seed,
                "signing": {
                    name: KeyPair.generate("account").seed for name in ("service", *SCOPES)
                },
                "redis_passwords": {role: secrets.token_urlsafe(24) for role in REDIS_ROLES},
                "created_at": int(time.time()),
                "account_issued_at": 0,
            }
            directory.mkdir(parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
            _write_private(directory / STATE_FILE, json.dumps(state, indent=2) + "\n")
            return cls(directory, state)

    # --- JWTs the servers trust ----------------------------------------------------------

    def operator_jwt(self) -> str:
        nats = {"system_account": self.system_account.public, "type": "operator", "version": 2}
        return nats_jwt.encode(
            self.operator,
            self.operator.public,
            "zeromem",
            nats,
            issued_at=self._state["created_at"],
        )

    def system_account_jwt(self) -> str:
        nats = {"limits": _UNLIMITED, "type": "account", "version": 2}
        return nats_jwt.encode(
            self.operator,
            self.system_account.public,
            SYSTEM_ACCOUNT_NAME,
            nats,
            issued_at=self._state["created_at"],
        )

    def account_jwt(self) -> str:
        """The application account: JetStream on, the agents' permission templates on
        scoped signing keys, and the revocations on record. Its issue time only grows,
        so the servers take each new version as newer than the last."""
        keys: list[Any] = [self.signing["service"].public]
        for scope in SCOPES:
            template = agent_permissions(audit=scope.startswith("auditor")).claims()
            if scope.endswith("-bearer"):
                template["bearer_token"] = True
            keys.append(
                {
                    "kind": "user_scope",
                    "key": self.signing[scope].public,
                    "role": scope,
                    "template": template,
                }
            )
        nats: dict[str, Any] = {
            "limits": {**_UNLIMITED, **_JETSTREAM},
            "signing_keys": keys,
            "type": "account",
            "version": 2,
        }
        revocations = self.registry().get("revocations", {})
        if revocations:
            nats["revocations"] = revocations
        return nats_jwt.encode(
            self.operator,
            self.account.public,
            ACCOUNT_NAME,
            nats,
            issued_at=self._account_issued_at(),
        )

    def _account_issued_at(self) -> int:
        return int(max(self._state.get("account_issued_at", 0), self._state["created_at"]))

    def _bump_account(self) -> None:
        """A new issue time for the account JWT (strictly later than the last one)."""
        with _locked(self.directory):
            state = json.loads((self.directory / STATE_FILE).read_text())
            last = max(state.get("account_issued_at", 0), state["created_at"])
            state["account_issued_at"] = max(int(time.time()), last + 1)
            _write_private(self.directory / STATE_FILE, json.dumps(state, indent=2) + "\n")
            self._state = state

    def nats_config(
        self,
        *,
        host: str,
        port: int,
        store_dir: Path,
        resolver_dir: Path,
        server_name: str = "zeromem",
        extra: str = "",
        jetstream: str = "",
    ) -> str:
        """A nats-server configuration in operator mode with a full resolver: the
        accounts are preloaded, and later versions pushed to ``$SYS.REQ.CLAIMS.UPDATE``
        are kept in ``resolver_dir`` across restarts."""
        return (
            "\n".join(
                [
                    f"server_name: {json.dumps(server_name)}",
                    f"host: {json.dumps(host)}",
                    f"port: {port}",
                    # ``jetstream``: the block's settings in full (the store and its
                    # cipher, embedded.servers.NatsServer.jetstream_block)
                    f"jetstream {{\n  {jetstream}\n}}"
                    if jetstream
                    else f"jetstream {{ store_dir: {json.dumps(str(store_dir))} }}",
                    f"operator: {self.operator_jwt()}",
                    f"system_account: {self.system_account.public}",
                    "resolver {",
                    "  type: full",
                    f"  dir: {json.dumps(str(resolver_dir))}",
                    "  allow_delete: false",
                    '  interval: "2m"',
                    '  timeout: "1.9s"',
                    "}",
                    "resolver_preload {",
                    f"  {self.system_account.public}: {self.system_account_jwt()}",
                    f"  {self.account.public}: {self.account_jwt()}",
                    "}",
                    extra,
                ]
            )
            + "\n"
        )

    # --- credentials ---------------------------------------------------------------------

    def service_credential(self, role: str) -> Credential:
        """A service identity (``worker``, ``reader``, ``admin``) or ``system`` (the
        system account's user, which pushes account updates)."""
        user = KeyPair.generate("user")
        if role == "system":
            nats = {
                "pub": {},
                "sub": {},
                "subs": -1,
                "data": -1,
                "payload": -1,
                "tags": [f"{ROLE_TAG}:system"],
                "type": "user",
                "version": 2,
            }
            return Credential(
                nats_jwt.encode(self.system_account, user.public, "system", nats), user.seed
            )
        if role not in SERVICE_PERMISSIONS:
            raise AuthError(f"unknown service role {role!r}")
        nats = {
            **SERVICE_PERMISSIONS[role]().claims(),
            "tags": [f"{ROLE_TAG}:{role}"],
            "issuer_account": self.account.public,
            "type": "user",
            "version": 2,
        }
        return Credential(
            nats_jwt.encode(self.signing["service"], user.public, role, nats), user.seed
        )

    def service_creds_path(self, role: str) -> Path:
        """The service's creds file, written on first use (and kept: services restart
        with the same identity)."""
        path = self.directory / CREDS_DIR / f"{role}.creds"
        if not path.is_file():
            self.service_credential(role).write(path)
        return path

    def issue_agent(
        self,
        tenant: str,
        agent: str,
        *,
        audit: bool = False,
        bearer: bool = False,
        expires_in: float | None = None,
        record: bool = True,
    ) -> Credential:
        """A credential for ``agent`` of ``tenant``: it can act as that agent only.
        ``record=False`` (what the local CLI mints for itself, short-lived) keeps it off
        the registry. A recorded credential's tenant must exist."""
        check_tenant(tenant)
        check_agent(agent)
        if record and tenant not in self.registry().get("tenants", {}):
            raise AuthError(
                f"unknown tenant {tenant!r}: `zeromem auth tenant create {tenant}` first"
            )
        user = KeyPair.generate("user")
        now = int(time.time())
        expires_at = int(now + expires_in) if expires_in else 0
        nats = {
            "tags": [f"{TENANT_TAG}:{tenant}", f"{AGENT_TAG}:{agent}"],
            "issuer_account": self.account.public,
            "type": "user",
            "version": 2,
        }
        token = nats_jwt.encode(
            self.signing[_scope(audit, bearer)],
            user.public,
            agent,
            nats,
            issued_at=now,
            expires_at=expires_at or None,
        )
        if record:
            entry = Issued(user.public, tenant, agent, audit, bearer, now, expires_at)
            with self._registry_update() as registry:
                registry.setdefault("issued", []).append(asdict(entry))
        return Credential(token, "" if bearer else user.seed)

    # --- tenants, the registry, revocation -------------------------------------------------

    def create_tenant(self, tenant: str) -> bool:
        """Record ``tenant``; False if it existed already."""
        check_tenant(tenant)
        with self._registry_update() as registry:
            tenants = registry.setdefault("tenants", {})
            if tenant in tenants:
                return False
            tenants[tenant] = {"created_at": int(time.time())}
            return True

    def tenants(self) -> list[str]:
        return sorted(self.registry().get("tenants", {}))

    def issued(self, tenant: str | None = None) -> list[Issued]:
        return [
            Issued(**e)
            for e in self.registry().get("issued", [])
            if tenant is None or e["tenant"] == tenant
        ]

    def revoke(
        self, *, user: str | None = None, tenant: str | None = None, agent: str | None = None
    ) -> list[Issued]:
        """Revoke the credential with public key ``user``, or every credential of
        ``tenant`` (of ``agent`` only, when given). Returns what was revoked; the account
        JWT to push (``push_account``) then carries it."""
        if user is None and tenant is None:
            raise AuthError("name a credential (its user key) or a tenant")
        now = int(time.time())
        revoked: list[Issued] = []
        with self._registry_update() as registry:
            revocations = registry.setdefault("revocations", {})
            for entry in registry.get("issued", []):
                if entry["revoked_at"]:
                    continue
                if user is not None and entry["user"] != user:
                    continue
                if tenant is not None and entry["tenant"] != tenant:
                    continue
                if agent is not None and entry["agent"] != agent:
                    continue
                entry["revoked_at"] = now
                # A user JWT issued at or before this time, for that key, is refused.
                revocations[entry["user"]] = now
                revoked.append(Issued(**entry))
        if revoked:
            self._bump_account()
        return revoked

    def registry(self) -> dict[str, Any]:
        try:
            return json.loads((self.directory / REGISTRY_FILE).read_text())  # type: ignore[no-any-return]
        except FileNotFoundError:
            return {}

    @contextlib.contextmanager
    def _registry_update(self) -> Iterator[dict[str, Any]]:
        with _locked(self.directory):
            registry = self.registry()
            yield registry
            _write_private(self.directory / REGISTRY_FILE, json.dumps(registry, indent=1) + "\n")

    # --- Redis ---------------------------------------------------------------------------

    def redis_password(self, role: str) -> str:
        return str(self._state["redis_passwords"][role])


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One writer at a time across processes (two CLI commands issuing at once)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    with open(Path(directory) / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_tenant(tenant: str) -> str:
    if not TENANT_REGEX.match(tenant):
        raise AuthError(
            f"invalid tenant {tenant!r}: lowercase letters, digits, '_' and '-', "
            "starting with a letter or digit, at most 64"
        )
    return tenant


def check_agent(agent: str) -> str:
    if not AGENT_REGEX.match(agent):
        raise AuthError(
            f"invalid agent id {agent!r}: lowercase letters, digits, '_' and '-', "
            "starting with a letter or digit, at most 64"
        )
    if agent.startswith(RESERVED_AGENT_PREFIX):
        raise AuthError(f"agent ids starting with {RESERVED_AGENT_PREFIX!r} are the services' own")
    return agent


async def push_account(authority: Authority, connect: Any) -> None:
    """Push the current account JWT to the running servers: revocations take effect at
    once (the server closes every connection of a revoked credential). ``connect`` is an
    async callable returning a NATS connection as the system account's user."""
    from zeromem import naming

    nc = await connect(authority.service_creds_path("system"))
    try:
        reply = await nc.request(
            naming.SYS_CLAIMS_UPDATE, authority.account_jwt().encode(), timeout=5
        )
        answer = json.loads(reply.data)
        if "error" in answer:
            raise AuthError(f"the server refused the account update: {answer['error']}")
    finally:
        await nc.close()
