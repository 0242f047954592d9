"""Redis / Valkey ACL users, one per service role.

- ``zm-worker``: read and write zeromem's keys (``zm:*``), run scripts, read the server's
  clock (TIME: dynamic membership expires registrations by it, ``store/members.lua``);
  no admin or dangerous command (no FLUSHALL, KEYS, CONFIG, ...).
- ``zm-reader``: read zeromem's keys; write only recall's usage ledger
  (``zm:*:usage:*``). Its token-count cache on a memory is refused and skipped.
- ``zm-admin``: everything (``zeromem rebuild`` clears and rewrites a tenant).
- All but the admin may also ask a Redis Cluster for its map of slots (``CLUSTER SLOTS``,
  ``SHARDS``, ``NODES``, ``INFO``, ``MYID``: what redis-py's cluster client reads on
  connecting and after a failover). The same users are on every node of a cluster
  (``embedded.redis_cluster`` gives each node the same ACL file).
- ``default``: nobody can log in as it (its password is random and never kept), yet it
  holds every permission. Redis and Valkey replay the append-only file as ``default``,
  and re-check its permissions on every EXEC they replay (redis/redis#14541,
  valkey-io/valkey#3983): with ``default off`` each transaction in the file, which
  includes every script's effects, was silently dropped at restart (seen here: the
  worker's commits lost, the shard replayed from the command log).

Passwords come from the environment (``ZEROMEM_REDIS_URL=redis://zm-worker:...@host`` or
``ZEROMEM_REDIS_USERNAME`` / ``ZEROMEM_REDIS_PASSWORD``); the ACL file stores only their
SHA-256.
"""

from __future__ import annotations

import hashlib
import secrets
from urllib.parse import quote, urlparse, urlunparse

from zeromem.store.keys import REDIS_KEY_PATTERN, REDIS_USAGE_PATTERN

USERS = {"worker": "zm-worker", "reader": "zm-reader", "admin": "zm-admin"}
# What a cluster client reads of the cluster's shape (after -@dangerous, which holds them).
_CLUSTER_MAP = (
    " +cluster|slots +cluster|shards +cluster|nodes +cluster|info +cluster|myid +readonly"
)


def acl_rules(role: str) -> str:
    everything = REDIS_KEY_PATTERN
    if role == "admin":
        return "~* &* +@all"
    if role == "worker":
        return (
            f"resetkeys ~{everything} resetchannels -@all +@read +@write +@scripting "
            "+@connection +@transaction +time -@dangerous" + _CLUSTER_MAP
        )
    if role == "reader":
        # %R~: read-only keys; the ledger's keys are read-write.
        return (
            f"resetkeys %R~{everything} ~{REDIS_USAGE_PATTERN} resetchannels "
            "-@all +@read +@scripting +@connection +@transaction +hincrby +expire "
            "-@dangerous" + _CLUSTER_MAP
        )
    raise ValueError(f"unknown Redis role {role!r}")


def acl_file(passwords: dict[str, str]) -> str:
    """An ACL file (``aclfile`` in the server's configuration) for these passwords."""
    # Unusable for a login (a random password whose digest alone is written), but allowed
    # everything, for the server's own replay of its append-only file (module docstring).
    unusable = hashlib.sha256(secrets.token_bytes(32)).hexdigest()
    lines = [f"user default on #{unusable} ~* &* +@all"]
    for role, user in USERS.items():
        digest = hashlib.sha256(passwords[role].encode()).hexdigest()
        lines.append(f"user {user} on #{digest} {acl_rules(role)}")
    return "\n".join(lines) + "\n"


def url_with_user(url: str, role: str, password: str) -> str:
    """``url`` with the role's user name and password in it."""
    parsed = urlparse(url)
    host = parsed.hostname or "127.0.0.1"
    netloc = f"{quote(USERS[role])}:{quote(password, safe='')}@{host}"
    if parsed.port:
        netloc += f":{parsed.port}"
    return urlunparse(parsed._replace(netloc=netloc))
