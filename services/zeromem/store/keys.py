"""Every Redis key and hash field name zeromem uses, in one place.

Nothing else writes a key or a field name inline: a change of layout is a change of this
file (Lua scripts take their keys in KEYS and name the fields documented here).
"""

from __future__ import annotations

# --- hash fields -------------------------------------------------------------------------

# A memory's hash (``RedisKeys.item``).
VERSION_FIELD = "v"
DATA_FIELD = "d"  # the msgpack MemoryItem; empty for a tombstone
LAST_COMMAND_FIELD = "lc"
FEEDBACK_FIELDS = {"liked": "fl", "disliked": "fd", "important": "fi"}
DOC_LENGTH_FIELD = "dl"  # indexed terms: BM25's document length
ARCHIVED_FIELD = "ar"  # "1" while the memory sits in the archive tier
CARD_FIELD = "rc"  # the recall card (``store.card``)
CARD_COMMAND_FIELD = "rl"  # the id of the command that wrote the card
TOKEN_FIELD_PREFIX = "tk:"  # tk:{encoding}: the content's cached token count
# What the worker and the exact reads read of a memory, in this order (``store.items``).
ITEM_FIELDS = (
    VERSION_FIELD,
    DATA_FIELD,
    LAST_COMMAND_FIELD,
    *FEEDBACK_FIELDS.values(),
    ARCHIVED_FIELD,
)


def token_field(encoding: str) -> str:
    """The item hash field caching the content's token count in ``encoding``."""
    return TOKEN_FIELD_PREFIX + encoding


# An owner's statistics (``RedisKeys.owner_stats``): memories, indexed terms, tokens.
STAT_MEMORIES = "n"
STAT_LENGTH = "len"
STAT_TOKENS = "tok"


def stat_memories_of_type(type_: str) -> str:
    return f"{STAT_MEMORIES}:{type_}"


def stat_tokens_of_type(type_: str) -> str:
    return f"{STAT_TOKENS}:{type_}"


# A tenant's stored totals (``RedisKeys.stored``).
STORED_MEMORIES = "n"
STORED_BYTES = "b"


USAGE_FIELD_SEPARATOR = "|"


def usage_field(minute: int, agent: str, measure: str) -> str:
    """A field of a usage ledger's day hash (``RedisKeys.usage``): minute|agent|measure."""
    return USAGE_FIELD_SEPARATOR.join((str(minute), agent, measure))


# --- keys --------------------------------------------------------------------------------


class RedisKeys:
    """Builds the Redis keys of one tenant. An owner's indexes (``by_*``, ``owner_stats``,
    ``archive``) carry the owner in a hash tag, so they would share one slot of a cluster;
    a memory's hash, a command's result and the tenant-wide keys do not. Scripts name the
    keys they know before the call in KEYS; the ones they find while running (a memory's
    hash from an index member) are documented at the top of each script."""

    __slots__ = ("tenant",)

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant

    def item(self, key: str) -> str:
        """Hash: v (version), d (msgpack item, empty for a tombstone), lc (last command id),
        fl/fd/fi (feedback counts), tk:{encoding} (cached token count of the content),
        dl (indexed terms, BM25's document length), ar ("1" while the memory sits in the
        archive tier), rc (the recall card: what recall reads of the memory, see
        ``store.card``) and rl (the id of the command that wrote rc: the card is current
        while rl equals lc). The field names are the ``*_FIELD`` constants above."""
        return f"zm:{self.tenant}:m:{key}"

    def command(self, command_id: str) -> str:
        """The stored result of an applied command: makes a redelivery idempotent."""
        return f"zm:{self.tenant}:c:{command_id}"

    def results(self, shard: int) -> str:
        """Sorted set of the tenant's stored command results on ``shard``: member
        "{bytes} {result key}", score the command's stream sequence. The commit script
        keeps the newest (Limits.idempotency_records / _bytes) and deletes the results it
        drops; ``bytes`` is what the record counts for (its key and value)."""
        return f"zm:{self.tenant}:r:{shard}"

    def results_bytes(self, shard: int) -> str:
        """String: the bytes the members of ``results(shard)`` count for, together."""
        return f"zm:{self.tenant}:rb:{shard}"

    def keys(self) -> str:
        """Sorted set of every live key (score 0), listed by prefix with ZRANGEBYLEX."""
        return f"zm:{self.tenant}:keys"

    def expiring(self) -> str:
        """Sorted set key -> expires_at, which the reaper walks."""
        return f"zm:{self.tenant}:exp"

    def by_time(self, owner: str) -> str:
        return f"zm:{self.tenant}:o:{{{owner}}}:t"

    def by_type(self, owner: str, type_: str) -> str:
        return f"zm:{self.tenant}:o:{{{owner}}}:ty:{type_}"

    def by_tag(self, owner: str, tag: str) -> str:
        return f"zm:{self.tenant}:o:{{{owner}}}:tg:{tag}"

    def by_term(self, owner: str, term: str) -> str:
        """Inverted index for recall: key -> term frequency."""
        return f"zm:{self.tenant}:o:{{{owner}}}:w:{term}"

    def usage(self, day: str) -> str:
        """Hash of one UTC day (YYYYMMDD): "{minute}|{agent}|{measure}" -> count, for
        ``zeromem stats`` (recalls and tokens injected, baseline, history)."""
        return f"zm:{self.tenant}:usage:{day}"

    def archive(self, owner: str) -> str:
        """Hash key -> archived memory (msgpack MemoryItem with ``archived_at`` and its
        feedback): the archive tier, one compact record per memory, in no index."""
        return f"zm:{self.tenant}:o:{{{owner}}}:ar"

    def tenant_pattern(self) -> str:
        """Every Redis key of this tenant (what a tenant's rebuild clears first)."""
        return f"zm:{self.tenant}:*"

    def stored(self) -> str:
        """Hash: n (memories stored: item hashes holding a memory, expired ones until the
        reaper takes them), b (bytes of their stored form), kept by the commit script with
        every write; the tenant's quotas are checked against it."""
        return f"zm:{self.tenant}:stored"

    def data_key(self, owner: str) -> str:
        """Hash: k (the owner's data key, wrapped by the master key: ``lifecycle.crypto``).
        Not derived from the command log (a rebuild keeps it, so what it seals again comes
        out byte for byte the same); a forget of the whole owner deletes its field in the
        same commit, which shreds every copy sealed with it."""
        return f"zm:{self.tenant}:o:{{{owner}}}:dk"

    def owner_stats(self, owner: str) -> str:
        """Hash: n (live memories), len (total indexed terms), for BM25's length norm."""
        return f"zm:{self.tenant}:o:{{{owner}}}:st"


