"""The worker's Redis access: read the state of a batch's keys, commit decided outcomes.

Two round trips per batch whatever its size: one pipelined read of every key and command
id the batch touches, one pipeline of commit-script calls (one call per command, each
atomic on its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import msgspec
from redis.asyncio import Redis

from zeromem import naming
from zeromem.schemas import FeedbackCounts, MemoryItem, Result, decode_result, encode
from zeromem.worker.engine import KeyState, Outcome

_ITEM_DECODER = msgspec.msgpack.Decoder(MemoryItem)
_COMMIT_LUA = resources.files("zeromem.worker").joinpath("commit.lua").read_text()

OK, DUPLICATE, STALE, FENCED = "ok", "dup", "stale", "fenced"


def decode_item_hash(fields: Sequence[bytes | None]) -> KeyState:
    """``HMGET item v d lc fl fd fi`` -> KeyState."""
    version, data, last, liked, disliked, important = fields
    feedback = FeedbackCounts(int(liked or 0), int(disliked or 0), int(important or 0))
    item = _ITEM_DECODER.decode(data) if data else None
    return KeyState(int(version or 0), item, (last or b"").decode(), feedback)


ITEM_FIELDS = ("v", "d", "lc", "fl", "fd", "fi")


@dataclass(slots=True)
class CommitReply:
    status: str
    stored_result: Result | None = None


class Store:
    def __init__(self, redis: Redis, *, result_ttl_s: int, tombstone_ttl_s: int) -> None:
        self.redis = redis
        self.result_ttl_s = result_ttl_s
        self.tombstone_ttl_ms = tombstone_ttl_s * 1000
        self._commit = redis.register_script(_COMMIT_LUA)

    async def read(
        self, keys: Sequence[tuple[str, str]], command_ids: Sequence[tuple[str, str]]
    ) -> tuple[list[KeyState], list[Result | None]]:
        """The state of each (tenant, key) and the stored result of each (tenant, command id)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for tenant, key in keys:
                pipe.hmget(naming.RedisKeys(tenant).item(key), ITEM_FIELDS)
            for tenant, command_id in command_ids:
                pipe.get(naming.RedisKeys(tenant).command(command_id))
            replies = await pipe.execute()
        states = [decode_item_hash(r) for r in replies[: len(keys)]]
        done = [decode_result(r) if r else None for r in replies[len(keys) :]]
        return states, done

    async def commit(
        self,
        outcomes: Sequence[Outcome],
        *,
        shard: int,
        sequences: Sequence[int],
        lease_token: str,
    ) -> list[CommitReply]:
        if not outcomes:
            return []
        lease_key = naming.shard_lease_key(shard)
        seq_key = naming.shard_sequence_key()
        async with self.redis.pipeline(transaction=False) as pipe:
            for outcome, sequence in zip(outcomes, sequences, strict=True):
                keys = naming.RedisKeys(outcome.command.tenant)
                slim = outcome.result
                if getattr(slim, "item", None) is not None:
                    slim = msgspec.structs.replace(slim, item=None)  # type: ignore[type-var]
                args: list[object] = [
                    lease_token, shard, sequence, encode(slim), self.result_ttl_s,
                    "1" if outcome.guarded else "0", outcome.base_version, outcome.base_command,
                    outcome.action, outcome.new_version,
                    encode(_stored_form(outcome.item)) if outcome.item is not None else b"",
                    outcome.command.id, self.tombstone_ttl_ms,
                    "1" if outcome.content_changed else "0", outcome.feedback_field,
                ]  # fmt: skip
                for op in outcome.ops:
                    args.extend(op)
                await self._commit(
                    keys=[keys.item(outcome.key), keys.command(outcome.command.id), seq_key,
                          lease_key],
                    args=args,
                    client=pipe,
                )  # fmt: skip
            replies = await pipe.execute()
        out = []
        for reply in replies:
            status = reply[0].decode()
            out.append(CommitReply(status, decode_result(reply[1]) if status == DUPLICATE else None))
        return out


def _stored_form(item: MemoryItem) -> MemoryItem:
    # Feedback counts live in their own hash fields (incremented without a version bump),
    # so the stored blob never carries a copy that could go stale.
    return msgspec.structs.replace(item, feedback=FeedbackCounts())
