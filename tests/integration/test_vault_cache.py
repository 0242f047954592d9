"""A worker's shards share one data-key cache (``lifecycle.vault.Vault``). A shard that
takes its lease asks for every cached key to be read again (a rebuild may have made new
ones meanwhile); that must not pull a key from under another shard's batch between its
``load`` and its ``seal``: the batch's commands were rejected with KeyUnavailableError."""

from __future__ import annotations

import base64
import os
import uuid

from zeromem.bus import connect_redis
from zeromem.lifecycle.crypto import key_id_of
from zeromem.lifecycle.vault import EncryptionPolicy, Vault, master_key_provider
from zeromem.settings import Settings
from zeromem.store.keys import redis_keys


def _vault(settings: Settings) -> Vault:
    provider = master_key_provider(base64.b64encode(os.urandom(32)).decode())
    assert provider is not None
    return Vault(connect_redis(settings), provider, EncryptionPolicy.parse("*"))


async def test_a_loaded_key_survives_another_shard_asking_for_fresh_keys(
    settings: Settings,
) -> None:
    vault = _vault(settings)
    tenant = f"vault-{uuid.uuid4().hex[:8]}"
    try:
        await vault.load([(tenant, "user:a")], create=True)  # shard 1's batch
        vault.clear()  # shard 2 takes its lease meanwhile
        sealed = vault.seal(tenant, "user:a:k", "d", b"plaintext")  # shard 1 seals
        assert vault.open(tenant, "user:a:k", "d", sealed) == b"plaintext"
    finally:
        await vault.redis.aclose()


async def test_a_key_made_again_is_read_afresh_at_the_next_load(settings: Settings) -> None:
    vault = _vault(settings)
    tenant = f"vault-{uuid.uuid4().hex[:8]}"
    try:
        await vault.load([(tenant, "user:a")], create=True)
        before = key_id_of(vault.seal(tenant, "user:a:k", "d", b"x"))
        # A rebuild replayed a forget (the key destroyed) and a later write (a new key).
        await vault.redis.delete(redis_keys(tenant).data_key("user:a"))
        vault.clear()
        await vault.load([(tenant, "user:a")], create=True)
        after = key_id_of(vault.seal(tenant, "user:a:k", "d", b"x"))
        assert after != before
    finally:
        await vault.redis.aclose()