REDIS_KEY_PATTERN = "zm:*"  # every key zeromem writes (the services' ACL users are held to it)
REDIS_USAGE_PATTERN = "zm:*:usage:*"  # recall's usage ledgers (RedisKeys.usage)
TENANTS_KEY = "zm:tenants"  # set of tenants seen, for the reaper and the stats
EXPIRING_TENANTS_KEY = "zm:exp-tenants"


def shard_sequence_key() -> str:
    """Hash shard -> last applied command-stream sequence (written atomically with each
    apply, so a restart or a rebuild resumes at the right place)."""
    return "zm:shard-seq"


def master_key_check_key() -> str:
    """String: the public id of the master key this deployment's data keys are wrapped
    with (``lifecycle.vault.check_master_key``): a writer with another key, or none, is
    refused instead of sealing with a stranger's key or storing plaintext."""
    return "zm:master-key"


def snapshot_scratch_key(token: str) -> str:
    """A key outside ``REDIS_KEY_PATTERN`` where an erasure edits one record of a stored
    snapshot (``lifecycle.snapshot_store``: RESTORE, SREM, DUMP, DEL): never derived from
    the log, never seen by a scan of zeromem's keys."""
    return f"zm-snapshot-scratch:{token}"


def shard_lease_key(shard: int) -> str:
    """Fencing token: only the worker holding a shard's lease may apply its commands."""
    return f"zm:lease:{shard}"


def worker_members_key() -> str:
    """Sorted set: the live workers of dynamic membership (``worker.membership``), each
    scored by when its registration expires. Under the leases' prefix: like them it is
    not derived from the command log, so a rebuild and a snapshot leave it alone."""
    return "zm:lease:members"


DATA_KEY_FIELD = "k"  # the wrapped data key in ``RedisKeys.data_key``
ARCHIVE_SEAL = "ar"  # where an archive record is sealed (its place in ``lifecycle.crypto``)

_LEASE_PREFIX = shard_lease_key(0).rsplit(":", 1)[0] + ":"
_USAGE_INFIX = ":usage:"
_DATA_KEY_SUFFIX = RedisKeys("t").data_key("o:o").rsplit("}", 1)[1]


def is_data_key(name: str) -> bool:
    """Whether a key is an owner's data key (``RedisKeys.data_key``)."""
    return name.endswith(_DATA_KEY_SUFFIX)


def derived_from_log(name: str) -> bool:
    """Whether a key holds state the command log determines (what a rebuild clears and
    reconstructs, and a snapshot compares): everything but the leases and recall's usage
    ledgers, the owners' data keys (which the rebuild must keep: it seals with them) and
    the master key's check."""
    return (
        not name.startswith(_LEASE_PREFIX)
        and _USAGE_INFIX not in name
        and not name.endswith(_DATA_KEY_SUFFIX)
        and name != master_key_check_key()
    )


def scope_pattern(tenant: str | None) -> str:
    """Every key of ``tenant``, or of every tenant with None (a SCAN pattern)."""
    return RedisKeys(tenant).tenant_pattern() if tenant else REDIS_KEY_PATTERN


_KEYS: dict[str, RedisKeys] = {}


def redis_keys(tenant: str) -> RedisKeys:
    """One ``RedisKeys`` per tenant instead of one per use (bounded: cleared when large)."""
    keys = _KEYS.get(tenant)
    if keys is None:
        if len(_KEYS) >= 4096:
            _KEYS.clear()
        keys = _KEYS[tenant] = RedisKeys(tenant)
    return keys
