"""Recall over the archive tier (``include_archived``).

Archived memories are in no index: that is what makes the tier cheap. A recall that asks
for them reads each owner's archive record (one hash per owner), analyses the contents
the way the workers analyse live memories, and adds those that pass the filters to the
candidates. Cold by design; bounded per owner so an enormous archive cannot stall a read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
from redis.asyncio import Redis

from zeromem.lifecycle.vault import open_archive_records
from zeromem.recall.ranking import CandidateFeatures
from zeromem.schemas import MemoryItem, MemoryKey
from zeromem.store.keys import RedisKeys
from zeromem.store.text import doc_length, memory_terms
from zeromem.store.tokens import count_tokens

ARCHIVE_SCAN_LIMIT = 5000  # archived memories read per owner at most, per recall

_DECODER = msgspec.msgpack.Decoder(MemoryItem)


async def archived_candidates(
    redis: Redis,
    tenant: str,
    owners: Sequence[str],
    query_terms: Sequence[str],
    admits: Callable[[MemoryItem], bool],  # Filters.admits
    encoding: str,
) -> tuple[list[CandidateFeatures], dict[str, MemoryItem]]:
    keys = RedisKeys(tenant)
    features: list[CandidateFeatures] = []
    items: dict[str, MemoryItem] = {}
    wanted = set(query_terms)
    for owner in owners:
        records: dict[bytes, bytes] = {}
        async for field, value in redis.hscan_iter(keys.archive(owner), count=500):
            records[field] = value
            if len(records) >= ARCHIVE_SCAN_LIMIT:
                break
        # memories encrypted at rest are opened (lifecycle.vault)
        opened = await open_archive_records(
            redis, tenant, {k.decode(): v for k, v in records.items()}
        )
        for value in opened.values():
            item = _DECODER.decode(value)
            if not admits(item):
                continue
            tf = memory_terms(
                item.content, MemoryKey.parse(item.key).name, item.tags, item.value, item.index_key
            )
            matched = {t: f for t, f in tf.items() if t in wanted}
            if wanted and not matched:
                continue
            fb = item.feedback
            features.append(
                CandidateFeatures(
                    item.key,
                    item.updated_at,
                    doc_length(tf),
                    matched,
                    fb.liked,
                    fb.disliked,
                    fb.important,
                    item.type.value,
                    item.tags,
                    count_tokens(item.content, encoding),
                )
            )
            items[item.key] = item
    return features, items
