"""A Jepsen-style workload and checker for zeromem.

The workload: many concurrent agents issue puts, patches, deletes and compare-and-set
increments on a bounded set of keys, each at a chosen ack level (fire-and-forget,
``stored``, ``applied``), and every operation is recorded with what the SDK acknowledged.

The checker does not trust the system's own account. It reads

* the command log itself (every command of the tenant in ZM_COMMANDS, in stream order),
* the final state of every key, both directly from Redis and through the query service,
* each command's idempotency record (its stored result) from Redis,

replays the log through an independent model of the documented semantics (versions,
compare-and-set, tombstones, JSON merge patch), and compares. A write acknowledged at
``stored`` or ``applied`` that is missing from the log or from the final state is *lost*;
a command whose effect shows up more than once (a version beyond the model's, a stored
version that disagrees with the one the agent was told) is *applied twice*. Because the
model replays the log in stream order, per-key versions must come out as 1, 2, 3, ... in
that order, which is the per-owner order the design promises.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import ServiceUnavailableError as JsUnavailableError
from redis.asyncio import Redis

from zeromem import naming
from zeromem.bus import shard_backlogs
from zeromem.ids import new_command_id
from zeromem.schemas import (
    Applied,
    Command,
    Conflict,
    DeadLetter,
    Delete,
    MemoryItem,
    Patch,
    Put,
    Rejected,
    Result,
    decode,
    decode_command,
    decode_result,
    owner_of,
    split_batch,
)
from zeromem.sdk import MemoryClient
from zeromem.sdk.errors import (
    RequestRejectedError,
    ServiceUnavailableError,
    WaitTimeoutError,
)
from zeromem.store.keys import RedisKeys
from zeromem.store.pieces import get_many

_ITEM = msgspec.msgpack.Decoder(MemoryItem)

# Every scenario's summary line, printed again at the end of the run (see conftest.py).
SUMMARY_LINES: list[str] = []


def summarize(line: str) -> None:
    print(line)
    SUMMARY_LINES.append(line)


# What the SDK told the agent, from weakest to strongest.
NOT_ACKED = "not_acked"  # the publish was never confirmed (an outage ate it, or it timed out)
PUBLISHED = "published"  # fire-and-forget: handed to the connection, nothing more
STORED = "stored"  # JetStream acknowledged it (also: waited for applied, got no result in time)
APPLIED = "applied"  # a worker's result arrived: applied, conflict or rejected
ACKED = (STORED, APPLIED)


@dataclass(slots=True)
class Op:
    """One command the workload sent, and what came back."""

    agent: str
    seq: int  # per agent, in send order
    kind: str  # put | patch | delete | cas
    command: Command
    wait: str
    ack: str = NOT_ACKED
    result: Result | None = None  # the worker's answer, when it came back

    @property
    def acknowledged(self) -> bool:
        return self.ack in ACKED


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    cas_conflicts: int = 0
    cas_successes: Counter[str] = field(default_factory=Counter)  # key -> increments seen applied
    retries: int = 0  # sends repeated (same command id) after a timeout or an outage
    read_retries: int = 0
    # MemoryClient.flush() that never returned: fire-and-forget acks lost in an outage are
    # never counted down by the SDK's AckCounter (see the report)
    flush_timeouts: int = 0

    def by_id(self) -> dict[str, Op]:
        return {op.command.id: op for op in self.ops}


@dataclass
class Workload:
    """A bounded key space: ``owners`` owners (``user:o0`` ...), each with ``names`` plain
    keys and one compare-and-set counter (``...:ctr``)."""

    tenant: str
    owners: int = 6
    names: int = 4
    seed: int = 1
    weights: dict[str, int] = field(
        default_factory=lambda: {"put": 35, "patch": 25, "delete": 10, "cas": 30}
    )
    waits: tuple[tuple[str, int], ...] = (("none", 35), ("stored", 30), ("applied", 35))

    def owner(self, i: int) -> str:
        return f"user:o{i}"

    def keys(self) -> list[str]:
        return [f"{self.owner(o)}:k{n}" for o in range(self.owners) for n in range(self.names)]

    def counters(self) -> list[str]:
        return [f"{self.owner(o)}:ctr" for o in range(self.owners)]


async def send_until_acked(
    client: MemoryClient, history: History, op: Op, *, deadline: float
) -> None:
    """Send ``op.command`` and record the strongest ack obtained. A timed-out publish is
    repeated with the *same* command id (JetStream's dedupe and the worker's idempotency
    records make that safe), as an agent that wants its write must do."""
    while True:
        try:
            receipt = await client.send(op.command, op.wait)
        except WaitTimeoutError:
            op.ack = STORED  # JetStream acked it; the result was lost or late
            return
        except ServiceUnavailableError:
            if time.monotonic() > deadline:
                return  # never acknowledged: the checker holds it to nothing
            history.retries += 1
            await asyncio.sleep(0.1)
            continue
        if receipt.status == "published":
            op.ack = PUBLISHED
        elif receipt.status == "stored":
            op.ack = STORED
        else:
            op.ack, op.result = APPLIED, receipt.result
        return


async def read_counter(
    client: MemoryClient, history: History, key: str, deadline: float
) -> MemoryItem | None:
    while True:
        try:
            return await client.get(key)
        except (ServiceUnavailableError, RequestRejectedError):
            if time.monotonic() > deadline:
                raise
            history.read_retries += 1
            await asyncio.sleep(0.1)


async def run_agent(
    client: MemoryClient,
    workload: Workload,
    history: History,
    agent: str,
    *,
    ops: int,
    stop_at: float,
    grace_s: float = 60.0,
) -> None:
    """One agent: ``ops`` operations or until ``stop_at`` (monotonic), whichever first."""
    rng = random.Random(f"{workload.seed}-{agent}")
    kinds = list(workload.weights)
    kind_w = list(workload.weights.values())
    waits = [w for w, _ in workload.waits]
    wait_w = [n for _, n in workload.waits]
    keys = workload.keys()
    counters = workload.counters()
    for i in range(ops):
        if time.monotonic() > stop_at:
            break
        deadline = time.monotonic() + grace_s
        kind = rng.choices(kinds, kind_w)[0]
        envelope: dict[str, Any] = {"tenant": workload.tenant, "agent": agent}
        if kind == "cas":
            await cas_increment(client, history, agent, i, rng.choice(counters), deadline)
            continue
        key = rng.choice(keys)
        command: Command
        if kind == "put":
            command = Put(
                id=new_command_id(),
                ts=time.time(),
                key=key,
                value={"by": agent, "i": i},
                content=f"{agent} put {i}",
                **envelope,
            )
        elif kind == "patch":
            # null removes a field (RFC 7396): the model must get merge patch exactly right
            patch = {agent: i, "last": agent, "gone": None} if i % 3 else {agent: {"n": i}}
            command = Patch(id=new_command_id(), ts=time.time(), key=key, patch=patch, **envelope)
        else:
            command = Delete(id=new_command_id(), ts=time.time(), key=key, **envelope)
        op = Op(agent, i, kind, command, rng.choices(waits, wait_w)[0])
        history.ops.append(op)
        await send_until_acked(client, history, op, deadline=deadline)


async def cas_increment(
    client: MemoryClient,
    history: History,
    agent: str,
    seq: int,
    key: str,
    deadline: float,
    *,
    max_attempts: int = 1000,
    backoff_s: float = 0.002,
) -> bool:
    """Read the counter, write value+1 at the version read; on conflict, read again and
    retry. Returns True once an increment is known applied (False: outcome unknown or
    gave up)."""
    rng = random.Random(f"{agent}-{seq}")
    for attempt in range(max_attempts):
        item = await read_counter(client, history, key, deadline)
        current = 0 if item is None else int(item.value["n"])
        version = 0 if item is None else item.version
        command = Put(
            id=new_command_id(),
            tenant=client.tenant,
            agent=agent,
            ts=time.time(),
            key=key,
            value={"n": current + 1},
            expected_version=version,
        )
        op = Op(agent, seq, "cas", command, "applied")
        history.ops.append(op)
        await send_until_acked(client, history, op, deadline=deadline)
        if isinstance(op.result, Applied):
            history.cas_successes[key] += 1
            return True
        if isinstance(op.result, Conflict):
            history.cas_conflicts += 1
            # Jittered backoff: with dozens of contenders a tight loop only adds conflicts.
            await asyncio.sleep(rng.uniform(0, backoff_s * min(8, attempt + 1)))
            continue
        return False  # unknown (stored, no result) or not acked: the checker settles it
    return False


# --- the checker -------------------------------------------------------------------------


@dataclass(slots=True)
class KeyModel:
    version: int = 0
    live: bool = False
    value: Any = None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396, written here from the RFC rather than imported from the worker."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = merge_patch(out.get(name), value)
    return out


def model_decide(state: KeyModel, command: Command) -> tuple[str, int]:
    """('applied' | 'conflict' | 'rejected', new version) per the README's rules."""
    expected = command.expected_version
    if expected is not None and (state.version if state.live else 0) != expected:
        return "conflict", state.version
    if isinstance(command, Put):
        state.version, state.live, state.value = state.version + 1, True, command.value
    elif isinstance(command, Patch):
        if not state.live:
            return "rejected", state.version
        state.version += 1
        state.value = merge_patch(state.value, command.patch)
    elif isinstance(command, Delete):
        if not state.live:
            return "rejected", state.version
        state.version, state.live, state.value = state.version + 1, False, None
    else:  # the workload sends nothing else
        raise AssertionError(f"unexpected command {type(command).__name__}")
    return "applied", state.version


