"""Every limit zeromem enforces, by name, with its default: one frozen section of the
settings (``Settings.limits``), read from ``ZEROMEM_LIMIT_<NAME>`` variables by
``zeromem.settings``.

A limit is checked where its input is admitted (the worker's intake for commands, the read
services' admission for requests) and a refusal names it: a dead letter's reason or an
error reply reads ``limit <name>: ...``, so an agent's developer finds the setting from
the message alone. Three rules are not numbers and have no setting: map keys are strings,
no msgpack extension types, every number finite (refusals name them ``map_keys``,
``ext_types`` and ``non_finite``).

Quotas (per tenant) are limits too; 0 turns a quota off.
"""

from __future__ import annotations

import msgspec

# Agent and reader ids: letters, digits and ``_ - . : @ / + =``. No whitespace or control
# characters (log lines, the CLI's tables), and no ``|``, which the usage ledger uses
# between its fields.
AGENT_CHARSET = r"^[A-Za-z0-9_\-.:@/+=]+$"


class Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # --- commands, checked by the workers at admission --------------------------------
    # Commands one batch message may carry (the SDK sends at most 128). Over it, the
    # message is dead-lettered whole, once: refusing each command would publish as many
    # dead letters.
    batch_commands: int = 1000
    # Bytes of a put's value or a patch's patch, msgpack-encoded.
    value_bytes: int = 64 * 1024
    # Lists and maps nested inside a value or a patch (a recall's strategy is typed).
    nesting_depth: int = 32
    # Characters of a memory's content (the wire contract's own maximum is 200).
    content_chars: int = 200
    # Tags of one memory, and characters of each (the contract's maximum is 64).
    tags: int = 32
    tag_chars: int = 64
    # References of one memory to others.
    references: int = 32
    # Characters of a key, a key prefix or a list cursor (the key grammar allows 226).
    key_chars: int = 226
    # Characters of a command's agent id and of a request's reader (see AGENT_CHARSET).
    agent_chars: int = 128
    # Characters of a put's ``source``.
    source_chars: int = 256

    # --- idempotency records -------------------------------------------------------------
    # Stored command results (what answers a command sent again with the same id) of one
    # tenant on one shard, at most, and the bytes they count for (key and value); past
    # either bound the oldest by stream order are deleted (each also expires after
    # ``Settings.store.result_ttl_s``). A put's record counts 164 bytes and takes 248 in Redis
    # plus its index member, about 300 in all (measured: tests/integration/
    # test_retention.py), so the defaults keep a tenant's latest 100,000 commands per
    # shard, about 30 MB of Redis; the byte bound (16 MiB, as many such records) binds
    # first when results are larger (a rejection's reason). A command older than that is
    # still never applied twice when it is redelivered (the shard's recorded position
    # skips it); one sent again as a new message is (docs/retention.md). 0: no bound.
    idempotency_records: int = 100_000
    idempotency_bytes: int = 16 * 1024 * 1024

    # --- the worker's handling of failures -----------------------------------------------
    # Attempts at a message whose processing fails for a reason other than an outage
    # (Redis or NATS unreachable, which is retried for as long as it lasts): after these
    # it is dead-lettered whole with the error, and the shard goes on.
    message_attempts: int = 3
    # Wait before the second attempt; doubled for each further one.
    attempt_backoff_s: float = 0.1
    # After SIGTERM, how long a worker lets its shards finish what they hold before it
    # exits regardless (a batch in hand is then redelivered to the next owner).
    stop_grace_s: float = 5.0
    # One log line per this many seconds for a failure that repeats (same place, same
    # kind); the lines in between are counted and the count is logged with the next one.
    log_interval_s: float = 10.0

    # --- write fairness ---------------------------------------------------------------------
    # What a shard reads ahead of what it applies (commands, and bytes of messages), so
    # that one tenant's backlog does not keep another tenant's commands out of reach.
    # Another tenant's command waits one round while the backlog ahead of it fits.
    shard_window: int = 65536
    shard_window_bytes: int = 8 * 1024 * 1024
    # One tenant's turn while other tenants have commands waiting (worker/fairness.py):
    # a commit call of at most this many commands, and of this estimated Redis cost
    # (``commit_cost`` units; the deficit round-robin's quantum: ~256 units is ~7 appends,
    # ~1.3 ms of Redis and a few ms of the worker's CPU). Another tenant's command waits at
    # most one such turn of each tenant with work. Alone, a tenant gets whole rounds
    # (``Settings.worker.batch_size``, committed in calls of ``commit_cost``).
    tenant_round_share: int = 64
    tenant_turn_cost: int = 256

    # Estimated Redis cost of one commit script call, in index writes (worker/commit_cost.py:
    # ~5 µs of Redis CPU each, so 4096 is a call of ~20 ms); a round is committed in calls
    # of at most this (at least one command each). Unbounded, a call over 512 appends held
    # Redis ~90 ms, during which no other tenant's command ran. 640 (~3 ms) cost every
    # write the round trips of 12 times as many calls: CPU per append +20-25% (Redis +30%)
    # and per rewrite +20-40% in the workers (bench/write_cost.py, quiet machine), for a
    # write tail the noisy-neighbour scenario still found set elsewhere (README).
    commit_cost: int = 4096

    # --- quotas per tenant (0: off) -------------------------------------------------------
    # Commands per second of one tenant on one shard (each shard has one owner at a time,
    # so this holds across the deployment); over it a command is refused (``rejected``,
    # dead-lettered) without touching Redis.
    tenant_commands_per_s: float = 0.0
    # Bytes of a message refused over ``tenant_commands_per_s`` that its dead letter
    # carries. The command log keeps every message whole (at the dead letter's
    # ``stream_seq``, for as long as it keeps history: ``Settings.bus.stream_max_age_s``),
    # so a copy only costs: a tenant flooding past its quota had each refused byte stored
    # a second time by the broker and written again by the worker, the largest part of a
    # worker's CPU under the noisy-neighbour flood (README). 0: none, the reason and the
    # position only; the dead letter's reason says how much of the message it kept.
    quota_refusal_raw_bytes: int = 0
    # Live memories one tenant may hold, and bytes of them (stored form: value, content,
    # tags and the rest). A put over either is rejected; deletes always pass.
    tenant_memories: int = 10_000_000
    tenant_bytes: int = 8 * 1024**3
    # On a Redis Cluster a tenant's stored totals are kept per shard, and a worker checks
    # its shard's piece exactly and the others' as read at most this long ago (read again
    # when the total reaches the quota): a quota can be passed by what the tenant stored
    # on its other shards within this time. On either layout, a round of puts of new keys
    # checks the totals its worker last read on the shard, at most this long ago and
    # advanced by its own writes since (read again within a round's writes of the quota:
    # worker/presumed.py), so as not to read Redis only for them.
    quota_totals_max_age_s: float = 1.0

    # --- read requests, checked by the read services at admission -----------------------
    # Owners one recall may search (a recall's cost grows with them: measured on this
    # project's machine with 500 memories per owner, p50 3.7 ms for one owner, 29 ms for
    # four, 76 ms for sixteen).
    recall_owners: int = 16
    # Owners one Redis script call of a recall covers (Redis runs a script to its end
    # serving no one else: a recall over 16 owners in one call held it for 76 ms). A recall
    # over more owners is made of several calls with the same result (recall.retrieve).
    recall_owners_per_call: int = 1
    # Calls of one such recall sent to Redis together, each on a connection of its own, so
    # that another client's command waits behind at most these (~0.3 ms each at 500
    # memories per owner). Measured on 16 owners (machine loaded): one call p50 30-45 ms
    # holding Redis 20-48 ms; split, one at a time 56-96 ms, 16 at once 53-58 ms.
    recall_calls_at_once: int = 4
    # ... and while other tenants' requests arrive too (query.gate's sharing): one at a
    # time, so that another tenant's command waits in Redis behind one call of a heavy
    # recall, not four, and the replies come back to the event loop one by one. A recall
    # over many owners takes longer meanwhile (on 16 owners, above: 56-96 ms against
    # 53-58). Measured with the noisy-neighbour scenario's recalls alone
    # (``FLOOD_MODE=recalls``, 8 s phases, three runs alternating 4 and 1, load 5.6-7.1):
    # tenant B's get p99 under the flood 55 / 73 / 59 ms at 4, 43 / 28 / 50 ms at 1; its
    # recall p99 39 / 38 / 25 ms at 4, 29 / 14 / 19 at 1.
    recall_calls_at_once_shared: int = 1
    # Characters of a recall's query, and distinct terms in it.
    query_chars: int = 2000
    query_terms: int = 64
    # Tags and types in a recall's scope.
    scope_filters: int = 32
    # The longest stats range, in seconds (the usage ledger keeps 35 days).
    stats_range_s: float = 35 * 86400.0
    # Read your writes: how long a get, list or recall naming positions in the command log
    # (``after``) waits for their shards to have applied them before it answers with what
    # is applied. The SDK names its own writes' positions; a write that was dead-lettered
    # moves its shard's position only with the shard's next applied command.
    read_after_wait_s: float = 1.0
    # Rows one stats reply may carry (a reply over the broker's payload limit never
    # arrives): a wider request is refused and asked to narrow its range.
    stats_rows: int = 20_000
    # Requests per second of one tenant to one read-service process; over it a request is
    # refused at once (``rate_limited``).
    tenant_requests_per_s: float = 2000.0
    # Requests of one tenant a read service works on at once; the tenant's others wait in
    # its own queue, served in turn with other tenants' ...
    tenant_in_flight: int = 4
    # ... at once while other tenants' requests arrive too (a heavy recall costs Redis
    # tens of milliseconds: see query.gate) ...
    tenant_in_flight_shared: int = 1
    # ... and the share of the service's time one tenant may take meanwhile (seconds of
    # work per second; the time a request took is charged to its tenant). Past it, the
    # tenant's requests wait until it has earned time back (a second at most: the debt is
    # capped at one second's worth, see query.gate).
    tenant_read_share: float = 0.25
    # Requests of one tenant waiting for their turn; more are refused at once
    # (``overloaded``).
    tenant_queued: int = 512
    # Refusals per second of one tenant's requests answered at once by one read-service
    # process (bad_request, rate_limited, overloaded); past it, a refusal's reply waits
    # ``refusal_delay_s`` (it still names the limit). A client looping on refused
    # requests otherwise made the service spin: in the noisy-neighbour scenario four of
    # tenant A's requesters, refused at once for 2,000 owners, sent ~300 requests/s
    # between them, and that busy event loop moved B's recall p99 from x1.7 of its quiet
    # figure to x3.2. At most ``tenant_queued`` of a tenant's replies wait at once (past
    # that, they go at once). 0: off (a deployment serving one fleet may prefer its
    # errors at once; one shared by tenants sets it).
    tenant_refusals_per_s: float = 0.0
    refusal_delay_s: float = 1.0
    # Requests a read-service process works on at once, all tenants together, ...
    reads_in_flight: int = 16
    # ... and requests waiting, all tenants together.
    reads_queued: int = 4096

    # --- telemetry --------------------------------------------------------------------------
    # Distinct agent (reader) values per tenant in metric attributes; later ones are
    # counted under "_other". Distinct tenants likewise.
    metric_agents: int = 100
    metric_tenants: int = 1000

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            if getattr(self, name) < 0:
                raise ValueError(f"limit {name} must not be negative")
        if (
            min(
                self.tenant_in_flight,
                self.tenant_in_flight_shared,
                self.reads_in_flight,
                self.message_attempts,
                self.tenant_round_share,
                self.tenant_turn_cost,
            )
            < 1
        ):
            raise ValueError(
                "tenant_in_flight(_shared), reads_in_flight, message_attempts, "
                "tenant_round_share, tenant_turn_cost: at least 1"
            )


def refusal(limit: str, detail: str) -> str:
    """The reason text of a refusal: ``limit <name>: <detail>``."""
    return f"limit {limit}: {detail}"
