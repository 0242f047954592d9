"""Bearer tokens for the MCP server over HTTP, each mapped to one tenant and agent.

``zeromem auth mcp-token TENANT AGENT`` issues the agent a NATS credential, makes a random
token and records ``sha256(token) -> {tenant, agent, creds}`` (never the token itself) in
a JSON file. ``zeromem mcp --transport http`` refuses to start without such a file, and
answers 401 to a request without a known token; a known one acts as its agent, with that
agent's credential, so the NATS server still decides what it may do.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class TokenIdentity:
    tenant: str
    agent: str
    creds: str  # the agent's creds file


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class McpTokens:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _load(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())  # type: ignore[no-any-return]
        except FileNotFoundError:
            return {}

    def add(self, tenant: str, agent: str, creds: Path) -> str:
        """A new token for ``agent`` of ``tenant`` (returned once, stored hashed)."""
        token = secrets.token_urlsafe(32)
        entries = self._load()
        entries[_digest(token)] = {"tenant": tenant, "agent": agent, "creds": str(creds)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, indent=1)
        os.replace(tmp, self.path)
        return token

    def lookup(self, token: str) -> TokenIdentity | None:
        entry = self._load().get(_digest(token)) if token else None
        return TokenIdentity(**entry) if entry else None

    def __len__(self) -> int:
        return len(self._load())
