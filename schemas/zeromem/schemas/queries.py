"""Request-reply queries answered by the query and recall services.

Agents read over NATS, never straight from Redis, so they need no database credentials.
A missing memory is an ordinary reply (``found=False``), never an error.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from zeromem.schemas.commands import Key, Tenant
from zeromem.schemas.memory import MemoryItem, MemoryType, Tag
from zeromem.schemas.strategies import RecallStrategy

Limit = Annotated[int, msgspec.Meta(ge=1, le=1000)]
# Read your writes: positions in the command log, each (shard, stream sequence), that a
# read waits for (bounded by the service's ``read_after_wait_s``) until every named shard
# has applied its commands through its position. The SDK sends the positions JetStream
# acknowledged for the client's own writes (``schemas/README.md``).
Position = tuple[Annotated[int, msgspec.Meta(ge=0)], Annotated[int, msgspec.Meta(ge=0)]]
After = Annotated[tuple[Position, ...], msgspec.Meta(max_length=1024)]


class _Query(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    tenant: Tenant
    reader: str = ""  # the agent asking, for the audit trail


class GetRequest(_Query, frozen=True):
    key: Key = ""
    # An agent's read pushes a sliding expiry out; a look that is not a use (the
    # inspector's) passes False and changes nothing.
    slide: bool = True
    after: After = ()


class GetReply(msgspec.Struct, frozen=True, omit_defaults=True):
    found: bool
    item: MemoryItem | None = None


class ListRequest(_Query, frozen=True):
    prefix: str = ""  # a key prefix such as "user:u1:" or "task:t42:step"
    cursor: str = ""  # the last key of the previous page
    limit: Limit = 100
    with_items: bool = True
    slide: bool = True  # as GetRequest.slide
    after: After = ()  # as GetRequest.after


class ListReply(msgspec.Struct, frozen=True, omit_defaults=True):
    keys: tuple[str, ...] = ()
    items: tuple[MemoryItem, ...] = ()
    next_cursor: str = ""  # empty when this was the last page


class RecallScope(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Filters applied before ranking. Owners look like ``user:u1`` or ``task:t42``."""

    owners: tuple[str, ...] = ()
    prefix: str = ""
    types: tuple[MemoryType, ...] = ()
    tags: tuple[Tag, ...] = ()
    since: float | None = None  # updated_at lower bound (epoch seconds)
    until: float | None = None


class RecallRequest(_Query, frozen=True):
    query: str = ""
    scope: RecallScope = RecallScope()
    k: Annotated[int, msgspec.Meta(ge=1, le=100)] = 5
    budget: Annotated[int, msgspec.Meta(ge=1, le=200_000)] = 1500
    encoding: str = "cl100k_base"
    strategy: RecallStrategy | None = None  # None: the default (zeromem.schemas.strategies)
    explain: bool = False
    include_archived: bool = False
    # The tokens of the agent's whole conversation so far, when it reports them: what
    # carrying the history would have cost this turn (counted in the savings metrics).
    history_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0
    after: After = ()  # as GetRequest.after


class RecalledMemory(msgspec.Struct, frozen=True, omit_defaults=True):
    key: str
    content: str
    type: MemoryType
    created_at: float
    updated_at: float
    version: int
    score: float
    tokens: int
    via: str = ""  # set when pulled in as a reference of another memory
    archived: bool = False  # found in the archive tier (recall with include_archived)


class Candidate(msgspec.Struct, frozen=True, omit_defaults=True):
    """One line of the explain view: why a memory was kept or cut."""

    key: str
    score: float
    relevance: float
    decay: float
    feedback: float
    tokens: int
    decision: str  # "kept", "cut: over budget", "cut: below top k", ...


class RecallReply(msgspec.Struct, frozen=True, omit_defaults=True):
    memories: tuple[RecalledMemory, ...] = ()
    context: str = ""
    tokens: int = 0
    baseline_tokens: int = 0  # what injecting every memory that passed the filters would cost
    saved_tokens: int = 0
    baseline_estimated: bool = False  # True when a large filtered set was not read whole
    candidates: tuple[Candidate, ...] = ()


