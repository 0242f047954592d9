"""The cryptography of encryption at rest: master keys, data keys, sealed blobs.

Envelope encryption: each owner of an encrypting tenant (or of a sensitive memory) has a
random 256-bit **data key**; the data key is stored only **wrapped** (encrypted) by a
**master key** that never reaches Redis. Forgetting the owner deletes the wrapped data
key, and every copy sealed with it becomes unreadable (crypto-shredding). The master key
sits behind ``KeyProvider``, so a KMS can wrap and unwrap instead of a local key.

A sealed blob is ``0xc1 | version | key id (8) | nonce (12) | AES-256-GCM ciphertext``.
0xc1 is the one byte msgpack never uses, so a reader tells a sealed blob from a plain
msgpack one by its first byte. The associated data binds the ciphertext to the data key's
id and to where it belongs (tenant, owner, memory key, field): a blob copied into another
memory, owner or tenant fails authentication instead of decrypting there.

The nonce is synthetic (an HMAC of the associated data and the plaintext, under a key
derived from the data key), not random: ``zeromem rebuild`` seals what the workers sealed
and must produce the same bytes, or a rebuilt state would never equal the live one. Two
equal plaintexts at the same place get the same ciphertext (which reveals only that they
are equal); different ones get different nonces, so a nonce never repeats with a
different plaintext under one key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32  # AES-256
KEY_ID_BYTES = 8
NONCE_BYTES = 12
SEALED_MARK = 0xC1  # never the first byte of a msgpack value
ENVELOPE_VERSION = 1
_HEADER = 2 + KEY_ID_BYTES + NONCE_BYTES
_WRAP_LABEL = b"zeromem data key v1\x00"
_SEAL_LABEL = b"zeromem sealed v1\x00"
_NONCE_LABEL = b"zeromem nonce v1"
_ID_LABEL = b"zeromem master key id v1"


class KeyUnavailableError(Exception):
    """A blob that cannot be opened: its data key was destroyed (the owner was forgotten)
    or it was moved from where it was sealed, or it is corrupt."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"cannot decrypt {what}: its key is gone or it was moved or altered")


class KeyProvider(Protocol):
    """Wraps and unwraps data keys. ``context`` is bound to the wrapped form: a wrapped key
    unwraps only with the context it was wrapped with (tenant, owner, key id)."""

    def key_id(self) -> str:
        """A public name of the master key (never the key): processes compare it to tell
        they wrap with the same one."""
        ...

    def wrap(self, data_key: bytes, context: bytes) -> bytes: ...

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes: ...


class MasterKey:
    """A local master key (``ZEROMEM_MASTER_KEY``: 32 bytes, base64) as a KeyProvider."""

    __slots__ = ("_aead", "_id")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a master key is {KEY_BYTES} bytes, not {len(key)}")
        self._aead = AESGCM(key)
        self._id = hmac.new(key, _ID_LABEL, hashlib.sha256).hexdigest()[:16]

    def key_id(self) -> str:
        return self._id

    @classmethod
    def from_base64(cls, text: str) -> MasterKey:
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except ValueError as exc:
            raise ValueError("ZEROMEM_MASTER_KEY is not valid base64") from exc
        return cls(raw)

    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)  # a wrap happens once per key: random is right here
        return nonce + self._aead.encrypt(nonce, data_key, _WRAP_LABEL + context)

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        try:
            return self._aead.decrypt(
                wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], _WRAP_LABEL + context
            )
        except InvalidTag as exc:
            raise KeyUnavailableError("a data key (wrong master key or context)") from exc


def new_master_key() -> str:
    """A fresh master key, base64 (what ``zeromem up`` writes when none is set)."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()


@dataclass(frozen=True, slots=True)
class DataKey:
    key_id: bytes
    secret: bytes = field(repr=False)
    _aead: AESGCM = field(repr=False, compare=False)
    _nonce_key: bytes = field(repr=False, compare=False)

    @classmethod
    def of(cls, key_id: bytes, secret: bytes) -> DataKey:
        nonce_key = hmac.new(secret, _NONCE_LABEL, hashlib.sha256).digest()
        return cls(key_id, secret, AESGCM(secret), nonce_key)

    @classmethod
    def generate(cls) -> DataKey:
        return cls.of(secrets.token_bytes(KEY_ID_BYTES), secrets.token_bytes(KEY_BYTES))

    def seal(self, where: bytes, plaintext: bytes) -> bytes:
        aad = _SEAL_LABEL + self.key_id + where
        nonce = hmac.new(self._nonce_key, aad + plaintext, hashlib.sha256).digest()[:NONCE_BYTES]
        head = bytes((SEALED_MARK, ENVELOPE_VERSION)) + self.key_id + nonce
        return head + self._aead.encrypt(nonce, plaintext, aad)

    def open(self, where: bytes, blob: bytes) -> bytes:
        if key_id_of(blob) != self.key_id:
            raise KeyUnavailableError("a blob sealed with another data key")
        nonce = blob[2 + KEY_ID_BYTES : _HEADER]
        try:
            return self._aead.decrypt(nonce, blob[_HEADER:], _SEAL_LABEL + self.key_id + where)
        except InvalidTag as exc:
            raise KeyUnavailableError("a blob moved from where it was sealed") from exc


def is_sealed(blob: bytes | None) -> bool:
    return bool(blob) and blob[0] == SEALED_MARK  # type: ignore[index]  # bool(blob) checks it


def key_id_of(blob: bytes) -> bytes:
    if len(blob) < _HEADER or blob[0] != SEALED_MARK or blob[1] != ENVELOPE_VERSION:
        raise KeyUnavailableError("a blob that is not sealed")
    return blob[2 : 2 + KEY_ID_BYTES]


def place(tenant: str, key: str, field_name: str) -> bytes:
    """Where a blob belongs: bound into its associated data. The memory key names the owner
    (``namespace:owner_id:name``), so binding the key binds the owner too."""
    return f"{tenant}\x00{key}\x00{field_name}".encode()


def wrap_context(tenant: str, owner: str, key_id: bytes) -> bytes:
    return f"{tenant}\x00{owner}\x00".encode() + key_id


def wrap_data_key(provider: KeyProvider, tenant: str, owner: str, key: DataKey) -> bytes:
    """``key id | wrapped secret``: what Redis stores for an owner."""
    return key.key_id + provider.wrap(key.secret, wrap_context(tenant, owner, key.key_id))


def unwrap_data_key(provider: KeyProvider, tenant: str, owner: str, stored: bytes) -> DataKey:
    key_id = stored[:KEY_ID_BYTES]
    secret = provider.unwrap(stored[KEY_ID_BYTES:], wrap_context(tenant, owner, key_id))
    return DataKey.of(key_id, secret)
