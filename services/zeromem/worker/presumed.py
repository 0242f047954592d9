"""What a round may decide without reading Redis first: one Redis round trip a round
instead of two for what agents mostly write, new memories.

A round reads the state of every key it touches and its tenants' stored totals, then
commits. For a put of a key this worker has never seen, the read almost always answers
"nothing here", and on this project's 2-core machine a round trip costs Redis a wake-up
(30 to 70 µs of its CPU for one small command, more than the command) and the worker an
await: at 300 appends a second, one a round, dropping the read took Redis reads per append
from 1.95 to 1.16, the workers' CPU per append down by a tenth and publish-to-applied p50
from 9-12 to 6-8 ms (``bench/paced_cost.py``, alternating with the reading tree).

Nothing here can make a write wrong, only slower. A put decided on "absent" is committed
guarded by version 0 and no last command (``store/commit.lua``): if the key does hold
something (a memory, a tombstone, an archived memory), the commit answers ``stale``,
writes nothing for that key, and the applier decides it again on what it reads then. So
the set of keys known to exist only has to be mostly right: it saves the overwrite of a
key this worker wrote recently from a stale round, and a key missing from it (evicted, or
written before this worker started) costs that one command a second commit.

Totals are a tenant's stored memories and bytes, which its quotas are checked against.
The figures last read are used for ``Limits.quota_totals_max_age_s`` (as a cluster's
other shards' pieces already are), advanced by this worker's own decisions, and read
again when a tenant comes within a round's writes of a quota: a quota can be passed by
what the tenant stored through other shards within that time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from zeromem.limits import Limits
from zeromem.schemas import Command, Put

# Keys this worker has seen, at most. About 200 bytes each (the tenant and key strings and
# a dict slot): a 20 MB bound for a worker.
KNOWN_KEYS = 100_000
# Forgotten at a time when the bound is passed, as a share of it: one search for the
# tenant that holds the most per this many keys seen, not one per key.
FORGET_SHARE = 64


def new_if_absent(command: Command) -> bool:
    """A command whose decision on a key that holds nothing needs nothing else read: a put
    with no version to compare against (one expecting version 0 expects exactly that)."""
    return type(command) is Put and not command.expected_version


@dataclass(slots=True)
class _Totals:
    figures: dict[str, list[int]]  # tenant -> [memories, bytes], advanced by decisions
    read_at: float


class Presumptions:
    """Per worker: the keys known to exist, and per shard the tenants' totals last read."""

    def __init__(self, limits: Limits, known_keys: int = KNOWN_KEYS) -> None:
        self.limits = limits
        # tenant -> its keys, first seen first. Kept per tenant so that what is forgotten
        # is the oldest of the tenant that holds the most: a tenant writing new keys
        # without end (what an append flood is) forgets its own, and the keys a quieter
        # tenant overwrites now and then stay known. One set for all, first in first out,
        # let such a flood push every other tenant's keys out within seconds, each of
        # their next overwrites then a stale commit and a second round trip.
        self._known: dict[str, dict[str, None]] = {}
        self._count = 0
        self._known_keys = known_keys
        self._totals: dict[int, _Totals] = {}

    def unknown(self, ident: tuple[str, str]) -> bool:
        """``ident`` (tenant, key) has not been seen by this worker (or was forgotten)."""
        keys = self._known.get(ident[0])
        return keys is None or ident[1] not in keys

    def seen(self, idents: Iterable[tuple[str, str]]) -> None:
        """The keys a round read or wrote: next time they are read first."""
        known = self._known
        for tenant, key in idents:
            keys = known.get(tenant)
            if keys is None:
                keys = known[tenant] = {}
            if key not in keys:
                keys[key] = None
                self._count += 1
        if self._count > self._known_keys:
            self._forget()

    def _forget(self) -> None:
        """Back under the bound, less a share of it: the tenants that hold the most forget
        their oldest keys down to one level, the lowest that frees enough, so that a
        flood loses its own keys and two floods share the cut. A sort per share of the
        bound, however many tenants there are."""
        known = self._known
        excess = self._count - (self._known_keys - max(1, self._known_keys // FORGET_SHARE))
        order = sorted(known, key=lambda tenant: len(known[tenant]), reverse=True)
        held = 0
        for n, tenant in enumerate(order, 1):
            held += len(known[tenant])
            below = len(known[order[n]]) if n < len(order) else 0
            if held - n * below >= excess:  # cutting the first n to ``below`` frees enough
                break
        # The first n keep ``held - excess`` between them, as evenly as whole keys go: the
        # first ``spare`` of them one more than the rest (each still holds at least that:
        # the loop stopped at the first n that frees enough). Rounding the level down for
        # all instead cut up to n keys too many: with many tenants of one key each, all.
        level, spare = divmod(held - excess, n)
        for place, tenant in enumerate(order[:n]):
            keys = known[tenant]
            cut = len(keys) - level - (place < spare)
            for key in list(islice(keys, cut)):
                del keys[key]
            self._count -= cut
            if not keys:
                del known[tenant]

    def totals(self, shard: int, tenants: list[str], writes: int) -> dict[str, list[int]] | None:
        """The tenants' totals as last read on ``shard`` and advanced since, if fresh enough
        and, for each, more than ``writes`` memories (of the largest size) under its
        quotas; else None (read them). The lists are the cache's own: the round's quota
        checks advance them."""
        cached = self._totals.get(shard)
        limits = self.limits
        if cached is None or time.monotonic() - cached.read_at > limits.quota_totals_max_age_s:
            return None
        figures = cached.figures
        out: dict[str, list[int]] = {}
        for tenant in tenants:
            stored = figures.get(tenant)
            if stored is None:
                return None
            memories, stored_bytes = stored
            grow = writes * limits.value_bytes
            if limits.tenant_memories and memories + writes >= limits.tenant_memories:
                return None
            if limits.tenant_bytes and stored_bytes + grow >= limits.tenant_bytes:
                return None
            out[tenant] = stored
        return out

    def read_totals(self, shard: int, totals: dict[str, list[int]]) -> None:
        """Totals just read on ``shard`` (the round then advances these very lists)."""
        cached = self._totals.get(shard)
        now = time.monotonic()
        if cached is None or now - cached.read_at > self.limits.quota_totals_max_age_s:
            self._totals[shard] = _Totals(dict(totals), now)
        else:
            # Fresher figures for these tenants; the others keep their age (the oldest
            # figure sets when the shard's cache is next read in full).
            cached.figures.update(totals)

    def forget(self, shard: int) -> None:
        """A new tenure, a failed commit or a stale one: read the totals again."""
        self._totals.pop(shard, None)
