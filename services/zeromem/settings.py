"""Settings, built explicitly (``Settings.from_env()``), never read at import time."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from zeromem.limits import Limits
from zeromem.naming import DEFAULT_SHARDS

ENV_PREFIX = "ZEROMEM_"
# Conventional variables read when the ZEROMEM_ one is unset, in this order.
_CONVENTIONAL = {
    "nats_url": ("NATS_URL",),
    "redis_url": ("REDIS_URL",),
    "nats_creds": ("NATS_CREDS", "ZEROMEM_CREDS"),
    "nats_token": ("ZEROMEM_TOKEN",),
}


@dataclass(frozen=True, slots=True)
class Settings:
    nats_url: str = ""  # empty: use the running embedded stack (see zeromem.embedded)
    redis_url: str = ""
    shards: int = DEFAULT_SHARDS
    data_dir: Path = field(default_factory=lambda: Path(".zeromem"))
    batch_size: int = 512
    ack_wait_s: float = 30.0
    dedupe_window_s: float = 120.0  # JetStream duplicate window on command ids
    result_ttl_s: int = 7 * 24 * 3600  # how long a command's result answers redeliveries
    tombstone_ttl_s: int = 7 * 24 * 3600
    lease_ttl_s: float = 10.0
    reaper_interval_s: float = 1.0
    # --- retention of the streams (docs/retention.md) ---
    # The command log (ZM_COMMANDS) is the system of record: ``zeromem rebuild`` replays
    # it from its first command. 0 keeps it forever; a positive age drops commands older
    # than that, after which a rebuild refuses to run (it would lose them, see
    # worker/rebuild.py).
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
    # Copies of every stream on a JetStream cluster (1 on a single server; 3 on a
    # three-node cluster survive the loss of one node with nothing acknowledged lost).
    stream_replicas: int = 1
    jetstream_ready_s: float = 30.0  # how long a starting process waits for JetStream
    metrics_port: int = 0  # Prometheus scrape endpoint of this process; 0: none
    metrics_host: str = "127.0.0.1"  # its address: 0.0.0.0 for a scraper in the cluster
    # /healthz (on the metrics address) fails once the event loop did not turn for this long
    liveness_stall_s: float = 30.0
    # --- security (docs/security.md) ---
    nats_creds: str = ""  # creds file this process connects with
    nats_token: str = ""  # or a bearer token (a JWT issued with `zeromem auth issue --token`)
    auth_dir: str = ""  # the local issuing authority; empty: {data_dir}/auth
    nats_tls_ca: str = ""  # CA bundle for tls:// (or any TLS) NATS URLs
    nats_tls_cert: str = ""  # client certificate, when the server asks for one
    nats_tls_key: str = ""
    nats_tls_hostname: str = ""
    redis_username: str = ""  # or in the URL: redis://user:password@host:port/0
    redis_password: str = ""
    redis_tls_ca: str = ""  # for rediss:// URLs
    redis_tls_cert: str = ""
    redis_tls_key: str = ""
    # --- encryption at rest (README "Encryption at rest", docs/security.md) ---
    # The master key wrapping every owner's data key: 32 bytes, base64. `zeromem up`
    # generates one in its data dir when unset; empty elsewhere: nothing is encrypted.
    master_key: str = ""
    # Tenants whose every memory is encrypted (comma-separated; "*": all). Memories put
    # with sensitive=True are encrypted in every tenant once a master key is set.
    encrypt_tenants: str = ""
    # Every limit and quota (``ZEROMEM_LIMIT_*``), in one section: see ``zeromem.limits``.
    limits: Limits = field(default_factory=Limits)
    # How far a put's own created_at / updated_at may differ from the time its command was
    # stored; older times only through the import subject (``zeromem import``).
    max_clock_skew_s: float = 300.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Read ``ZEROMEM_*`` variables (and the conventional NATS_URL / REDIS_URL)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        values["limits"] = Limits.from_env(env)
        for f in fields(cls):
            if f.name == "limits":
                continue
            raw = env.get(ENV_PREFIX + f.name.upper())
            for conventional in _CONVENTIONAL.get(f.name, ()):
                if raw is None:
                    raw = env.get(conventional)
            if raw is None:
                continue
            default = getattr(cls(), f.name)
            values[f.name] = type(default)(raw) if not isinstance(default, Path) else Path(raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def nats_servers(self) -> list[str]:
        return nats_servers(self.nats_url)

    def with_urls(self, nats_url: str, redis_url: str) -> Settings:
        return replace(self, nats_url=nats_url, redis_url=redis_url)

    @property
    def authority_dir(self) -> Path:
        """Where the local issuing authority lives (``zeromem up`` creates it)."""
        return Path(self.auth_dir) if self.auth_dir else self.data_dir / "auth"


def nats_servers(url: str) -> list[str]:
    """A NATS URL as a server list: ``nats://a:4222,nats://b:4222`` (the form the NATS
    tools take) names every node of a cluster, so a client's first connection survives
    any one of them being down; later nodes are also learnt from the servers."""
    return [part.strip() for part in url.split(",") if part.strip()]
