"""The inspector's settings, from ``ZEROMEM_INSPECT_*`` variables like the rest
(``Settings.from_env``): every limit the page enforces is named here."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

ENV_PREFIX = "ZEROMEM_INSPECT_"


@dataclass(frozen=True, slots=True)
class InspectSettings:
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

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> InspectSettings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = type(getattr(cls(), f.name))(raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
