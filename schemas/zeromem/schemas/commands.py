"""Memory commands: what agents publish. Version 1 of the wire contract.

Every command is a frozen struct that rejects unknown fields, tagged by ``op`` so one
decoder reads them all. ``expected_version`` is the optimistic lock:
absent = last writer wins, 0 = the memory must not exist yet, N = it must be at version N.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Annotated, Any, Final, Literal, cast

import msgspec

from zeromem.schemas.keys import AGENT_PATTERN, END, KEY_PATTERN, TENANT_PATTERN, InvalidKeyError
from zeromem.schemas.memory import Confidence, Content, FeedbackKind, MemoryType, Tag, Timestamp

WIRE_VERSION: Final = 1

COMMAND_ID_PATTERN = rf"^[A-Za-z0-9_\-]+{END}"
TENANT_FULL_PATTERN = f"^{TENANT_PATTERN}{END}"
AGENT_FULL_PATTERN = f"^{AGENT_PATTERN}{END}"

CommandId = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=COMMAND_ID_PATTERN)]
Tenant = Annotated[str, msgspec.Meta(pattern=TENANT_FULL_PATTERN)]
AgentId = Annotated[str, msgspec.Meta(pattern=AGENT_FULL_PATTERN)]
Key = Annotated[str, msgspec.Meta(pattern=KEY_PATTERN)]
Version = Annotated[int, msgspec.Meta(ge=0)]
TtlSeconds = Annotated[float, msgspec.Meta(gt=0)]

# The command envelope's id, tenant and keys: the same strings and the same JSON Schema as
# above, but their patterns are checked by ``_Command.__post_init__`` rather than by the
# decoder. A worker decodes every command and sees the same tenants and keys again and
# again: a regex per field per command was two thirds of its decoding time, and a value
# seen valid before is now checked by a set look-up.
_EnvelopeId = Annotated[
    str,
    msgspec.Meta(min_length=1, max_length=64, extra_json_schema={"pattern": COMMAND_ID_PATTERN}),
]
_EnvelopeTenant = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": TENANT_FULL_PATTERN})]
_EnvelopeKey = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": KEY_PATTERN})]
_EnvelopeAgent = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": AGENT_FULL_PATTERN})]


def _pattern_check(
    path: str, pattern: str, error: Callable[[str, str], ValueError] | None = None
) -> Callable[[str], str]:
    """A function that returns a value matching ``pattern`` and raises on any other."""
    search = re.compile(pattern).search

    def check(value: str) -> str:
        if search(value) is None:
            if error is not None:
                raise error(value, path)
            # worded as msgspec words its own pattern errors
            raise ValueError(f"Expected `str` matching regex {pattern!r} - at `$.{path}`")
        return value

    return check


# Tenants and keys come again and again: a value found valid is remembered (a failure
# raises, so it is never cached). Ids are unique: nothing worth remembering.
_check_tenant = functools.lru_cache(maxsize=65536)(_pattern_check("tenant", TENANT_FULL_PATTERN))
_check_key = functools.lru_cache(maxsize=65536)(
    _pattern_check("key", KEY_PATTERN, error=InvalidKeyError)  # says what a key looks like
)
_check_agent = functools.lru_cache(maxsize=65536)(_pattern_check("agent", AGENT_FULL_PATTERN))
_check_id = _pattern_check("id", COMMAND_ID_PATTERN)


class _Command(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="op"
):
    id: _EnvelopeId
    tenant: _EnvelopeTenant
    agent: _EnvelopeAgent
    ts: Timestamp
    key: _EnvelopeKey
    expected_version: Version | None = None
    v: Literal[1] = WIRE_VERSION

    def __post_init__(self) -> None:
        # Run on decode (a failure is a ValidationError, as any other) and on construction.
        command_id = self.id
        if not (command_id.isascii() and command_id.isalnum()):  # ULIDs and hex ids pass here
            _check_id(command_id)
        _check_tenant(self.tenant)
        _check_agent(self.agent)
        _check_key(self.key)


class Put(_Command, tag="put", frozen=True):
    """Create or replace a memory."""

    value: Any = None
    content: Content | None = None  # derived from the value when absent
    type: MemoryType = MemoryType.FACT
    tags: tuple[Tag, ...] = ()
    references: tuple[Key, ...] = ()
    source: str | None = None
    confidence: Confidence = 1.0
    ttl_s: TtlSeconds | None = None
    # Sliding expiry: every read through the query service pushes the expiry ``ttl_s``
    # further (as a ``touch`` command in the log, so a rebuild reproduces it).
    refresh_on_read: bool = False
    # Sensitive: the memory's content and value never appear in the audit trail or a log
    # line (the flag stays with the memory through patches).
    sensitive: bool = False
    # The memory's own times (epoch seconds), when it is older than this command: a
    # conversation or a log written into memory after the fact. Absent: the time the
    # command was stored. On an agent's command subject a time may differ from the
    # stored time by the worker's ``max_clock_skew_s`` at most; only the import subject
    # (``naming.import_subject``) carries older ones. ``updated_at`` defaults to
    # ``created_at`` and may not come before it.
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    # Recall indexes a memory by its content, its value's text, its speaker and its tags;
    # its key's name only when asked (a numbered name such as "s03-t017" would otherwise
    # match numbers and dates in questions).
    index_key: bool = False


class Patch(_Command, tag="patch", frozen=True):
    """Change a memory's value with a JSON merge patch (RFC 7396); other fields optional."""

    patch: Any = None
    content: Content | None = None
    tags: tuple[Tag, ...] | None = None
    references: tuple[Key, ...] | None = None


