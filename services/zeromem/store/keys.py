"""Every Redis key and hash field name zeromem uses, in one place.

Nothing else writes a key or a field name inline: a change of layout is a change of this
file (Lua scripts take their keys in KEYS and name the fields documented here).
"""

from __future__ import annotations

import contextlib
import re
from binascii import crc_hqx  # Redis Cluster's CRC16 (XMODEM): a key's slot is it mod 16384
from collections.abc import Iterator

from zeromem.naming import DEFAULT_SHARDS, shard_for
from zeromem.schemas import owner_of

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

SLOTS = 16384  # a Redis Cluster's hash slots


class Layout:
    """How keys are named on the Redis a process talks to.

    One Redis (``cluster=False``, the embedded default): the names below, unchanged from
    before Redis Cluster; a tenant's key list, expiring set, stored totals and the sets
    of tenants are one key each.

    A Redis Cluster: every key the commit script touches in one call must hash to one
    slot, and one call covers one shard (of possibly several tenants), so every key that
    belongs to a shard carries the shard's hash tag (``{zs<shard>.<n>}``) right after
    ``zm:<tenant>:`` (or ``zm:`` for keys of no tenant); an owner's keys are in the slot
    of the owner's shard (``naming.shard_for``). The tenant-wide structures become one
    piece per shard (``RedisKeys.keys(shard)``, ``expiring``, ``stored``,
    ``tenants_key``, ...) and a read over a whole tenant visits every piece
    (``pieces``). The shard count is part of the layout: it is fixed at deploy time.

    One layout per process (``use_layout``): keys are built far from any connection (the
    engine's pure rules), and a process serves one deployment."""

    __slots__ = ("_tags", "cluster", "shards")

    def __init__(self, *, cluster: bool = False, shards: int = DEFAULT_SHARDS) -> None:
        self.cluster = cluster
        self.shards = shards
        self._tags: dict[int, str] = {}

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Layout)
            and other.cluster == self.cluster
            and (not self.cluster or other.shards == self.shards)
        )

    def __hash__(self) -> int:
        return hash((self.cluster, self.shards if self.cluster else 0))

    def __repr__(self) -> str:
        return f"Layout(cluster={self.cluster}, shards={self.shards})"

    @property
    def pieces(self) -> range:
        """The shards whose pieces a tenant-wide read visits: every shard on a cluster,
        one (the tenant-wide key itself, whatever shard is named) on one Redis."""
        return range(self.shards) if self.cluster else range(1)

    def shard(self, tenant: str, owner: str) -> int:
        """The shard whose piece holds ``owner``'s keys (0 on one Redis: one piece)."""
        return shard_for(tenant, owner, self.shards) if self.cluster else 0

    def tag(self, shard: int) -> str:
        """``{zs<shard>.<n>}:`` on a cluster (a hash tag: the shard's slot), "" otherwise.

        ``n`` is the first number that puts shard ``s`` of ``S`` within a quarter of its
        width of the middle of the ``s``-th of ``S`` equal ranges of the 16384 slots:
        the shards then spread over masters that split the slots in equal ranges as
        evenly as the count allows (with ``{zs<s>}``, 16 shards fell 6 and 10 on two
        masters). Found by trial, the same in every process: about ``2 S`` CRC16s per
        shard, once per process (on this 2-core machine, loaded: 0.08 s for 128 shards,
        3 s for 1024, growing as the square)."""
        if not self.cluster:
            return ""
        tag = self._tags.get(shard)
        if tag is None:
            middle = (2 * shard + 1) * SLOTS // (2 * self.shards)
            reach = SLOTS // (4 * self.shards)
            n = 0
            while abs(crc_hqx(f"zs{shard}.{n}".encode(), 0) % SLOTS - middle) > reach:
                n += 1
            tag = self._tags[shard] = f"{{zs{shard}.{n}}}:"
        return tag


_LAYOUT = Layout()


