"""The Kubernetes Secrets the manifests in k8s/ name, from `zeromem auth export` output.

    zeromem auth export zm-export
    zeromem auth mcp-token TENANT AGENT        # once per MCP client (prints its token)
    python k8s/secrets.py zm-export --mcp-tokens .zeromem/auth/mcp-tokens.json \\
        | kubectl apply -f -

Prints one JSON document (a v1 List, which kubectl applies like YAML) holding:

- ``zeromem-nats-auth``: ``nats-server.conf``, the operator, system account and resolver
  part of the NATS servers' configuration (included by k8s/base/nats/nats.conf);
- ``zeromem-nats-creds``: ``worker.creds`` and ``reader.creds``, the services' NATS
  identities (``admin.creds`` and ``system.creds`` stay with the operator: they are for
  `zeromem rebuild` and `zeromem auth revoke`, run from outside);
- ``zeromem-redis-acl``: ``users.acl``, the Redis users with their passwords' SHA-256;
- ``zeromem-redis-passwords``: ``ZEROMEM_REDIS_PASSWORD_{ADMIN,WORKER,READER}``;
- ``zeromem-mcp``: the MCP server's token file, with each token's agent credential beside
  it (the file's creds paths are rewritten to where the pod mounts them);
- ``zeromem-encryption``: ``ZEROMEM_MASTER_KEY`` (wraps the owners' data keys) and
  ``JETSTREAM_KEY`` (JetStream's store cipher), from ``--encryption-keys`` (default
  ``.zeromem/encryption.env``), which is generated owner-only on the first run and reused
  after: a new key on a re-run would make the stored data unreadable.

Nothing is written to disk; keep the export directory as secret as the authority.
Standard library only, so that it runs wherever `zeromem` is installed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

NAMESPACE = "zeromem"
MCP_MOUNT = "/etc/zeromem/mcp"  # where k8s/base/mcp.yaml mounts zeromem-mcp
SERVICE_CREDS = ("worker.creds", "reader.creds")
REDIS_ROLES = ("admin", "worker", "reader")
ENCRYPTION_KEYS = ("ZEROMEM_MASTER_KEY", "JETSTREAM_KEY")


class ExportError(Exception):
    """The export directory or the token file is not what `zeromem auth` writes."""


def secret(name: str, namespace: str, files: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "zeromem"},
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value).decode() for key, value in sorted(files.items())},
    }


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise ExportError(f"{path} is missing: run `zeromem auth export {path.parent}`") from exc


def redis_passwords(path: Path) -> dict[str, bytes]:
    """The ``NAME=value`` lines of redis-passwords.env, every role present."""
    values: dict[str, bytes] = {}
    for line in _read(path).decode().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, value = line.partition("=")
            if not sep:
                raise ExportError(f"{path}: a line without '=': {line[:40]!r}")
            values[name.strip()] = value.strip().encode()
    wanted = [f"ZEROMEM_REDIS_PASSWORD_{role.upper()}" for role in REDIS_ROLES]
    missing = [name for name in wanted if not values.get(name)]
    if missing:
        raise ExportError(f"{path} lacks {', '.join(missing)}")
    return {name: values[name] for name in wanted}


def encryption_keys(path: Path) -> dict[str, bytes]:
    """The master key and JetStream's store key from ``path`` (NAME=value lines), made
    there first (32 random bytes each, base64; the file owner-only) when it is missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            "# zeromem's encryption keys: back them up; losing them loses the data.",
            *(f"{name}={base64.b64encode(os.urandom(32)).decode()}" for name in ENCRYPTION_KEYS),
        ]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(lines) + "\n")
        print(f"generated {path}: keep it with the authority", file=sys.stderr)
    values = {}
    for line in _read(path).decode().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            values[name.strip()] = value.strip().encode()
    missing = [name for name in ENCRYPTION_KEYS if not values.get(name)]
    if missing:
        raise ExportError(f"{path} lacks {', '.join(missing)}")
    return {name: values[name] for name in ENCRYPTION_KEYS}


def mcp_files(tokens_path: Path) -> dict[str, bytes]:
    """The token file with each entry's creds path pointing into the pod's mount, and the
    creds files themselves (one key per tenant and agent)."""
    try:
        entries = json.loads(tokens_path.read_text())
    except FileNotFoundError as exc:
        raise ExportError(
            f"{tokens_path} is missing: issue a token first (`zeromem auth mcp-token TENANT AGENT`)"
        ) from exc
    except ValueError as exc:
        raise ExportError(f"{tokens_path} is not JSON: {exc}") from exc
    if not isinstance(entries, dict) or not entries:
        raise ExportError(f"{tokens_path} holds no token: `zeromem auth mcp-token TENANT AGENT`")
    files: dict[str, bytes] = {}
    rewritten: dict[str, Any] = {}
    for digest, entry in entries.items():
        try:
            tenant, agent, creds = entry["tenant"], entry["agent"], Path(entry["creds"])
        except (KeyError, TypeError) as exc:
            raise ExportError(f"{tokens_path}: entry {digest[:12]} lacks {exc}") from exc
        # Tenant and agent ids are [a-z0-9][a-z0-9_-]*: valid in a Secret key as they are.
        key = f"{tenant}.{agent}.creds"
        files[key] = _read(creds)
        rewritten[digest] = {**entry, "creds": f"{MCP_MOUNT}/{key}"}
    files["mcp-tokens.json"] = json.dumps(rewritten, indent=1).encode()
    return files


def secrets(
    export: Path,
    mcp_tokens: Path,
    namespace: str = NAMESPACE,
    encryption: Path | None = None,
) -> dict[str, Any]:
    """A v1 List of every Secret the manifests name (``encryption``: the keys file,
    default ``export``'s sibling ``encryption.env``)."""
    encryption = encryption or export.parent / "encryption.env"
    items = [
        secret(
            "zeromem-nats-auth", namespace, {"nats-server.conf": _read(export / "nats-server.conf")}
        ),
        secret("zeromem-nats-creds", namespace, {n: _read(export / n) for n in SERVICE_CREDS}),
        secret("zeromem-redis-acl", namespace, {"users.acl": _read(export / "users.acl")}),
        secret(
            "zeromem-redis-passwords", namespace, redis_passwords(export / "redis-passwords.env")
        ),
        secret("zeromem-mcp", namespace, mcp_files(mcp_tokens)),
        secret("zeromem-encryption", namespace, encryption_keys(encryption)),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", type=Path, help="the directory `zeromem auth export` wrote")
    parser.add_argument(
        "--mcp-tokens",
        type=Path,
        default=Path(".zeromem/auth/mcp-tokens.json"),
        help="the token file `zeromem auth mcp-token` wrote (default: %(default)s)",
    )
    parser.add_argument("--namespace", default=NAMESPACE, help="default: %(default)s")
    parser.add_argument(
        "--encryption-keys",
        type=Path,
        default=Path(".zeromem/encryption.env"),
        help="the master and JetStream keys; generated when missing (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        listing = secrets(args.export, args.mcp_tokens, args.namespace, args.encryption_keys)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(listing, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
