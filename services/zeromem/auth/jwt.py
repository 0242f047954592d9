"""NATS nkeys and JWTs, encoded here (the format is small: ADR-14 of nats-io's
architecture decisions describes it for libraries without Go's jwt package).

An nkey is an ed25519 key pair whose public half is base32 text starting with a letter
for its role (O operator, A account, U user); its seed (``S...``) is the secret. A JWT is
``base64url(header).base64url(claims).base64url(ed25519 signature)``, signed by the
issuer's key; the server checks the chain operator -> account -> user itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import nkeys

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}

PREFIXES = {
    "operator": nkeys.PREFIX_BYTE_OPERATOR,
    "account": nkeys.PREFIX_BYTE_ACCOUNT,
    "user": nkeys.PREFIX_BYTE_USER,
}


@dataclass(frozen=True, slots=True)
class KeyPair:
    """An nkey: ``public`` (``O...``, ``A...``, ``U...``) and its ``seed`` (``S...``)."""

    public: str
    seed: str

    @classmethod
    def generate(cls, role: str) -> KeyPair:
        return cls.from_seed(nkeys.encode_seed(os.urandom(32), PREFIXES[role]).decode())

    @classmethod
    def from_seed(cls, seed: str) -> KeyPair:
        kp = nkeys.from_seed(bytearray(seed.encode()))
        return cls(kp.public_key.decode(), seed)

    def sign(self, data: bytes) -> bytes:
        kp = nkeys.from_seed(bytearray(self.seed.encode()))
        try:
            signature: bytes = kp.sign(data)
            return signature
        finally:
            kp.wipe()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def encode(
    signer: KeyPair,
    subject: str,
    name: str,
    nats: dict[str, Any],
    *,
    issued_at: int | None = None,
    expires_at: int | None = None,
) -> str:
    """A JWT about ``subject`` (a public nkey) signed by ``signer``. ``nats`` is the
    role's claims (``type`` and ``version`` included). The id (``jti``) is the hash of the
    claims, as nats-io's own library computes it."""
    claims: dict[str, Any] = {
        "jti": "",
        "iat": issued_at or int(time.time()),
        "iss": signer.public,
        "name": name,
        "sub": subject,
        "nats": nats,
    }
    if expires_at:
        claims["exp"] = int(expires_at)
    claims["jti"] = base64.b32encode(hashlib.sha256(_compact(claims)).digest()).decode().rstrip("=")
    body = f"{_b64(_compact(_HEADER))}.{_b64(_compact(claims))}"
    return f"{body}.{_b64(signer.sign(body.encode()))}"


def claims_of(token: str) -> dict[str, Any]:
    """The claims of a JWT, NOT verified (the server verifies; a client reads its own
    credential's tags with this, to know the identity it was issued)."""
    try:
        _, body, _ = token.split(".")
        claims = json.loads(_unb64(body))
    except ValueError as exc:
        raise ValueError("not a NATS JWT") from exc
    if not isinstance(claims, dict) or "nats" not in claims:
        raise ValueError("not a NATS JWT")
    return claims


def verify(token: str, public: str) -> dict[str, Any]:
    """The claims, once the signature is checked against ``public`` (an nkey); raises
    ``ValueError`` on a bad signature."""
    import nacl.exceptions
    import nacl.signing

    body, _, signature = token.rpartition(".")
    raw = base64.b32decode(public + "=" * (-len(public) % 8))  # role byte, key, crc16
    try:
        nacl.signing.VerifyKey(raw[1:33]).verify(body.encode(), _unb64(signature))
    except nacl.exceptions.BadSignatureError as exc:
        raise ValueError("bad signature") from exc
    return claims_of(token)


USER_CREDS_TEMPLATE = """-----BEGIN NATS USER JWT-----
{jwt}
------END NATS USER JWT------

************************* IMPORTANT *************************
NKEY Seed printed below can be used to sign and prove identity.
NKEYs are sensitive and should be treated as secrets.

-----BEGIN USER NKEY SEED-----
{seed}
------END USER NKEY SEED------

*************************************************************
"""


def format_creds(jwt: str, seed: str) -> str:
    """The ``.creds`` file every NATS client reads (``nats.connect(user_credentials=)``)."""
    return USER_CREDS_TEMPLATE.format(jwt=jwt, seed=seed)


def parse_creds(text: str) -> tuple[str, str]:
    """(JWT, seed) from a creds file's text; a bare JWT (a bearer token) gives no seed."""
    lines = [line.strip() for line in text.splitlines()]
    jwt = seed = ""
    for i, line in enumerate(lines):
        if "BEGIN NATS USER JWT" in line and i + 1 < len(lines):
            jwt = lines[i + 1]
        elif "BEGIN USER NKEY SEED" in line and i + 1 < len(lines):
            seed = lines[i + 1]
    if not jwt and text.strip().count(".") == 2:
        jwt = text.strip()
    if not jwt:
        raise ValueError("neither a creds file nor a JWT")
    return jwt, seed