async def read_log(nc: NatsClient, tenant: str) -> list[tuple[tuple[int, int], Command]]:
    """Every decodable command of ``tenant`` in ZM_COMMANDS, in stream order, each at its
    position: (stream sequence, index in its message; a batch message carries several)."""
    js = nc.jetstream()
    sub = await js.pull_subscribe(
        naming.command_tenant_subject(tenant),
        durable=None,
        stream=naming.COMMAND_STREAM,
        config=ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0
        ),
    )
    out: list[tuple[tuple[int, int], Command]] = []
    try:
        async for msgs in to_the_end(sub):
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                batched = bool(msg.headers) and naming.BATCH_HEADER in msg.headers
                try:
                    parts = split_batch(msg.data) if batched else [msg.data]
                except Exception:  # hostile input: not a batch
                    continue
                for index, part in enumerate(parts):  # a batch's commands, in order
                    with contextlib.suppress(Exception):  # hostile input: not a command
                        out.append(((seq, index), decode_command(part)))
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return out


@dataclass
class Report:
    scenario: str
    attempted: int = 0
    acknowledged: int = 0  # at stored or applied
    applied: int = 0  # commands whose stored result is Applied
    lost: int = 0
    applied_twice: int = 0
    misordered: int = 0
    conflicts: int = 0
    not_acked: int = 0
    published_only: int = 0
    unacked_in_log: int = 0  # fire-and-forget / timed-out sends JetStream kept anyway
    problems: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.extra.items())
        return (
            f"[reliability] {self.scenario}: attempted={self.attempted} "
            f"acknowledged={self.acknowledged} applied={self.applied} lost={self.lost} "
            f"applied_twice={self.applied_twice} misordered={self.misordered} "
            f"conflicts={self.conflicts}{extra}"
        )

    def problem(self, kind: str, text: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.problems) < 40:
            self.problems.append(f"{kind}: {text}")

    @property
    def clean(self) -> bool:
        return self.lost == 0 and self.applied_twice == 0 and self.misordered == 0


