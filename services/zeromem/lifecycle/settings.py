"""Lifecycle settings, from the environment like ``zeromem.settings.Settings``
(``ZEROMEM_SENSITIVE_PATTERN``, ``ZEROMEM_ARCHIVE_AFTER_DAYS``, ...)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

# Key names and value fields that hold secrets unless a deployment says otherwise. Matched
# against the name as written and its normal form (``X-Auth-Token`` -> ``_x_auth_token_``,
# see lifecycle.redact): long words anywhere in a name, short ones as whole words only, so
# ``db_pwd`` and ``authToken`` are secrets and ``author`` and ``max_tokens`` are not.
DEFAULT_SENSITIVE_PATTERN = (
    r"(?i)(password|passwd|passphrase|secret|credential|authoriz|bearer|cookie"
    r"|api_?key|access_?key|private_?key|signing_?key|client_?key|encryption_?key"
    r"|_(?:pwd|pass|auth|oauth|token|ssn|session|sid|pin|otp|cvv|cvc|jwt)_)"
)


@dataclass(frozen=True, slots=True)
class LifecycleSettings:
    # A memory whose key name matches, or a value field whose name matches, is redacted in
    # the audit trail and in log lines (as is every memory put with ``sensitive=True``).
    sensitive_pattern: str = DEFAULT_SENSITIVE_PATTERN
    archive_after_days: float = 0.0  # 0: the workers schedule no archiving
    archive_interval_s: float = 3600.0
    audit_max_age_s: float = 90 * 24 * 3600.0  # how long the audit stream keeps records
    # ... and how much of it at most (an entry per applied command: a busy fleet writes
    # far more than 2 GiB in 90 days, and the trail must not fill the disk); the oldest
    # entries go first.
    audit_max_bytes: int = 2 << 30
    change_max_age_s: float = 7 * 24 * 3600.0  # how far back a change feed can resume
    # ... and how much of it is kept at most (events carry the memory: a busy fleet would
    # otherwise fill the disk within the age limit); the oldest events go first.
    change_max_bytes: int = 1 << 30

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> LifecycleSettings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get("ZEROMEM_" + f.name.upper())
            if raw is not None:
                values[f.name] = type(getattr(cls(), f.name))(raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
