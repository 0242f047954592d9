"""Which memories are encrypted at rest, and the owners' data keys that seal them.

``EncryptionPolicy`` decides: a memory put with ``sensitive=True``, and every memory of a
tenant the operator lists in ``ZEROMEM_ENCRYPT_TENANTS`` (``*``: every tenant). A tenant
asks the operator, the way it asks for a quota: the list is a deployment setting, read
by the workers (which seal) and the read services (which open).

``Vault`` holds the unwrapped data keys a process needs, loaded from Redis in one round
trip per batch (``load``) before the synchronous code that seals or opens runs. Only the
workers create keys (``create=True``); the read services read them. A cached key is
checked against the key id in every blob it opens, so a key that was shredded and
replaced (the owner forgotten, then written again) is loaded afresh, never misused.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from redis.asyncio import Redis

from zeromem.lifecycle.crypto import (
    DataKey,
    KeyProvider,
    KeyUnavailableError,
    MasterKey,
    is_sealed,
    key_id_of,
    place,
    unwrap_data_key,
    wrap_data_key,
)
from zeromem.schemas import MemoryItem, owner_of
from zeromem.settings import Settings
from zeromem.store.keys import (
    ARCHIVE_SEAL,
    DATA_KEY_FIELD,
    master_key_check_key,
    redis_keys,
)

ALL_TENANTS = "*"
# Unwrapped keys kept per process. Bounded: past it the oldest are dropped (a reload costs
# one HGET per owner and one unwrap, about 10 us).
CACHED_KEYS = 65536


@dataclass(frozen=True, slots=True)
class EncryptionPolicy:
    tenants: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str) -> EncryptionPolicy:
        """``ZEROMEM_ENCRYPT_TENANTS``: tenants separated by commas, or ``*``."""
        return cls(frozenset(t.strip() for t in text.split(",") if t.strip()))

    def tenant_encrypts(self, tenant: str) -> bool:
        tenants = self.tenants
        return bool(tenants) and (tenant in tenants or ALL_TENANTS in tenants)

    def seals(self, tenant: str, item: MemoryItem) -> bool:
        return item.sensitive or self.tenant_encrypts(tenant)


class Vault:
    def __init__(self, redis: Redis, provider: KeyProvider, policy: EncryptionPolicy) -> None:
        self.redis = redis
        self.provider = provider
        self.policy = policy
        self._keys: dict[tuple[str, str], DataKey] = {}
        # Cached keys to read again from Redis at their next ``load`` (``clear``). They
        # stay usable meanwhile: the shards of a worker share this cache, and a batch that
        # loaded its keys must still find them when it seals, whatever another shard did
        # between its ``load`` and its ``seal``.
        self._stale: set[tuple[str, str]] = set()

    async def load(self, owners: Iterable[tuple[str, str]], *, create: bool = False) -> None:
        """Make the data key of each (tenant, owner) available to ``seal`` and ``open``;
        with ``create``, generate the keys that do not exist yet (two workers racing to
        create one agree: HSETNX keeps the first)."""
        asked = list(dict.fromkeys(owners))
        wanted = [o for o in asked if o not in self._keys or o in self._stale]
        if wanted:
            self._make_room(len(wanted), keep=asked)
            await self._fetch(wanted, create=create)

    async def reload(self, owners: Iterable[tuple[str, str]]) -> None:
        """Load again (a blob named a key id the cache did not have)."""
        wanted = list(dict.fromkeys(owners))
        self._make_room(len(wanted), keep=wanted)
        for owner in wanted:
            self._keys.pop(owner, None)
        await self._fetch(wanted, create=False)

    def _make_room(self, coming: int, keep: list[tuple[str, str]]) -> None:
        """Drop the oldest cached keys (never those in ``keep``) until ``coming`` more fit.
        Oldest first: a batch in flight loaded its keys last, so it keeps them."""
        excess = len(self._keys) + coming - CACHED_KEYS
        if excess <= 0:
            return
        kept = set(keep)
        # Only as far as the oldest ``excess``: a full cache is walked a little per load.
        for owner in list(itertools.islice((o for o in self._keys if o not in kept), excess)):
            del self._keys[owner]
            self._stale.discard(owner)

    async def _fetch(self, wanted: list[tuple[str, str]], *, create: bool) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant, owner in wanted:
                pipe.hget(redis_keys(tenant).data_key(owner), DATA_KEY_FIELD)
            stored = await pipe.execute()
        missing = [o for o, raw in zip(wanted, stored, strict=True) if not raw]
        if create and missing:
            fresh = {o: DataKey.generate() for o in missing}
            async with self.redis.pipeline(transaction=False) as pipe:
                for (tenant, owner), key in fresh.items():
                    pipe.hsetnx(
                        redis_keys(tenant).data_key(owner),
                        DATA_KEY_FIELD,
                        wrap_data_key(self.provider, tenant, owner, key),
                    )
                for tenant, owner in fresh:
                    pipe.hget(redis_keys(tenant).data_key(owner), DATA_KEY_FIELD)
                replies = await pipe.execute()
            made = dict(zip(fresh, replies[len(fresh) :], strict=True))
            stored = [made.get(o, raw) for o, raw in zip(wanted, stored, strict=True)]
        for (tenant, owner), raw in zip(wanted, stored, strict=True):
            self._stale.discard((tenant, owner))
            if raw:
                self._keys[(tenant, owner)] = unwrap_data_key(self.provider, tenant, owner, raw)
            else:
                self._keys.pop((tenant, owner), None)

    def clear(self) -> None:
        """Read every cached key again from Redis at its next ``load`` (a rebuild may have
        destroyed and made keys again). Not a drop: a batch of another shard between its
        ``load`` and its ``seal`` keeps the key it loaded (dropping it here rejected that
        batch's commands with ``KeyUnavailableError``)."""
        self._stale.update(self._keys)

    def forget(self, tenant: str, owner: str) -> None:
        """The owner's key was destroyed in Redis: drop this process's copy too."""
        self._keys.pop((tenant, owner), None)
        self._stale.discard((tenant, owner))

    def seal(self, tenant: str, key: str, field_name: str, plaintext: bytes) -> bytes:
        data_key = self._keys.get((tenant, owner_of(key)))
        if data_key is None:
            raise KeyUnavailableError(f"{key}: no data key loaded for its owner")
        return data_key.seal(place(tenant, key, field_name), plaintext)

    def needs(self, tenant: str, key: str, blob: bytes) -> bool:
        """Whether opening ``blob`` needs a key this process has not loaded."""
        if not is_sealed(blob):
            return False
        data_key = self._keys.get((tenant, owner_of(key)))
        return data_key is None or data_key.key_id != key_id_of(blob)

    def open(self, tenant: str, key: str, field_name: str, blob: bytes) -> bytes:
        """The plaintext of a sealed blob (a plain one is returned as it is). Raises
        ``KeyUnavailableError`` when its key is gone: the owner was forgotten."""
        if not is_sealed(blob):
            return blob
        data_key = self._keys.get((tenant, owner_of(key)))
        if data_key is None:
            raise KeyUnavailableError(f"{key}: its owner's data key is gone")
        return data_key.open(place(tenant, key, field_name), blob)

    async def prepare_open(self, tenant: str, blobs: Iterable[tuple[str, bytes | None]]) -> None:
        """Load the keys that opening these (memory key, blob) pairs needs."""
        owners = {
            (tenant, owner_of(key)) for key, blob in blobs if blob and self.needs(tenant, key, blob)
        }
        if owners:
            await self.reload(owners)


def master_key_provider(text: str) -> KeyProvider | None:
    """The master key from its base64 setting; None when unset (nothing can be sealed)."""
    return MasterKey.from_base64(text) if text else None


# The vault each read service opens with, by the Redis connection it reads through: the
# read paths (query, recall) take a connection everywhere already, so the vault travels
# with it instead of through every signature between a handler and the row decoder.
_ATTACHED: weakref.WeakKeyDictionary[Redis, Vault] = weakref.WeakKeyDictionary()


def attach(redis: Redis, vault: Vault | None) -> None:
    """Readers through ``redis`` open sealed memories with ``vault`` (None: detach)."""
    if vault is None:
        _ATTACHED.pop(redis, None)
    else:
        _ATTACHED[redis] = vault


def attached(redis: Redis) -> Vault | None:
    return _ATTACHED.get(redis)


async def open_blobs(
    redis: Redis, tenant: str, blobs: list[tuple[str, str, bytes]]
) -> dict[int, bytes | None]:
    """For a reader: the plaintext of each sealed (memory key, field, blob) by its index in
    ``blobs``, None for one whose key is gone (a forgotten owner's: never returned). Plain
    blobs are not in the answer; without a vault every sealed one is None."""
    sealed = [n for n, (_, _, blob) in enumerate(blobs) if is_sealed(blob)]
    if not sealed:
        return {}
    vault = attached(redis)
    if vault is None:
        return dict.fromkeys(sealed)
    await vault.prepare_open(tenant, [(blobs[n][0], blobs[n][2]) for n in sealed])
    out: dict[int, bytes | None] = {}
    for n in sealed:
        key, field_name, blob = blobs[n]
        try:
            out[n] = vault.open(tenant, key, field_name, blob)
        except KeyUnavailableError:
            out[n] = None
    return out


async def open_archive_records(
    redis: Redis, tenant: str, records: dict[str, bytes]
) -> dict[str, bytes]:
    """An owner's archive records (memory key -> stored record) as plain msgpack, the
    sealed ones opened and those whose key is gone left out."""
    pairs = list(records.items())
    opened = await open_blobs(redis, tenant, [(k, ARCHIVE_SEAL, blob) for k, blob in pairs])
    if not opened:
        return records
    out: dict[str, bytes] = {}
    for n, (key, blob) in enumerate(pairs):
        plain = opened.get(n, blob)
        if plain is not None:
            out[key] = plain
    return out


class MasterKeyMismatchError(RuntimeError):
    """A writer's master key is not the one the deployment's data keys are wrapped with."""


async def check_master_key(redis: Redis, vault: Vault | None) -> None:
    """For a process that writes (a worker, a rebuild), at start: its master key is the
    deployment's. The first writer with a key records the key's public id; a writer with
    another key, or with none where one is recorded, is refused: it would seal memories no
    other process opens, or store sensitive ones in clear."""
    name = master_key_check_key()
    recorded = await redis.get(name)
    if vault is None:
        if recorded:
            raise MasterKeyMismatchError(
                "this deployment encrypts memories at rest, and this process has no "
                "ZEROMEM_MASTER_KEY: set it (zeromem up keeps it in {data_dir}/master.key)"
            )
        return
    mine = vault.provider.key_id()
    if recorded is None:
        await redis.set(name, mine, nx=True)
        recorded = await redis.get(name)
    if (recorded.decode() if isinstance(recorded, bytes) else recorded) != mine:
        raise MasterKeyMismatchError(
            f"ZEROMEM_MASTER_KEY (id {mine}) is not the key this deployment's data keys are "
            f"wrapped with (id {recorded!r})"
        )


def vault_of(settings: Settings, redis: Redis) -> Vault | None:
    """The vault a process seals and opens with, from its settings; None without a master
    key (then nothing is encrypted, and a tenant listed for encryption is an error)."""
    provider = master_key_provider(settings.lifecycle.master_key)
    policy = EncryptionPolicy.parse(settings.lifecycle.encrypt_tenants)
    if provider is None:
        if policy.tenants:
            raise ValueError(
                "ZEROMEM_ENCRYPT_TENANTS is set but ZEROMEM_MASTER_KEY is not: nothing could "
                "be encrypted (zeromem up generates a master key in its data dir)"
            )
        return None
    return Vault(redis, provider, policy)


__all__ = [
    "ALL_TENANTS",
    "EncryptionPolicy",
    "KeyUnavailableError",
    "MasterKeyMismatchError",
    "Vault",
    "attach",
    "attached",
    "check_master_key",
    "master_key_provider",
    "open_archive_records",
    "open_blobs",
    "vault_of",
]
