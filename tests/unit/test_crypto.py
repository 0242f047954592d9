"""Encryption at rest (issue 14 item 1): wrapping data keys, sealing blobs, and the
bindings that make a blob useless anywhere but where it was sealed."""

from __future__ import annotations

import base64

import msgspec
import pytest

from zeromem.lifecycle.crypto import (
    DataKey,
    KeyUnavailableError,
    MasterKey,
    is_sealed,
    new_master_key,
    place,
    unwrap_data_key,
    wrap_data_key,
)
from zeromem.lifecycle.vault import EncryptionPolicy
from zeromem.schemas import MemoryItem, MemoryType

MASTER = MasterKey.from_base64(new_master_key())
ITEM = MemoryItem(
    key="user:u1:k",
    value=1,
    content="c",
    type=MemoryType.FACT,
    created_at=0,
    updated_at=0,
    version=1,
)


def test_a_wrapped_data_key_unwraps_to_the_same_key() -> None:
    key = DataKey.generate()
    stored = wrap_data_key(MASTER, "acme", "user:u1", key)
    assert key.secret not in stored
    again = unwrap_data_key(MASTER, "acme", "user:u1", stored)
    assert again.secret == key.secret and again.key_id == key.key_id


def test_a_wrapped_key_does_not_unwrap_with_another_master_key() -> None:
    stored = wrap_data_key(MASTER, "acme", "user:u1", DataKey.generate())
    other = MasterKey.from_base64(new_master_key())
    with pytest.raises(KeyUnavailableError):
        unwrap_data_key(other, "acme", "user:u1", stored)


@pytest.mark.parametrize(("tenant", "owner"), [("acme", "user:u2"), ("evil", "user:u1")])
def test_a_wrapped_key_is_bound_to_its_tenant_and_owner(tenant: str, owner: str) -> None:
    stored = wrap_data_key(MASTER, "acme", "user:u1", DataKey.generate())
    with pytest.raises(KeyUnavailableError):
        unwrap_data_key(MASTER, tenant, owner, stored)


def test_a_sealed_blob_opens_where_it_was_sealed_and_hides_the_plaintext() -> None:
    key = DataKey.generate()
    where = place("acme", "user:u1:conf", "d")
    blob = key.seal(where, b"sk-SECRET-123")
    assert is_sealed(blob) and b"sk-SECRET-123" not in blob
    assert key.open(where, blob) == b"sk-SECRET-123"


@pytest.mark.parametrize(
    "elsewhere",
    [
        place("acme", "user:u1:other", "d"),  # another memory of the same owner
        place("acme", "user:u1:conf", "rc"),  # another field of the same memory
        place("evil", "user:u1:conf", "d"),  # the same key in another tenant
    ],
)
def test_a_sealed_blob_cannot_be_moved(elsewhere: bytes) -> None:
    key = DataKey.generate()
    blob = key.seal(place("acme", "user:u1:conf", "d"), b"value")
    with pytest.raises(KeyUnavailableError):
        key.open(elsewhere, blob)


def test_a_blob_does_not_open_with_another_data_key() -> None:
    """A forgotten owner's key is replaced by a new one: the old blobs stay unreadable."""
    where = place("acme", "user:u1:conf", "d")
    blob = DataKey.generate().seal(where, b"value")
    with pytest.raises(KeyUnavailableError):
        DataKey.generate().open(where, blob)
    same_id = DataKey.of(blob[2:10], b"\x00" * 32)  # the right id, the wrong secret
    with pytest.raises(KeyUnavailableError):
        same_id.open(where, blob)


def test_a_tampered_blob_fails_authentication() -> None:
    key = DataKey.generate()
    where = place("acme", "user:u1:conf", "d")
    blob = bytearray(key.seal(where, b"value"))
    blob[-1] ^= 1
    with pytest.raises(KeyUnavailableError):
        key.open(where, bytes(blob))


def test_sealing_is_deterministic_so_a_rebuild_writes_the_same_bytes() -> None:
    key = DataKey.generate()
    where = place("acme", "user:u1:conf", "d")
    assert key.seal(where, b"value") == key.seal(where, b"value")
    # a different plaintext or place gets a different nonce
    assert key.seal(where, b"value")[10:22] != key.seal(where, b"other")[10:22]
    assert (
        key.seal(where, b"value")[10:22]
        != key.seal(place("acme", "user:u1:x", "d"), b"value")[10:22]
    )


def test_a_sealed_blob_never_looks_like_msgpack() -> None:
    plain = msgspec.msgpack.encode(ITEM)
    assert not is_sealed(plain)
    with pytest.raises(msgspec.DecodeError):
        msgspec.msgpack.decode(DataKey.generate().seal(b"x", plain))


def test_a_master_key_must_be_32_bytes_of_base64() -> None:
    with pytest.raises(ValueError):
        MasterKey.from_base64(base64.b64encode(b"short").decode())
    with pytest.raises(ValueError):
        MasterKey.from_base64("not base64 !!")


def test_the_policy_seals_sensitive_memories_and_listed_tenants() -> None:
    item, sensitive = ITEM, msgspec.structs.replace(ITEM, sensitive=True)
    policy = EncryptionPolicy.parse("acme, globex")
    assert policy.seals("acme", item) and policy.seals("globex", item)
    assert not policy.seals("initech", item) and policy.seals("initech", sensitive)
    everyone = EncryptionPolicy.parse("*")
    assert everyone.seals("initech", item)
    nobody = EncryptionPolicy.parse("")
    assert not nobody.seals("acme", item) and nobody.seals("acme", sensitive)