def use_layout(layout: Layout) -> None:
    """Name keys in ``layout`` from now on (``bus.connect_redis`` calls it). A process
    that already connected with another layout is refused: its keys would name two
    deployments at once."""
    global _LAYOUT
    if layout == _LAYOUT:
        return
    if _LAYOUT.cluster and layout != _LAYOUT:
        raise LayoutConflictError(_LAYOUT, layout)
    _LAYOUT = layout
    _KEYS.clear()


@contextlib.contextmanager
def layout_scope(layout: Layout) -> Iterator[Layout]:
    """Name keys in ``layout`` inside the block only, whatever the process uses (a tool
    or a test that builds the keys of another deployment without talking to it)."""
    global _LAYOUT
    before = _LAYOUT
    _LAYOUT = layout
    _KEYS.clear()
    try:
        yield layout
    finally:
        _LAYOUT = before
        _KEYS.clear()


def layout() -> Layout:
    """The layout keys are named in (see ``Layout``)."""
    return _LAYOUT


class LayoutConflictError(RuntimeError):
    """One process asked for two key layouts (a cluster and another deployment)."""

    def __init__(self, current: Layout, wanted: Layout) -> None:
        self.current = current
        self.wanted = wanted
        super().__init__(
            f"this process names Redis keys as {current!r} and cannot switch to {wanted!r}: "
            "one process talks to one Redis deployment"
        )


