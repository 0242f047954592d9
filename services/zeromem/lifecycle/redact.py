"""Keeping sensitive values out of the audit trail and out of every log line.

A memory is sensitive when it was put with ``sensitive=True`` (the flag stays with it), or
when its key name matches the sensitive pattern (``ZEROMEM_SENSITIVE_PATTERN``, default:
password, secret, token, api_key, credential, ssn, ...). A value field is sensitive when
its name matches the same pattern. The audit trail records keys (so `zeromem audit --key`
works) but never a sensitive memory's content or value, nor a sensitive field's value;
log lines are scrubbed of ``name=value`` / ``"name": value`` pairs with a sensitive name.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from zeromem.lifecycle.settings import DEFAULT_SENSITIVE_PATTERN
from zeromem.schemas import REDACTED


class Redactor:
    def __init__(self, pattern: str = DEFAULT_SENSITIVE_PATTERN) -> None:
        self.pattern = re.compile(pattern)
        # Asked for every audited write: the answer per key is kept.
        self.key_is_sensitive = functools.lru_cache(maxsize=65536)(self._key_is_sensitive)
        # name=value, name: value, "name": "value" (quoted or bare), for a sensitive name
        self._pairs = re.compile(
            r"""(?P<name>["']?[\w.-]*(?:""" + _inner(pattern) + r""")[\w.-]*["']?)"""
            r"""(?P<sep>\s*[:=]\s*)(?P<value>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;}\]]+)""",
            re.IGNORECASE,
        )

    def _key_is_sensitive(self, key: str) -> bool:
        name = key.split(":", 2)[2] if key.count(":") == 2 else ""
        return bool(name) and self.pattern.search(name) is not None

    def value(self, value: Any) -> Any:
        """``value`` with the value of every field whose name is sensitive redacted."""
        if isinstance(value, dict):
            return {
                k: REDACTED if isinstance(k, str) and self.pattern.search(k) else self.value(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value

    def text(self, text: str) -> str:
        return self._pairs.sub(lambda m: f"{m['name']}{m['sep']}{REDACTED}", text)


def _inner(pattern: str) -> str:
    # The pattern's alternatives without its inline flags, to embed in a larger expression.
    return re.sub(r"^\(\?[a-zA-Z]+\)", "", pattern)


_installed: Redactor | None = None


def install_log_redaction(redactor: Redactor) -> None:
    """Scrub every log record of this process (any logger, any handler) before it is
    formatted: the message is rendered once, redacted, and stored without arguments.
    Idempotent; the latest redactor wins."""
    global _installed
    if _installed is not None:
        _installed = redactor
        return
    _installed = redactor
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        active = _installed
        if active is not None:
            try:
                message = record.getMessage()
            except Exception:  # a broken format is logging's to report, not ours
                return record
            scrubbed = active.text(message)
            if scrubbed != message:  # only then: other records keep their msg and args
                record.msg, record.args = scrubbed, None
        return record

    logging.setLogRecordFactory(factory)
