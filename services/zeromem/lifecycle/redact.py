"""Keeping secrets out of what is derived from a memory, out of the audit trail and out of
every log line.

Two tests find a secret:

* its **name**: a value field, a map key of any type (a bytes or integer key is read as
  text) or a memory's key name that matches the sensitive pattern
  (``ZEROMEM_SENSITIVE_PATTERN``). The pattern is matched against the name as written and
  against its normal form: camelCase split, every run of other characters made ``_``,
  lower case, wrapped in ``_`` (``X-Auth-Token`` -> ``_x_auth_token_``), so the default can
  ask for whole words where a word is short (``_pwd_``, ``_auth_``: not "author").
* its **shape**: text that looks like a credential whatever it is called (bearer and basic
  credentials, ``sk-`` style API keys, AWS access key ids, GitHub, GitLab, Slack, Stripe
  and Google keys, JWTs, PEM private keys, passwords in URLs, card numbers that pass the
  Luhn check, US social security numbers), and ``name=value`` / ``name: value`` /
  ``"name": "value"`` pairs with a sensitive name inside any text.

A memory is sensitive as a whole when it was put with ``sensitive=True`` or its key name
matches; the audit trail then records neither its content nor its value. Anything else is
redacted field by field and string by string (``Redactor.value``, ``Redactor.text``)
before content is derived from a value, before a patch goes into the audit trail, and in
every log record of a service process. Names the pattern misses and shapes it does not
know are not found: ``sensitive=True`` is the sure way.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from zeromem.schemas import REDACTED
from zeromem.settings import DEFAULT_SENSITIVE_PATTERN

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_WORD = re.compile(r"[^A-Za-z0-9]+")

# Credentials recognised by their form alone, each with the lower-case fragments of which
# one must be in the text for the expression to be tried at all: one alternation of all of
# them cost ~95 us on a 130-character sentence (every position tried against every
# alternative), a plain substring test per shape is below a microsecond. Each matches the
# secret part only (a URL keeps its host, "Bearer " its scheme word).
_SHAPES: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (fragments, re.compile(expression))
    for fragments, expression in (
        # PEM private keys, to their END line, or to the end of a cut-off text
        (
            ("-----begin",),
            r"(?s)-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END[A-Z0-9 ]*-----|.*)",
        ),
        (("eyj",), r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),  # JWT
        # HTTP credentials: the scheme word stays; the credential has a digit or a symbol,
        # so "bearer bonds" and "basic training" are prose, not secrets
        (("bearer",), r"(?i)(?<=bearer )\s*(?=\S*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{8,}"),
        (
            ("basic",),
            r"(?<=[Bb][Aa][Ss][Ii][Cc] )\s*(?=\S*[0-9+/=]|[A-Za-z]*[a-z][A-Z]|[A-Z]+[a-z]+[A-Z])"
            r"[A-Za-z0-9+/]{12,}={0,2}",
        ),
        (("sk-",), r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{3,}"),  # OpenAI / Anthropic style
        (
            ("akia", "asia", "agpa", "aida", "aroa", "anpa"),
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b",  # AWS access key ids
        ),
        (
            ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
            r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",  # GitHub
        ),
        (("glpat-",), r"\bglpat-[A-Za-z0-9_-]{20,}"),  # GitLab
        (("xox",), r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),  # Slack
        (("k_live_", "k_test_"), r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{10,}"),  # Stripe
        (("aiza",), r"\bAIza[0-9A-Za-z_-]{30,}"),  # Google API keys
        (("://",), r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),  # user:password@ in a URL
    )
)
# Numbers of 9 to 19 digits (spaces or dashes between): a US social security number
# (ddd-dd-dddd) or a card number (13 to 19 digits that pass the Luhn check) is redacted,
# any other number kept. The first expression only says whether one may be there.
_NUMBER_HINT = re.compile(r"[0-9](?:[ -]?[0-9]){8}")  # nine digits: not a date
_NUMBERS = re.compile(r"(?<![\d.])\d(?:[ -]?\d){8,18}(?![\d.])")
_SSN = re.compile(r"\d{3}-\d{2}-\d{4}")

# name=value, name: value, "name": "value", b'name': value (quoted or bare); the name
# decides. A name
# starts after a non-word character only (tried at every letter, the expression cost
# ~40 us a sentence). A value the shapes already redacted is taken whole, or its closing
# bracket would be left behind.
_PAIRS = re.compile(
    r"""(?<![\w.\-"'])(?P<name>b?["'][A-Za-z_][\w.-]*["']|[A-Za-z_][\w.-]*)(?P<sep>\s*[:=]\s*)"""
    r"""(?P<value>\[redacted\]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;}\]]+)"""
)
# Fragments one of which every name the default pattern calls sensitive contains: a text
# with none of them has no sensitive pair to look for (a deployment's own pattern gets no
# such shortcut).
_DEFAULT_NAME_HINTS = (
    "pass", "pwd", "secret", "credential", "auth", "bearer", "cookie", "key", "token",
    "ssn", "session", "sid", "pin", "otp", "cvv", "cvc", "jwt",
)  # fmt: skip


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _number(match: re.Match[str]) -> str:
    number = match[0]
    if _SSN.fullmatch(number):
        return REDACTED
    digits = number.replace(" ", "").replace("-", "")
    return REDACTED if len(digits) >= 13 and _luhn(digits) else number


def normal_name(name: str) -> str:
    """``X-Auth-Token`` -> ``_x_auth_token_``: the form the sensitive pattern sees."""
    return f"_{_NOT_WORD.sub('_', _CAMEL.sub('_', name)).strip('_').lower()}_"


class Redactor:
    def __init__(self, pattern: str = DEFAULT_SENSITIVE_PATTERN) -> None:
        self.pattern = re.compile(pattern)
        self._name_hints = _DEFAULT_NAME_HINTS if pattern == DEFAULT_SENSITIVE_PATTERN else None
        # Asked for every audited write and every field of a value: the answers are kept.
        self.name_is_sensitive = functools.lru_cache(maxsize=65536)(self._name_is_sensitive)
        self.key_is_sensitive = functools.lru_cache(maxsize=65536)(self._key_is_sensitive)

    def _name_is_sensitive(self, name: str) -> bool:
        search = self.pattern.search
        return search(name) is not None or search(normal_name(name)) is not None

    def _key_is_sensitive(self, key: str) -> bool:
        name = key.split(":", 2)[2] if key.count(":") == 2 else ""
        return bool(name) and self.name_is_sensitive(name)

    def field_is_sensitive(self, name: object) -> bool:
        """A map key of any type: bytes are read as UTF-8, anything else as its text."""
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        elif not isinstance(name, str):
            name = str(name)
        return self.name_is_sensitive(name)

    def value(self, value: Any) -> Any:
        """``value`` with every sensitive field's value and every secret-shaped string
        replaced by ``[redacted]``, at any depth; anything else as it was."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {
                k: REDACTED if self.field_is_sensitive(k) else self.value(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, bytes):
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                return value  # not text: no shape to recognise
            scrubbed = self.text(text)
            return value if scrubbed == text else scrubbed.encode()
        return value

    def text(self, text: str) -> str:
        """``text`` with secret-shaped parts and the values of sensitive pairs redacted."""
        lowered = text.lower()
        for fragments, shape in _SHAPES:
            for fragment in fragments:  # plain loops: any() over a generator cost 8 us
                if fragment in lowered:
                    text = shape.sub(REDACTED, text)
                    break
        if _NUMBER_HINT.search(text):
            text = _NUMBERS.sub(_number, text)
        if ("=" in text or ":" in text) and (
            self._name_hints is None or any(h in lowered for h in self._name_hints)
        ):
            text = _PAIRS.sub(self._pair, text)
        return text

    def _pair(self, match: re.Match[str]) -> str:
        name = match["name"]
        if name[0] == "b" and name[1:2] in ("'", '"'):  # a bytes key as Python prints it
            name = name[1:]
        if self.name_is_sensitive(name.strip("\"'")):
            return f"{match['name']}{match['sep']}{REDACTED}"
        return match[0]


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