class Delete(_Command, tag="delete", frozen=True):
    """Remove a memory. Its version survives as a tombstone, so a compare-and-set on an
    old version can never succeed against a newer memory of the same key."""


class Expire(_Command, tag="expire", frozen=True):
    """Set a memory's time to live (seconds from now), or clear it with ``ttl_s=None``.
    ``refresh_on_read`` turns sliding expiry on or off (absent: unchanged)."""

    ttl_s: TtlSeconds | None = None
    refresh_on_read: bool | None = None


class Touch(_Command, tag="touch", frozen=True):
    """Push a sliding expiry to ``now + ttl_s`` (the query service sends it when a memory
    with ``refresh_on_read`` is read). No version bump: a read never breaks an agent's
    compare-and-set. A memory without sliding expiry is left as it is."""


class Feedback(_Command, tag="feedback", frozen=True):
    """Count one piece of feedback on a memory; it weighs the memory in recall."""

    kind: FeedbackKind = FeedbackKind.LIKED


class Forget(_Command, tag="forget", frozen=True):
    """Delete, as one command, every memory of the owner in ``key`` (``task:t42``) that
    matches: keys starting with ``prefix`` (a full key prefix such as ``task:t42:step``;
    empty: all), last updated within [``since``, ``until``] (epoch seconds; absent: open).
    Archived memories that match are dropped too. Applied atomically (one commit for the
    whole owner) and in order with the owner's other commands."""

    prefix: str = ""
    since: float | None = None
    until: float | None = None


class Archive(_Command, tag="archive", frozen=True):
    """Move the owner's memories last updated before ``older_than`` (epoch seconds) into
    the archive tier: out of every index (default recall skips them), kept in a compact
    per-owner record that ``include_archived`` recall reads and ``restore`` brings back."""

    older_than: float = 0.0
    prefix: str = ""


class Restore(_Command, tag="restore", frozen=True):
    """Bring an archived memory back (same content, value, tags, feedback and creation
    time; the version continues past the archive's, so no old compare-and-set matches)."""


Command = Put | Patch | Delete | Expire | Feedback | Touch | Forget | Archive | Restore
COMMAND_TYPES: tuple[type[_Command], ...] = (
    Put,
    Patch,
    Delete,
    Expire,
    Feedback,
    Touch,
    Forget,
    Archive,
    Restore,
)
# Commands over a whole owner (``key`` names the owner, never a memory).
OWNER_COMMANDS: tuple[type[_Command], ...] = (Forget, Archive)

# A command's ``op`` on the wire: its msgspec tag (tests/unit/test_schemas_tags.py checks
# this list against the tags).
Op = Literal[
    "put", "patch", "delete", "expire", "feedback", "touch", "forget", "archive", "restore"
]
_OPS: dict[type[_Command], Op] = {cls: cast(Op, cls.__struct_config__.tag) for cls in COMMAND_TYPES}


def op_of(command: Command) -> Op:
    """The command's ``op``, read from its tag (a dict lookup: the write path asks per
    command)."""
    return _OPS[type(command)]