SETTLE_S = 20.0  # how long check() waits for a logged command's result to be stored


async def check(
    scenario: str,
    history: History,
    workload: Workload,
    *,
    nc: NatsClient,
    redis: Redis,
    client: MemoryClient | None = None,
) -> Report:
    """Compare the history, the log and the final state. Call once every worker is idle."""
    report = Report(scenario, attempted=len(history.ops), conflicts=history.cas_conflicts)
    tenant = workload.tenant
    rkeys = RedisKeys(tenant)
    ops = history.by_id()
    log = await read_log(nc, tenant)

    # 1. Everything acknowledged is in the log, once per command id (JetStream's dedupe),
    #    and each agent's commands sit in the log in the order the agent sent them.
    in_log: dict[str, tuple[int, int]] = {}
    piece_of: dict[str, int] = {}  # a command's shard: its result's slot on a cluster
    for seq, command in log:
        if command.id in in_log:
            report.problem(
                "applied_twice",
                f"command {command.id} stored twice in the log "
                f"(seq {in_log[command.id]} and {seq})",
            )
            continue
        in_log[command.id] = seq
        piece_of[command.id] = rkeys.shard_of(owner_of(command.key))
    last_seq: dict[tuple[str, str], tuple[int, tuple[int, int]]] = {}
    for op in history.ops:
        report.acknowledged += op.acknowledged
        report.not_acked += op.ack == NOT_ACKED
        report.published_only += op.ack == PUBLISHED
        seq = in_log.get(op.command.id)
        if seq is None:
            if op.acknowledged:
                report.problem(
                    "lost",
                    f"{op.kind} {op.command.id} on {op.command.key} acked "
                    f"at {op.ack} but not in the command log",
                )
            continue
        if not op.acknowledged:
            report.unacked_in_log += 1
        owner_key = (op.agent, op.command.key.rsplit(":", 1)[0])
        prev = last_seq.get(owner_key)
        if prev is not None and seq < prev[1]:
            report.problem(
                "misordered",
                f"{op.agent}'s op {op.seq} on {owner_key[1]} sits at "
                f"seq {seq}, before its op {prev[0]} "
                f"(seq {prev[1]})",
            )
        last_seq[owner_key] = (op.seq, seq)

    # 2. Each logged command's stored result, straight from Redis.
    #    The caller waited for the consumers to report nothing pending, but a consumer's
    #    count can read 0 while its leader moves after a node was killed; the results of
    #    the commands the log holds are the ground truth, so they are waited for (bounded:
    #    one that never comes is reported below as lost).
    stored: dict[str, Result | None] = {}
    missing = list(in_log)
    deadline = time.monotonic() + SETTLE_S
    while missing:
        for start in range(0, len(missing), 2000):
            chunk = missing[start : start + 2000]
            raws = await get_many(redis, [rkeys.command(cid, piece_of[cid]) for cid in chunk])
            for cid, raw in zip(chunk, raws, strict=True):
                stored[cid] = decode_result(raw) if raw else None
        missing = [cid for cid in missing if stored[cid] is None]
        if not missing or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)

    # 3. Replay the log through the model, compare command by command.
    models: dict[str, KeyModel] = defaultdict(KeyModel)
    applied_versions: dict[str, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for _seq, command in log:
        if command.id in seen:
            continue
        seen.add(command.id)
        key = command.key
        outcome, version = model_decide(models[key], command)
        got = stored.get(command.id)
        op = ops.get(command.id)
        ack = op.ack if op else "-"
        what = f"{type(command).__name__.lower()} {command.id} on {key} (ack {ack})"
        if got is None:
            report.problem("lost", f"{what}: no stored result (model: {outcome} v{version})")
            continue
        got_status = {Applied: "applied", Conflict: "conflict", Rejected: "rejected"}[type(got)]
        if isinstance(got, Applied):
            report.applied += 1
            applied_versions[key].append(got.version)
        if got_status != outcome or (outcome == "applied" and got.version != version):  # type: ignore[union-attr]
            gv = getattr(got, "version", getattr(got, "current_version", "-"))
            kind = (
                "applied_twice"
                if outcome == "applied" and got_status == "applied" and gv > version
                else "misordered"
            )
            report.problem(kind, f"{what}: stored {got_status} v{gv}, model {outcome} v{version}")
        if op is not None and op.result is not None and type(op.result) is not type(got):
            report.problem(
                "misordered",
                f"{what}: agent was told {type(op.result).__name__}, store says {got_status}",
            )
        elif isinstance(op and op.result, Applied) and op.result.version != got.version:  # type: ignore[union-attr]
            report.problem(
                "applied_twice",
                f"{what}: agent was told v{op.result.version}, "  # type: ignore[union-attr]
                f"store says v{got.version}",
            )  # type: ignore[union-attr]

    # 4. Versions per key: 1, 2, 3, ... each exactly once (no gap, no repeat).
    for key, versions in applied_versions.items():
        counts = Counter(versions)
        if any(n > 1 for n in counts.values()):
            twice = sorted(v for v, n in counts.items() if n > 1)[:5]
            report.problem("applied_twice", f"{key}: a version handed out twice: {twice}")
        if sorted(counts) != list(range(1, len(counts) + 1)):
            report.problem("lost", f"{key}: applied versions are not 1..{len(counts)}")

    # 5. The final state, from Redis and through the query service, equals the model's.
    for key in sorted(set(workload.keys()) | set(workload.counters()) | set(models)):
        model = models.get(key, KeyModel())
        version_raw, data = await redis.hmget(rkeys.item(key), ["v", "d"])
        version = int(version_raw or 0)
        item = _ITEM.decode(data) if data else None
        if version < model.version:
            report.problem("lost", f"{key}: Redis at v{version}, the log says v{model.version}")
        elif version > model.version:
            report.problem(
                "applied_twice", f"{key}: Redis at v{version}, the log says v{model.version}"
            )
        elif (item is not None) != model.live or (item is not None and item.value != model.value):
            report.problem(
                "misordered",
                f"{key}: Redis holds {item and item.value!r}, the model {model.value!r}",
            )
        if client is not None:
            served = await client.get(key)
            if (served.version if served else 0) != (model.version if model.live else 0):
                served_version = served.version if served else 0
                report.problem(
                    "lost",
                    f"{key}: the query service answers v{served_version}, model v{model.version}",
                )

    # 6. Counters: the value is the number of increments the store applied, which is at
    #    least the number agents saw succeed.
    for key in workload.counters():
        model = models.get(key, KeyModel())
        applied_incs = sum(
            1 for _seq, c in log if c.key == key and isinstance(stored.get(c.id), Applied)
        )
        value = int(model.value["n"]) if model.live else 0
        if value != applied_incs:
            report.problem("lost", f"{key}: counter {value} after {applied_incs} increments")
        if history.cas_successes[key] > applied_incs:
            report.problem(
                "lost",
                f"{key}: agents saw {history.cas_successes[key]} increments "
                f"succeed, the store applied {applied_incs}",
            )
    report.extra["in_log"] = len(in_log)
    return report


async def dead_letters(nc: NatsClient, limit_s: float = 120.0) -> list[DeadLetter]:
    """Every dead letter on the stream, in order."""
    sub = await nc.jetstream().pull_subscribe(
        naming.DEAD_LETTER_SUBJECTS,
        durable=None,
        stream=naming.DEAD_LETTER_STREAM,
        # An ephemeral consumer goes after 5 s without a pull request by default; taking
        # in one fetch of dead letters whole (2,000 of up to 260 KB) took longer than that
        # on a loaded machine, and the consumer was gone when asked how far it was.
        config=ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=60.0
        ),
    )
    letters: list[DeadLetter] = []
    try:
        async for msgs in to_the_end(sub, limit_s):
            letters += [decode(msg.data, DeadLetter) for msg in msgs]
    finally:
        await sub.unsubscribe()
    return letters