class RedisKeys:
    """Builds the Redis keys of one tenant, in the process's ``Layout``. An owner's
    indexes (``by_*``, ``owner_stats``, ``archive``) carry the owner in a hash tag on one
    Redis; on a cluster every key of the tenant carries its shard's tag first (see
    ``Layout``). Scripts name the keys they know before the call in KEYS; the ones they
    find while running (a memory's hash from an index member) are documented at the top
    of each script."""

    __slots__ = ("_base", "layout", "tenant")

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.layout = _LAYOUT
        self._base = f"zm:{tenant}:"

    def shard_of(self, owner: str) -> int:
        """The piece (shard) ``owner``'s keys are in (always 0 on one Redis)."""
        return self.layout.shard(self.tenant, owner)

    def _of(self, owner: str) -> str:
        if not self.layout.cluster:
            return self._base
        return self._base + self.layout.tag(self.layout.shard(self.tenant, owner))

    def _in(self, shard: int) -> str:
        return self._base + self.layout.tag(shard)

    def item(self, key: str) -> str:
        """Hash: v (version), d (msgpack item, empty for a tombstone), lc (last command id),
        fl/fd/fi (feedback counts), tk:{encoding} (cached token count of the content),
        dl (indexed terms, BM25's document length), ar ("1" while the memory sits in the
        archive tier), rc (the recall card: what recall reads of the memory, see
        ``store.card``) and rl (the id of the command that wrote rc: the card is current
        while rl equals lc). The field names are the ``*_FIELD`` constants above."""
        if not self.layout.cluster:
            return f"zm:{self.tenant}:m:{key}"
        return f"{self._of(owner_of(key))}m:{key}"

    def item_prefix(self, owner: str) -> str:
        """What ``item`` puts before a key of ``owner`` (the scripts that find memories
        in an index build their hashes' names from it)."""
        return f"{self._of(owner)}m:"

    def command(self, command_id: str, shard: int) -> str:
        """The stored result of an applied command on ``shard``: makes a redelivery
        idempotent."""
        return f"{self._in(shard)}c:{command_id}"

    def command_pattern(self) -> str:
        """Every stored command result of the tenant, on every shard (a SCAN pattern)."""
        return f"{self._base}{{*}}:c:*" if self.layout.cluster else f"{self._base}c:*"

    def results(self, shard: int) -> str:
        """Sorted set of the tenant's stored command results on ``shard``: member
        "{bytes} {result key}", score the command's stream sequence. The commit script
        keeps the newest (Limits.idempotency_records / _bytes) and deletes the results it
        drops; ``bytes`` is what the record counts for (its key and value)."""
        return f"{self._in(shard)}r:{shard}"

    def results_bytes(self, shard: int) -> str:
        """String: the bytes the members of ``results(shard)`` count for, together."""
        return f"{self._in(shard)}rb:{shard}"

    def keys(self, shard: int) -> str:
        """Sorted set of every live key (score 0), listed by prefix with ZRANGEBYLEX: the
        tenant's on one Redis, those of ``shard`` on a cluster."""
        return f"{self._in(shard)}keys"

    def expiring(self, shard: int) -> str:
        """Sorted set key -> expires_at, which the reaper walks (per shard on a cluster)."""
        return f"{self._in(shard)}exp"

    def by_time(self, owner: str) -> str:
        return f"{self._of(owner)}o:{{{owner}}}:t"

    def by_time_pattern(self, shard: int) -> str:
        """``by_time`` with ``%OWNER%`` for an owner of ``shard`` (archive_owners.lua)."""
        return f"{self._in(shard)}o:{{%OWNER%}}:t"

    def by_type(self, owner: str, type_: str) -> str:
        return f"{self._of(owner)}o:{{{owner}}}:ty:{type_}"

    def by_tag(self, owner: str, tag: str) -> str:
        return f"{self._of(owner)}o:{{{owner}}}:tg:{tag}"

    def by_term(self, owner: str, term: str) -> str:
        """Inverted index for recall: key -> term frequency and creation time
        (``store.postings``)."""
        return f"{self.term_prefix(owner)}{term}"

    def term_prefix(self, owner: str) -> str:
        """What ``by_term`` puts before the term (the engine builds a memory's posting
        keys from it, one string concatenation per term)."""
        return f"{self._of(owner)}o:{{{owner}}}:w:"

    def usage(self, day: str) -> str:
        """Hash of one UTC day (YYYYMMDD): "{minute}|{agent}|{measure}" -> count, for
        ``zeromem stats`` (recalls and tokens injected, baseline, history). Tenant-wide on
        a cluster too: only recall writes it, one key at a time."""
        return f"zm:{self.tenant}:usage:{day}"

    def archive(self, owner: str) -> str:
        """Hash key -> archived memory (msgpack MemoryItem with ``archived_at`` and its
        feedback): the archive tier, one compact record per memory, in no index."""
        return f"{self._of(owner)}o:{{{owner}}}:ar"

    def tenant_pattern(self) -> str:
        """Every Redis key of this tenant (what a tenant's rebuild clears first)."""
        return f"zm:{self.tenant}:*"

    def applied(self, shard: int) -> str:
        """String: a stream sequence of ``shard`` through which every command message of
        the tenant is applied (read your writes, ``query.consistency``). The shard's own
        position (``shard_sequence_key``) is a low-water mark over every tenant, held back
        by any tenant's backlog while tenants take turns; this one moves with the tenant's
        own messages (``worker.service``). A hint written after the commit, not state the
        log determines: a rebuild neither clears nor compares it."""
        return f"{self._in(shard)}applied:{shard}"

    def stored(self, shard: int) -> str:
        """Hash: n (memories stored: item hashes holding a memory, expired ones until the
        reaper takes them), b (bytes of their stored form), kept by the commit script with
        every write; the tenant's quotas are checked against it. On a cluster, one per
        shard, and the tenant's totals are their sum (``worker.store``)."""
        return f"{self._in(shard)}stored"

    def data_key(self, owner: str) -> str:
        """Hash: k (the owner's data key, wrapped by the master key: ``lifecycle.crypto``).
        Not derived from the command log (a rebuild keeps it, so what it seals again comes
        out byte for byte the same); a forget of the whole owner deletes its field in the
        same commit, which shreds every copy sealed with it."""
        return f"{self._of(owner)}o:{{{owner}}}:dk"

    def owner_stats(self, owner: str) -> str:
        """Hash: n (live memories), len (total indexed terms), for BM25's length norm."""
        return f"{self._of(owner)}o:{{{owner}}}:st"


