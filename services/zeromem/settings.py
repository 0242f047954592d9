"""The settings of a zeromem process: one frozen object in sections, built once per entry
point (``Settings.from_env()`` in the CLI command, the SDK's ``connect``, the MCP server)
and passed down. This is the only module that reads the environment; nothing reads it at
import time.

Every field has one environment variable: the section's prefix and the field's name in
capitals (``bus.stream_replicas``: ``ZEROMEM_STREAM_REPLICAS``; ``limits.value_bytes``:
``ZEROMEM_LIMIT_VALUE_BYTES``; ``inspect.port``: ``ZEROMEM_INSPECT_PORT``), a few also the
names other tools use (``NATS_URL``, ``REDIS_URL``, ``OTEL_EXPORTER_OTLP_ENDPOINT``: see
``ALSO_READ`` and ``NAMED``). The values are converted by ``msgspec.convert`` against the
fields' types, so a bad value is one error naming its variable and the type expected.
An empty value leaves a number's or a flag's default (a text field takes it as given).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from zeromem.limits import Limits
from zeromem.naming import DEFAULT_SHARDS

# Key names and value fields that hold secrets unless a deployment says otherwise. Matched
# against the name as written and its normal form (``X-Auth-Token`` -> ``_x_auth_token_``,
# see lifecycle.redact): long words anywhere in a name, short ones as whole words only, so
# ``db_pwd`` and ``authToken`` are secrets and ``author`` and ``max_tokens`` are not.
DEFAULT_SENSITIVE_PATTERN = (
    r"(?i)(password|passwd|passphrase|secret|credential|authoriz|bearer|cookie"
    r"|api_?key|access_?key|private_?key|signing_?key|client_?key|encryption_?key"
    r"|_(?:pwd|pass|auth|oauth|token|ssn|session|sid|pin|otp|cvv|cvc|jwt)_)"
)


class BusSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """NATS: where it is, how this process authenticates, the streams' shape and retention."""

    # Empty: use the running embedded stack (see zeromem.embedded). Several nodes of a
    # cluster are comma-separated (``nats_servers``).
    nats_url: str = ""
    # --- security (docs/security.md) ---
    nats_creds: str = ""  # creds file this process connects with
    nats_token: str = ""  # or a bearer token (a JWT issued with `zeromem auth issue --token`)
    nats_tls_ca: str = ""  # CA bundle for tls:// (or any TLS) NATS URLs
    nats_tls_cert: str = ""  # client certificate, when the server asks for one
    nats_tls_key: str = ""
    nats_tls_hostname: str = ""
    # --- the command stream and its consumers ---
    ack_wait_s: float = 30.0
    dedupe_window_s: float = 120.0  # JetStream duplicate window on command ids
    jetstream_ready_s: float = 30.0  # how long a starting process waits for JetStream
    # Copies of every stream on a JetStream cluster (1 on a single server; 3 on a
    # three-node cluster survive the loss of one node with nothing acknowledged lost).
    stream_replicas: int = 1
    # --- retention of the streams (docs/retention.md) ---
    # The command log (ZM_COMMANDS) is the system of record: ``zeromem rebuild`` restores
    # the latest snapshot and replays the log after it. 0 keeps it forever; a positive age
    # drops commands older than that, and must leave the log at least two snapshot
    # intervals long (``Settings.__post_init__``), so the latest snapshot is always
    # followed by the whole log after it (worker/rebuild.py).
    stream_max_age_s: float = 0.0
    # Its byte cap. Past it the server *refuses new commands* (DiscardPolicy.NEW: the
    # publisher gets "maximum bytes exceeded") instead of dropping the oldest, which would
    # silently break rebuild; 0: no cap. 8 GiB: about 20 million single puts of ~400
    # bytes as stored here, and the four streams' default caps (12 GiB together) fit the
    # smallest JetStream store we ship (k8s base: max_file_store 18GB), which the server
    # checks when a stream is created.
    stream_max_bytes: int = 8 << 30
    # Dead letters (ZM_DEAD_LETTERS): what an operator inspects and replays; a month, and
    # at most 1 GiB (a flood of refused commands, each carrying the command whole, must
    # not fill the disk); the oldest go first.
    dead_letter_max_age_s: float = 30 * 24 * 3600.0
    dead_letter_max_bytes: int = 1 << 30
    audit_max_age_s: float = 90 * 24 * 3600.0  # how long the audit stream keeps records
    # ... and how much of it at most (an entry per applied command: a busy fleet writes
    # far more than 2 GiB in 90 days, and the trail must not fill the disk); the oldest
    # entries go first.
    audit_max_bytes: int = 2 << 30
    change_max_age_s: float = 7 * 24 * 3600.0  # how far back a change feed can resume
    # ... and how much of it is kept at most (events carry the memory: a busy fleet would
    # otherwise fill the disk within the age limit); the oldest events go first.
    change_max_bytes: int = 1 << 30
    # The record of tenant erasures (ZM_ERASURES, one small record per erased tenant):
    # what lets a rebuild tell a log missing an erased tenant's commands from a truncated
    # one. Full, erase-tenant is refused before it purges anything (rather than an old
    # record dropped); 16 MiB holds about 15,000 erased tenants at the room one takes.
    erasures_max_bytes: int = 16 << 20

    @property
    def nats_servers(self) -> list[str]:
        return nats_servers(self.nats_url)


class StoreSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Redis: where it is, who this process is there, and how long records are kept."""

    redis_url: str = ""  # empty: use the running embedded stack
    redis_username: str = ""  # or in the URL: redis://user:password@host:port/0
    redis_password: str = ""
    redis_tls_ca: str = ""  # for rediss:// URLs
    redis_tls_cert: str = ""
    redis_tls_key: str = ""
    # A Redis Cluster (or Valkey cluster) instead of one server: ``redis_url`` names any
    # node (``redis+cluster://`` says so too; ``rediss+cluster://`` with TLS), keys carry
    # their shard's hash tag (``store.keys.Layout``) and the shard count is fixed.
    redis_cluster: bool = False
    result_ttl_s: int = 7 * 24 * 3600  # how long a command's result answers redeliveries
    tombstone_ttl_s: int = 7 * 24 * 3600

    @property
    def cluster(self) -> bool:
        """Whether the Redis named is a cluster (the setting, or the URL's scheme)."""
        return self.redis_cluster or self.redis_url.split("://", 1)[0].endswith("+cluster")

    @property
    def server_url(self) -> str:
        """``redis_url`` as redis-py takes it (``redis+cluster://`` is ``redis://``)."""
        scheme, sep, rest = self.redis_url.partition("://")
        return scheme.removesuffix("+cluster") + sep + rest


class WorkerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the workers take and apply their shards' commands."""

    batch_size: int = 512
    # A shard lease's time to live, and a dynamic worker's registration's: a dead worker's
    # shards move this long after its last renewal.
    lease_ttl_s: float = 10.0
    # Dynamic membership: how often a worker renews its registration and looks at who is
    # alive (a joining worker's shards move to it within about two of these).
    membership_interval_s: float = 1.0
    # The longest an idle shard's pull request waits for a command before it is sent
    # again (a command ends the wait at once): an idle shard costs one request per this.
    idle_pull_s: float = 5.0
    reaper_interval_s: float = 1.0
    # How far a put's own created_at / updated_at may differ from the time its command was
    # stored; older times only through the import subject (``zeromem import``).
    max_clock_skew_s: float = 300.0


class LifecycleSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Redaction, archiving and encryption at rest (the streams' retention is in
    ``BusSettings``)."""

    # A memory whose key name matches, or a value field whose name matches, is redacted in
    # the audit trail and in log lines (as is every memory put with ``sensitive=True``).
    sensitive_pattern: str = DEFAULT_SENSITIVE_PATTERN
    archive_after_days: float = 0.0  # 0: the workers schedule no archiving
    archive_interval_s: float = 3600.0
    # --- encryption at rest (README "Encryption at rest", docs/security.md) ---
    # The master key wrapping every owner's data key: 32 bytes, base64. `zeromem up`
    # generates one in its data dir when unset; empty elsewhere: nothing is encrypted.
    master_key: str = ""
    # Tenants whose every memory is encrypted (comma-separated; "*": all). Memories put
    # with sensitive=True are encrypted in every tenant once a master key is set.
    encrypt_tenants: str = ""


class SnapshotSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Durable snapshots of the state the command log determines (``zeromem snapshot``,
    docs/retention.md): how often, how many are kept, how much space they may take."""

    # How often a snapshot is taken by ``zeromem snapshot --every`` (``zeromem up`` runs
    # one; in Kubernetes the CronJob's schedule says it); 0: none taken periodically. An
    # age on the command log needs it (it must be at least twice this).
    interval_s: float = 6 * 3600.0
    keep: int = 3  # the newest snapshots kept; older ones are deleted after each new one
    # The bucket's byte cap (JetStream object store ZM_SNAPSHOTS): a snapshot that would
    # pass it is refused and the earlier ones stay. 4 GiB: about 15 snapshots of 100,000
    # memories as measured (docs/retention.md), and the streams' caps with it (16 GiB)
    # still fit the smallest JetStream store we ship (18GB).
    max_bytes: int = 4 << 30


class TelemetrySettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Metrics, traces and the health endpoints of this process."""

    metrics_port: int = 0  # Prometheus scrape endpoint of this process; 0: none
    metrics_host: str = "127.0.0.1"  # its address: 0.0.0.0 for a scraper in the cluster
    # /healthz (on the metrics address) fails once the event loop did not turn for this long
    liveness_stall_s: float = 30.0
    # The loop's stack is logged once it has not turned for this long (``stall``): where
    # a blocking call holds every shard and request, and leases expire behind it. 0: off
    loop_stall_log_s: float = 1.0
    # OTLP over HTTP when one of these standard variables is set (the exporter reads the
    # other OTEL_* variables itself).
    otlp_endpoint: str = ""
    otlp_metrics_endpoint: str = ""
    otlp_traces_endpoint: str = ""

    @property
    def otlp_metrics(self) -> bool:
        return bool(self.otlp_endpoint or self.otlp_metrics_endpoint)

    @property
    def otlp_traces(self) -> bool:
        return bool(self.otlp_endpoint or self.otlp_traces_endpoint)


class InspectSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The inspector (``zeromem inspect``): every limit the page enforces is named here."""

    host: str = "127.0.0.1"
    port: int = 8766
    # Bearer tokens (``zeromem auth inspect-token``); empty: inspect-tokens.json of the
    # local authority.
    tokens_file: str = ""
    page_size: int = 50  # owners, memories, tenants per page (the read services cap 200)
    # Audit records read for one memory's version history at most: from the memory's
    # creation on, in its shard's audit subject only (never the tenant's whole trail).
    history_scan_limit: int = 2000
    dead_letters_shown: int = 100  # the latest dead letters listed (operators)
    # Dead letters looked through for one tenant's latest (a filter, not a scan of all).
    dead_letter_window: int = 5000
    max_streams: int = 32  # live streams (server-sent events) open at once, all viewers
    max_connections: int = 64  # viewers' NATS connections kept open (least recent closed)
    stream_ping_s: float = 15.0  # keep-alive comment on an idle live stream
    request_timeout_s: float = 5.0  # a read through NATS, before the page says so


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything a process is configured with: the deployment's shape at the top, each
    concern in its section."""

    shards: int = DEFAULT_SHARDS
    data_dir: Path = msgspec.field(default_factory=lambda: Path(".zeromem"))
    auth_dir: str = ""  # the local issuing authority; empty: {data_dir}/auth
    debug: bool = False  # the CLI prints tracebacks (as with --debug)
    # recall's query expansion (``zeromem.recall.expansion``): off, a read process loads no
    # model (about 1 s and 60 MB less) and ranks by the words typed alone
    recall_expansion: bool = True
    bus: BusSettings = msgspec.field(default_factory=BusSettings)
    store: StoreSettings = msgspec.field(default_factory=StoreSettings)
    worker: WorkerSettings = msgspec.field(default_factory=WorkerSettings)
    lifecycle: LifecycleSettings = msgspec.field(default_factory=LifecycleSettings)
    snapshot: SnapshotSettings = msgspec.field(default_factory=SnapshotSettings)
    telemetry: TelemetrySettings = msgspec.field(default_factory=TelemetrySettings)
    # Every limit and quota (``ZEROMEM_LIMIT_*``): see ``zeromem.limits``.
    limits: Limits = msgspec.field(default_factory=Limits)
    inspect: InspectSettings = msgspec.field(default_factory=InspectSettings)

    # The prefix of each section's variables; the top-level fields take ``ZEROMEM_``.
    PREFIXES: ClassVar[dict[str, str]] = {
        "bus": "ZEROMEM_",
        "store": "ZEROMEM_",
        "worker": "ZEROMEM_",
        "lifecycle": "ZEROMEM_",
        "snapshot": "ZEROMEM_SNAPSHOT_",
        "telemetry": "ZEROMEM_",
        "limits": "ZEROMEM_LIMIT_",
        "inspect": "ZEROMEM_INSPECT_",
    }

    def __post_init__(self) -> None:
        # An age on the command log drops commands whether or not a snapshot covers them:
        # the latest snapshot may be one interval old (plus the time to take it), so the
        # log keeps at least two intervals, or a rebuild would find a gap.
        age = self.bus.stream_max_age_s
        if age and not self.snapshot.interval_s:
            raise ValueError(
                "stream_max_age_s needs snapshot interval_s > 0 (ZEROMEM_STREAM_MAX_AGE_S "
                "drops commands that only a periodic snapshot keeps for a rebuild)"
            )
        if age and age < 2 * self.snapshot.interval_s:
            raise ValueError(
                f"stream_max_age_s {age:g} is shorter than two snapshot intervals "
                f"(2 x ZEROMEM_SNAPSHOT_INTERVAL_S = {2 * self.snapshot.interval_s:g}): "
                "the log would drop commands the latest snapshot does not hold"
            )
        if self.snapshot.keep < 1:
            raise ValueError("snapshot keep must be at least 1 (ZEROMEM_SNAPSHOT_KEEP)")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings the environment (``os.environ`` unless given) describes; a bad
        value raises ``SettingsError`` naming its variable."""
        env = os.environ if environ is None else environ
        given: dict[tuple[str, ...], tuple[str, str]] = {}  # field path -> (variable, raw)
        data: dict[str, Any] = {}
        for variable in variables():
            found = variable.lookup(env)
            if found is None:
                continue
            given[variable.path] = found
            *sections, name = variable.path
            target = data
            for section in sections:
                target = target.setdefault(section, {})
            target[name] = found[1]
        try:
            return msgspec.convert(data, cls, strict=False, dec_hook=_decode_path)
        except msgspec.ValidationError as exc:
            raise SettingsError.of(exc, given) from None

    @property
    def authority_dir(self) -> Path:
        """Where the local issuing authority lives (``zeromem up`` creates it)."""
        return Path(self.auth_dir) if self.auth_dir else self.data_dir / "auth"

    def with_urls(self, nats_url: str, redis_url: str) -> Settings:
        return self.with_(bus={"nats_url": nats_url}, store={"redis_url": redis_url})

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes``: a field's new value, or for a section a dict of its
        fields' (``settings.with_(shards=4, bus={"nats_creds": path})``)."""
        values: dict[str, Any] = {}
        for name, change in changes.items():
            if isinstance(change, dict):
                change = msgspec.structs.replace(getattr(self, name), **change)
            values[name] = change
        return msgspec.structs.replace(self, **values)

    def env(self) -> dict[str, str]:
        """The variables that give another process these settings (those off the
        defaults), each under its field's own name."""
        default = Settings()
        changed = {}
        for variable in variables():
            value = variable.value_in(self)
            if value != variable.value_in(default):
                changed[variable.names[0]] = str(value)
        return changed


class SettingsError(ValueError):
    """A variable whose value does not convert to its field's type, or breaks its rule."""

    def __init__(self, variable: str, value: str, expected: str) -> None:
        self.variable, self.value, self.expected = variable, value, expected
        super().__init__(f"{variable}={value!r}: {expected}")

    @classmethod
    def of(
        cls, exc: msgspec.ValidationError, given: Mapping[tuple[str, ...], tuple[str, str]]
    ) -> SettingsError:
        message, _, where = str(exc).partition(" - at `$")
        path = tuple(part for part in where.rstrip("`").split(".") if part)
        if path in given:
            variable, raw = given[path]
            kind = _KIND_NAMES.get(_field_type(path), "a valid value")
            if message.startswith("Expected"):
                return cls(variable, raw, f"expected {kind}")
            return cls(variable, raw, f"expected {kind}: {message[:1].lower()}{message[1:]}")
        # A section's own rule (Limits.__post_init__): its message names the field.
        for field_path, (variable, raw) in given.items():
            if field_path[:-1] == path and re.search(rf"\b{field_path[-1]}\b", message):
                return cls(variable, raw, message)
        # A rule across sections (Settings.__post_init__): the variables given, and why.
        names = ", ".join(v for v, _ in given.values()) or "settings"
        error = cls(names, "", message)
        error.args = (f"{names}: {message}",)
        return error


@dataclass(frozen=True, slots=True)
class Variable:
    """One field of the settings and the variables it is read from, first found wins."""

    path: tuple[str, ...]  # ("bus", "nats_url"), or ("shards",) for a top-level field
    names: tuple[str, ...]

    def lookup(self, env: Mapping[str, str]) -> tuple[str, str] | None:
        """(variable, value) of the first of ``names`` set; None when none is (an empty
        value counts as unset except for a text field)."""
        text = _field_type(self.path) is str
        for name in self.names:
            raw = env.get(name)
            if raw is not None and (raw != "" or text):
                return name, raw
        return None

    def value_in(self, settings: Settings) -> Any:
        value: Any = settings
        for part in self.path:
            value = getattr(value, part)
        return value


# Variables also read, in this order, when a field's own is unset: names other tools use.
ALSO_READ: dict[str, tuple[str, ...]] = {
    "ZEROMEM_NATS_URL": ("NATS_URL",),
    "ZEROMEM_REDIS_URL": ("REDIS_URL",),
    "ZEROMEM_NATS_CREDS": ("NATS_CREDS", "ZEROMEM_CREDS"),
    "ZEROMEM_NATS_TOKEN": ("ZEROMEM_TOKEN",),
}
# Fields read from a standard variable only, instead of a name of their own.
NAMED: dict[tuple[str, ...], str] = {
    ("telemetry", "otlp_endpoint"): "OTEL_EXPORTER_OTLP_ENDPOINT",
    ("telemetry", "otlp_metrics_endpoint"): "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ("telemetry", "otlp_traces_endpoint"): "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
}


@functools.cache
def variables() -> tuple[Variable, ...]:
    """Every field of the settings with its variables, sections in declaration order."""
    found = []
    for field in msgspec.structs.fields(Settings):
        prefix = Settings.PREFIXES.get(field.name)
        if prefix is None:
            found.append(_variable((field.name,), "ZEROMEM_"))
            continue
        for inner in msgspec.structs.fields(field.type):
            found.append(_variable((field.name, inner.name), prefix))
    return tuple(found)


def _variable(path: tuple[str, ...], prefix: str) -> Variable:
    own = NAMED.get(path) or prefix + path[-1].upper()
    return Variable(path, (own, *ALSO_READ.get(own, ())))


@functools.cache
def _field_type(path: tuple[str, ...]) -> Any:
    owner: Any = Settings
    kind: Any = None
    for part in path:
        kind = {f.name: f.type for f in msgspec.structs.fields(owner)}[part]
        owner = kind
    return kind


_KIND_NAMES: dict[Any, str] = {
    int: "an integer",
    float: "a number",
    bool: "true or false (1 or 0)",
    str: "text",
    Path: "a path",
}


def _decode_path(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError


def child_environment(**variables: str) -> dict[str, str]:
    """This process's environment with ``variables`` set: a child process started with it
    builds its settings from it, so it gets this process's and these changes."""
    return {**os.environ, **variables}


def nats_servers(url: str) -> list[str]:
    """A NATS URL as a server list: ``nats://a:4222,nats://b:4222`` (the form the NATS
    tools take) names every node of a cluster, so a client's first connection survives
    any one of them being down; later nodes are also learnt from the servers."""
    return [part.strip() for part in url.split(",") if part.strip()]
