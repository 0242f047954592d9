"""The memory key grammar: ``{namespace}:{owner_id}:{name}``.

The owner (``namespace:owner_id``) is the unit of ordering and sharding: every command for
one owner goes through one shard and is applied in publish order. Namespace and owner id
are also NATS subject tokens (the change feed is addressed by them), so their alphabet
excludes ``.``, ``*``, ``>`` and whitespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAMESPACE_PATTERN = r"[a-z][a-z0-9_]{0,31}"
OWNER_ID_PATTERN = r"[A-Za-z0-9_\-]{1,64}"
NAME_PATTERN = r"[A-Za-z0-9_\-./@]{1,128}"
TENANT_PATTERN = r"[a-z0-9][a-z0-9_\-]{0,63}"
# An agent id is a NATS subject token too (commands travel on ``zm.cmd.{tenant}.{shard}.{agent}``
# and the server pins that token to the authenticated agent), and a value of a credential's
# ``agent:`` tag: the tenant's alphabet, lowercase, no ``.``, ``*``, ``>``, ``:`` or space.
AGENT_PATTERN = TENANT_PATTERN
# Agent ids the services themselves act under (the archiver's commands); never issued.
RESERVED_AGENT_PREFIX = "zeromem-"

# The end of a whole-string pattern. Python's `$` also matches before a final newline
# ("user:h1:k\n" would pass); the lookahead refuses that, and keeps the pattern valid JSON
# Schema (ECMA) for publishers in other languages, where `$` already means the very end.
END = r"$(?!\n)"

# A full key, or an owner with the name left out (the worker then appends under a generated id).
KEY_PATTERN = rf"^{NAMESPACE_PATTERN}:{OWNER_ID_PATTERN}(:{NAME_PATTERN})?{END}"
TENANT_REGEX = re.compile(rf"^{TENANT_PATTERN}{END}")
AGENT_REGEX = re.compile(rf"^{AGENT_PATTERN}{END}")
_KEY_REGEX = re.compile(
    rf"^(?P<ns>{NAMESPACE_PATTERN}):(?P<owner>{OWNER_ID_PATTERN})(?::(?P<name>{NAME_PATTERN}))?{END}"
)

# Namespaces agents are expected to use; the grammar accepts others so a team can add its own.
KNOWN_NAMESPACES = ("user", "task", "session", "agent", "team")


class InvalidKeyError(ValueError):
    def __init__(self, key: str, path: str = "") -> None:
        self.key = key
        super().__init__(
            f"invalid memory key {key!r}: expected '{{namespace}}:{{owner_id}}[:{{name}}]', "
            "e.g. 'user:u10086:pref_lang' or 'task:t42'" + (f" - at `$.{path}`" if path else "")
        )


@dataclass(frozen=True, slots=True)
class MemoryKey:
    namespace: str
    owner_id: str
    name: str | None

    @classmethod
    def parse(cls, key: str) -> MemoryKey:
        match = _KEY_REGEX.match(key)
        if match is None:
            raise InvalidKeyError(key)
        return cls(match["ns"], match["owner"], match["name"])

    @property
    def owner(self) -> str:
        """The ordering and sharding unit, e.g. ``user:u10086``."""
        return f"{self.namespace}:{self.owner_id}"

    def with_name(self, name: str) -> MemoryKey:
        return MemoryKey(self.namespace, self.owner_id, name)

    def __str__(self) -> str:
        base = self.owner
        return base if self.name is None else f"{base}:{self.name}"


def owner_of(key: str) -> str:
    """``user:u1:pref`` -> ``user:u1`` (the key must already be valid)."""
    ns, owner_id, *_ = key.split(":", 2)
    return f"{ns}:{owner_id}"