async def to_the_end(sub: Any, limit_s: float = 120.0) -> AsyncIterator[list[Msg]]:
    """Batches of a pull subscription's messages until every message its consumer had is
    here. The end is the consumer's count: nothing left to deliver *and* as many delivered
    as received. A fetch that times out is not the end on a busy machine (stopping there
    cut 4,400 of 10,000 dead letters once), nor is a 503 while a cluster elects the
    consumer's leader after a node came back, nor a consumer with nothing left to deliver:
    a fetch returns at its timeout while the rest of its batch is still on the way, and
    without acknowledgements the consumer counts those as delivered (stopping there lost
    929 of 3,000 dead letters of 70 MB on a loaded machine)."""
    deadline = time.monotonic() + limit_s
    received = 0
    while True:
        try:
            msgs = await sub.fetch(2000, timeout=1.0)
        except (TimeoutError, JsUnavailableError):
            msgs = []
        if msgs:
            received += len(msgs)
            yield msgs
        if await _all_received(sub, received):
            return
        if not msgs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {received} messages; the consumer has more")
            await asyncio.sleep(0.1)


async def _all_received(sub: Any, received: int) -> bool:
    try:
        info = await sub.consumer_info()
    except (TimeoutError, JsUnavailableError):
        return False  # the consumer cannot say yet (its leader is being elected): not the end
    return bool(info.num_pending == 0 and info.delivered.consumer_seq <= received)