class StatsRequest(_Query, frozen=True):
    """Token usage of a tenant's recalls, per agent and minute, between two times."""

    since: float = 0.0
    until: float = 0.0  # 0: now


class UsageRow(msgspec.Struct, frozen=True, omit_defaults=True):
    minute: float  # epoch seconds at the start of the minute
    agent: str
    recalls: int = 0
    injected: int = 0  # tokens recall returned
    baseline: int = 0  # tokens of every memory that passed the filters
    history: int = 0  # tokens of the agents' whole histories, as they reported them


class StatsReply(msgspec.Struct, frozen=True, omit_defaults=True):
    rows: tuple[UsageRow, ...] = ()


class OwnersRequest(_Query, frozen=True):
    """A page of the tenant's owners (``user:u1``, ``task:t42``) that hold live memories,
    in key order, each with how many it holds: what an inspector browses before keys."""

    prefix: str = ""  # an owner prefix such as "user:" or "task:t4"
    cursor: str = ""  # the last owner of the previous page
    limit: Annotated[int, msgspec.Meta(ge=1, le=200)] = 50


class OwnerSummary(msgspec.Struct, frozen=True, omit_defaults=True):
    owner: str
    memories: int = 0  # live memories
    archived: int = 0  # memories in the archive tier


class OwnersReply(msgspec.Struct, frozen=True, omit_defaults=True):
    owners: tuple[OwnerSummary, ...] = ()
    next_cursor: str = ""  # empty when this was the last page


class ArchivedRequest(_Query, frozen=True):
    """A page of one owner's archive tier (or one archived memory, with ``key``)."""

    owner: Key = ""  # namespace:owner_id
    key: str = ""  # one archived memory of that owner
    cursor: str = ""  # from the previous page's reply
    limit: Annotated[int, msgspec.Meta(ge=1, le=200)] = 50


class ArchivedReply(msgspec.Struct, frozen=True, omit_defaults=True):
    items: tuple[MemoryItem, ...] = ()  # each with ``archived_at``
    next_cursor: str = ""  # empty when this was the last page


class InfoRequest(_Query, frozen=True):
    """What a client needs before its first command: the contract version and the shard
    count (a command published to the wrong shard is dead-lettered, ``wrong_shard``)."""


class InfoReply(msgspec.Struct, frozen=True):
    """Every field always sent (no defaults to leave out)."""

    version: int  # the wire contract's version (a command's ``v``)
    shards: int  # commands go to shard crc32(tenant NUL owner) mod shards
    dedupe_window_s: float  # a Nats-Msg-Id seen within this window is dropped
    batch_commands: int  # commands per Zm-Batch message at most
    value_bytes: int  # a command's encoded value at most
    max_clock_skew_s: float  # a put's created_at/updated_at vs the time it is stored
    max_payload: int  # bytes per NATS message at most (the server's max_payload)


# What a refused request's ``Zm-Error`` header and ``code`` say: the request was malformed
# or over a limit (do not retry as is), the tenant is over its request rate or the service
# has too many waiting (retry after a pause), or the service failed (see its log).
ErrorCode = Literal["bad_request", "rate_limited", "overloaded", "internal"]


class ErrorReply(msgspec.Struct, frozen=True, omit_defaults=True):
    """Sent instead of a reply when a request cannot be served (bad request, overload),
    with the header ``Zm-Error: <code>``."""

    error: str
    code: ErrorCode  # always sent, as in the header


__all__ = [
    "ArchivedReply",
    "ArchivedRequest",
    "Candidate",
    "ErrorCode",
    "ErrorReply",
    "GetReply",
    "GetRequest",
    "InfoReply",
    "InfoRequest",
    "ListReply",
    "ListRequest",
    "OwnerSummary",
    "OwnersReply",
    "OwnersRequest",
    "RecallReply",
    "RecallRequest",
    "RecallScope",
    "RecalledMemory",
    "StatsReply",
    "StatsRequest",
    "UsageRow",
]
