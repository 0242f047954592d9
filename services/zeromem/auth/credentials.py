"""Finding the credential a process connects with, and turning it into ``nats.connect``
options (credential, inbox prefix, TLS).

Where a credential comes from, first match wins:

1. what the caller passes (``creds=`` a creds file path or a ``Credential``, ``token=``);
2. the environment: ``ZEROMEM_NATS_CREDS`` / ``NATS_CREDS`` / ``ZEROMEM_CREDS`` (a creds
   file path), ``ZEROMEM_TOKEN`` (a bearer token), read into ``Settings``;
3. the local authority (``{data_dir}/auth`` of ``zeromem up``, or ``ZEROMEM_AUTH_DIR``):
   whoever can read its keys can issue any credential anyway, so on the operator's own
   machine an agent credential is minted on the spot, short-lived and unrecorded. This is
   what keeps the local start at two commands;
4. nothing: an anonymous connection (a server with authentication refuses it).
"""

from __future__ import annotations

import functools
import ssl
from collections import UserString
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeromem import naming
from zeromem.auth.authority import AuthError, Authority, Credential
from zeromem.auth.jwt import parse_creds
from zeromem.auth.permissions import AGENT_TAG, ROLE_TAG, TENANT_TAG
from zeromem.settings import Settings

# How long a credential minted from the local authority stays valid.
LOCAL_CREDENTIAL_TTL_S = 12 * 3600


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a credential says it is (its tags): an agent of a tenant, or a service role."""

    tenant: str = ""
    agent: str = ""
    role: str = ""

    @classmethod
    def of(cls, credential: Credential | None) -> Identity:
        if credential is None:
            return cls()
        tags = credential.tags()
        return cls(tags.get(TENANT_TAG, ""), tags.get(AGENT_TAG, ""), tags.get(ROLE_TAG, ""))

    def inbox_prefix(self, tenant: str = "", agent: str = "") -> str | None:
        """The inbox prefix the server lets this identity subscribe to (None: the
        client's default)."""
        if self.role in ("worker", "reader"):
            return naming.service_inbox_prefix(self.role)
        tenant, agent = self.tenant or tenant, self.agent or agent
        if tenant and agent:
            return naming.agent_inbox_prefix(tenant, agent)
        return None


def load_credential(source: str | Path | Credential | None) -> Credential | None:
    """A credential from a creds file path (or a bearer token's file), or as given."""
    if source is None or source == "":
        return None
    if isinstance(source, Credential):
        return source
    text = Path(source).expanduser().read_text()
    jwt, seed = parse_creds(text)
    return Credential(jwt, seed)


def credential_from_settings(settings: Settings) -> Credential | None:
    if settings.bus.nats_creds:
        return load_credential(settings.bus.nats_creds)
    if settings.bus.nats_token:
        return Credential(parse_creds(settings.bus.nats_token)[0], "")
    return None


@functools.lru_cache(maxsize=8)
def _local_authority(directory: str) -> Authority | None:
    return Authority.load(Path(directory)) if Authority.exists(Path(directory)) else None


def local_authority(settings: Settings) -> Authority | None:
    """The authority ``zeromem up`` keeps for this directory, if this process can read it."""
    try:
        return _local_authority(str(Path(settings.authority_dir).resolve()))
    except (OSError, ValueError):
        return None


def agent_credential(
    settings: Settings,
    tenant: str,
    agent: str,
    given: str | Path | Credential | None = None,
    token: str | None = None,
) -> Credential | None:
    """The credential an agent connects with (the order is in the module docstring)."""
    if given is not None and given != "":
        return load_credential(given)
    if token:
        return Credential(parse_creds(token)[0], "")
    found = credential_from_settings(settings)
    if found is not None:
        return found
    authority = local_authority(settings)
    if authority is not None:
        try:
            return authority.issue_agent(
                tenant, agent, audit=True, record=False, expires_in=LOCAL_CREDENTIAL_TTL_S
            )
        except AuthError:
            raise
    return None


def check_identity(credential: Credential | None, tenant: str, agent: str) -> tuple[str, str]:
    """(tenant, agent) to act as: the credential's own when it names them. Asking for
    another is refused here, before the server would refuse every publish."""
    identity = Identity.of(credential)
    if identity.tenant and tenant and identity.tenant != tenant:
        raise AuthError(f"this credential is for tenant {identity.tenant!r}, not {tenant!r}")
    if identity.agent and agent and identity.agent != agent:
        raise AuthError(f"this credential is for agent {identity.agent!r}, not {agent!r}")
    return identity.tenant or tenant, identity.agent or agent


def tls_context(ca: str = "", cert: str = "", key: str = "") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca or None)
    if cert:
        context.load_cert_chain(cert, key or None)
    return context


def nats_options(
    settings: Settings, credential: Credential | None, *, inbox_prefix: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect``."""
    options: dict[str, Any] = {}
    if credential is not None:
        if credential.seed:
            options["user_credentials"] = UserString(credential.text())
        else:  # a bearer token: the server asks for no signature
            jwt = credential.jwt.encode()
            options["user_jwt_cb"] = lambda: bytearray(jwt)
            options["signature_cb"] = lambda _nonce: b""
    if inbox_prefix:
        options["inbox_prefix"] = inbox_prefix
    bus = settings.bus
    if bus.nats_url.startswith("tls://") or bus.nats_tls_ca or bus.nats_tls_cert:
        options["tls"] = tls_context(bus.nats_tls_ca, bus.nats_tls_cert, bus.nats_tls_key)
        if bus.nats_tls_hostname:
            options["tls_hostname"] = bus.nats_tls_hostname
    return options
