"""Who is looking: a bearer token, the viewer it names, and the credential the page reads
with on that viewer's behalf.

The model is MCP over HTTP's (``zeromem.auth.mcp_tokens``): ``zeromem auth inspect-token
TENANT AGENT`` issues the agent a NATS credential and records ``sha256(token) -> {tenant,
agent, creds}``; every read the page makes for that viewer goes through that credential,
so the NATS server, not this process, decides what it may see (a tenant's agent reaches
only its own tenant's subjects). ``zeromem auth inspect-token --operator`` records the
operator's admin credential instead: it may look at every tenant and at the operator views
(dead letters of all tenants, shard lag, lease holders).

A browser sends the token once (``/login``), then carries it in an HttpOnly, SameSite=Strict
cookie; other clients send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request

from zeromem.auth.credentials import Identity, load_credential
from zeromem.auth.mcp_tokens import McpTokens

COOKIE = "zm_inspect"
# The reader the operator's reads are recorded under in a tenant's audit trail (an id of
# the services' reserved prefix: never issued to an agent).
OPERATOR_AGENT = "zeromem-inspect"
TOKENS_FILE = "inspect-tokens.json"


class Forbidden(PermissionError):
    """A viewer asked for what its credential does not cover."""


@dataclass(frozen=True, slots=True)
class Viewer:
    tenant: str  # "" for the operator
    agent: str
    creds: str  # the creds file every read of this viewer goes through
    operator: bool = False

    @property
    def name(self) -> str:
        return "operator" if self.operator else f"{self.tenant}/{self.agent}"

    def may_see(self, tenant: str) -> bool:
        return self.operator or tenant == self.tenant

    def check(self, tenant: str) -> None:
        if not self.may_see(tenant):
            raise Forbidden(f"{self.name} may not look at tenant {tenant!r}")

    def check_operator(self) -> None:
        if not self.operator:
            raise Forbidden(
                "the operator views need an operator token "
                "(`zeromem auth inspect-token --operator`)"
            )


@functools.lru_cache(maxsize=256)
def _is_admin(creds: str) -> bool:
    """Whether a creds file holds the operator's admin identity (its JWT's role tag)."""
    try:
        return Identity.of(load_credential(creds)).role == "admin"
    except (OSError, ValueError):
        return False


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Access:
    def __init__(self, tokens_file: Path) -> None:
        self.tokens = McpTokens(tokens_file)
        # Tokens that live only as long as this process: the link ``zeromem inspect``
        # prints on the operator's own machine (who can read the authority anyway).
        self._session_tokens: dict[str, Viewer] = {}

    def session_token(self, viewer: Viewer) -> str:
        token = secrets.token_urlsafe(32)
        self._session_tokens[_digest(token)] = viewer
        return token

    def viewer(self, token: str) -> Viewer | None:
        if not token:
            return None
        found = self._session_tokens.get(_digest(token))
        if found is not None:
            return found
        identity = self.tokens.lookup(token)
        if identity is None:
            return None
        return Viewer(identity.tenant, identity.agent, identity.creds, _is_admin(identity.creds))

    def viewer_of(self, request: Request) -> Viewer | None:
        return self.viewer(token_of(request))


def token_of(request: Request) -> str:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get(COOKIE, "")