async def wait_idle(nc: NatsClient, shards: int, limit_s: float = 30.0) -> None:
    """Until every shard consumer has nothing pending or unacknowledged."""
    js = nc.jetstream()
    deadline = time.monotonic() + limit_s
    last: object = None
    while True:
        try:
            backlogs = await shard_backlogs(js, shards)
            if all(backlog == 0 for backlog in backlogs.values()):
                return
            last = {s: b for s, b in backlogs.items() if b != 0}
        except Exception as exc:
            last = exc  # NATS restarting
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the workers did not drain the command stream: backlog per "
                f"shard (None: no consumer yet): {last}"
            )
        await asyncio.sleep(0.1)


async def run_workload(
    clients: list[MemoryClient],
    workload: Workload,
    *,
    agents: int,
    ops_per_agent: int,
    duration_s: float,
    fault: Callable[[], Awaitable[None]] | None = None,
) -> History:
    """``agents`` agents spread over ``clients`` (connections), with ``fault`` running
    alongside; returns once both are done."""
    history = History()
    stop_at = time.monotonic() + duration_s
    tasks = [
        run_agent(
            clients[a % len(clients)],
            workload,
            history,
            f"a{a}",
            ops=ops_per_agent,
            stop_at=stop_at,
        )
        for a in range(agents)
    ]
    if fault is not None:
        tasks.append(fault())
    await asyncio.gather(*tasks)
    flushed = await asyncio.gather(
        *(client.flush(timeout=5) for client in clients), return_exceptions=True
    )  # concurrently: one wait, not four
    history.flush_timeouts = sum(isinstance(f, TimeoutError) for f in flushed)
    return history