REDIS_KEY_PATTERN = "zm:*"  # every key zeromem writes (the services' ACL users are held to it)
REDIS_USAGE_PATTERN = "zm:*:usage:*"  # recall's usage ledgers (RedisKeys.usage)


def tenants_key(shard: int) -> str:
    """Set of tenants seen, for the reaper and the stats (on a cluster, those with keys in
    ``shard``: read every piece, ``Layout.pieces``)."""
    return f"zm:{_LAYOUT.tag(shard)}tenants"


def expiring_tenants_key(shard: int) -> str:
    """Set of tenants with memories that expire (per shard on a cluster)."""
    return f"zm:{_LAYOUT.tag(shard)}exp-tenants"


def shard_sequence_key(shard: int) -> str:
    """Hash shard -> last applied command-stream sequence (written atomically with each
    apply, so a restart or a rebuild resumes at the right place). One hash of every shard
    on one Redis; on a cluster each shard's field is in a hash of its own slot."""
    return f"zm:{_LAYOUT.tag(shard)}shard-seq"


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
    """Fencing token: only the worker holding a shard's lease may apply its commands
    (``zm:lease:{zs<shard>.<n>}`` on a cluster: in the slot of the shard's commits)."""
    return f"zm:lease:{_LAYOUT.tag(shard)[:-1]}" if _LAYOUT.cluster else f"zm:lease:{shard}"


def worker_members_key() -> str:
    """Sorted set: the live workers of dynamic membership (``worker.membership``), each
    scored by when its registration expires. Under the leases' prefix: like them it is
    not derived from the command log, so a rebuild and a snapshot leave it alone."""
    return "zm:lease:members"


def tenant_presence_key() -> str:
    """Sorted set: the tenants whose commands the workers saw lately, each scored by when
    (epoch seconds), so that every worker knows when tenants share the deployment
    (``worker.fairness.share_presence``). Under the leases' prefix: not derived from the
    command log."""
    return "zm:lease:presence"


DATA_KEY_FIELD = "k"  # the wrapped data key in ``RedisKeys.data_key``
ARCHIVE_SEAL = "ar"  # where an archive record is sealed (its place in ``lifecycle.crypto``)

_LEASE_PREFIX = "zm:lease:"
_USAGE_INFIX = ":usage:"
_DATA_KEY_SUFFIX = ":dk"  # RedisKeys.data_key
# RedisKeys.applied, on one Redis or a cluster: no memory's hash matches (its name goes on
# with "m:" after the tenant and any tag).
_APPLIED_KEY = re.compile(r"zm:[^:]+:(\{[^}]*\})?applied:\d+\Z")


def is_data_key(name: str) -> bool:
    """Whether a key is an owner's data key (``RedisKeys.data_key``)."""
    return name.endswith(_DATA_KEY_SUFFIX)


def derived_from_log(name: str) -> bool:
    """Whether a key holds state the command log determines (what a rebuild clears and
    reconstructs, and a snapshot compares): everything but the leases and recall's usage
    ledgers, the owners' data keys (which the rebuild must keep: it seals with them), the
    master key's check and the tenants' applied positions (``RedisKeys.applied``)."""
    return (
        not name.startswith(_LEASE_PREFIX)
        and _USAGE_INFIX not in name
        and not name.endswith(_DATA_KEY_SUFFIX)
        and name != master_key_check_key()
        and not is_applied_position(name)
    )


def is_applied_position(name: str) -> bool:
    """Whether a key is a tenant's applied position on a shard (``RedisKeys.applied``):
    bookkeeping that moves with every message of the tenant, dead letters included."""
    return _APPLIED_KEY.match(name) is not None


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
