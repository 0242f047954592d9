"""The embedded stack's servers and the state file that lets the CLI find them.

``zeromem up`` writes ``{data_dir}/stack.json`` with the URLs; any ``zeromem`` command run
from the same directory reads it, so no flag is needed to reach a running stack.

One stack per data directory: a second would start a second nats-server and Redis on the
same JetStream store and append-only file, and on exit delete the first one's
``stack.json``. The stack holds an exclusive ``flock`` on ``{data_dir}/up.lock`` (which
names its pid) from before its servers start until after they stop; the kernel releases
it when the holder dies, however it dies, so a stale lock file never blocks a restart.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from zeromem.embedded.redis_cluster import RedisClusterNodes
from zeromem.embedded.servers import (
    JETSTREAM_CIPHER,
    NatsServer,
    RedisServer,
    new_secret,
    port_is_free,
    secret_file,
)
from zeromem.settings import Settings

STATE_FILE = "stack.json"
MASTER_KEY_FILE = "master.key"
LOCK_FILE = "up.lock"


class StackLockedError(RuntimeError):
    """Another process runs a stack on this data directory."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        self.data_dir = data_dir
        self.pid = pid
        holder = f"process {pid}" if pid else "another process"
        super().__init__(f"the data directory {data_dir} is in use by {holder} (zeromem up)")


def _lock(data_dir: Path) -> int | None:
    """Hold the data directory's lock (the fd to keep open), or raise StackLockedError."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, as before
        return None
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        raise StackLockedError(data_dir, int(text) if text.isdigit() else None) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


@dataclass(frozen=True, slots=True)
class StackInfo:
    nats_url: str
    redis_url: str
    pid: int
    auth_dir: str = ""  # the authority the servers trust ("" for an open stack)


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 0), 0.5):
            return True
    except OSError:
        return False


def _previous_ports(data_dir: Path) -> tuple[int | None, int | None]:
    try:
        info = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None, None
    ports = []
    for url in (info.get("nats_url", ""), info.get("redis_url", "")):
        port = urlparse(url).port
        ports.append(port if port and port_is_free(port) else None)
    return ports[0], ports[1]


def find_running_stack(data_dir: Path) -> StackInfo | None:
    """The stack started by ``zeromem up`` in ``data_dir``, if it still answers."""
    try:
        info = StackInfo(**json.loads((Path(data_dir) / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if _reachable(info.nats_url) and _reachable(info.redis_url):
        return info
    return None


class EmbeddedStack:
    """nats-server with JetStream and a Redis-compatible server under one data dir.

    Secure by default: the servers trust an issuing authority kept in ``{data_dir}/auth``
    (created on first start; ``authority=`` shares one between stacks, as the tests do),
    NATS refuses any connection without one of its credentials and Redis any client that
    is not one of its ACL users. ``secure=False`` runs both open (the benchmarks' "auth
    off" baseline). Data survives a restart: JetStream's store and Redis's append-only
    file stay in the data dir, and the previous ports are reused when they are free.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        nats_url: str = "",
        redis_url: str = "",
        secure: bool = True,
        authority: Any = None,
        encrypt: bool = True,
        redis_masters: int = 0,
        redis_replicas: int = 0,
    ) -> None:
        """``redis_masters``: a Redis Cluster of that many masters (each with
        ``redis_replicas`` replicas) instead of one Redis (0, the default)."""
        from zeromem.auth.authority import REDIS_ROLES, Authority
        from zeromem.auth.redis_acl import USERS, acl_file

        self.data_dir = Path(data_dir).resolve()
        self.authority = None
        if secure:
            self.authority = authority or Authority.load_or_create(self.data_dir / "auth")
        acl = ""
        if self.authority is not None:
            acl = acl_file({r: self.authority.redis_password(r) for r in REDIS_ROLES})
        nats_port, redis_port = _previous_ports(self.data_dir)
        self.nats = (
            None
            if nats_url
            else NatsServer(
                self.data_dir / "nats",
                nats_port,
                authority=self.authority,
                cipher=JETSTREAM_CIPHER if encrypt else "",
            )
        )
        # Encryption at rest: JetStream's cipher above, and the master key the services
        # wrap the owners' data keys with (``settings_for``; generated on first use).
        self.encrypt = encrypt
        self.redis_cluster = (
            RedisClusterNodes(
                self.data_dir / "redis-cluster",
                masters=redis_masters,
                replicas=redis_replicas,
                acl=acl,
                admin=None
                if self.authority is None
                else (USERS["admin"], self.authority.redis_password("admin")),
            )
            if redis_masters and not redis_url
            else None
        )
        self.redis = (
            None
            if redis_url or self.redis_cluster
            else RedisServer(self.data_dir / "redis", redis_port, acl=acl)
        )
        self._nats_url = nats_url
        self._redis_url = redis_url
        self._lock_fd: int | None = None

    @property
    def nats_url(self) -> str:
        return self.nats.url if self.nats else self._nats_url

    @property
    def redis_url(self) -> str:
        if self.redis_cluster is not None:
            return self.redis_cluster.url
        return self.redis.url if self.redis else self._redis_url

    def start(self) -> EmbeddedStack:
        self._lock_fd = _lock(self.data_dir)  # before anything touches the data directory
        try:
            if self.nats:
                self.nats.start()
            if self.redis:
                self.redis.start()
            if self.redis_cluster is not None:
                self.redis_cluster.start()
        except BaseException:
            self.stop()
            raise
        self.data_dir.mkdir(parents=True, exist_ok=True)
        auth_dir = str(self.authority.directory) if self.authority is not None else ""
        info = StackInfo(self.nats_url, self.redis_url, os.getpid(), auth_dir)
        (self.data_dir / STATE_FILE).write_text(json.dumps(asdict(info), indent=2) + "\n")
        return self

    def settings_for(self, settings: Settings, role: str) -> Settings:
        """``settings`` pointed at this stack, as service ``role`` (``worker``,
        ``reader``, ``admin``): its NATS credential and its Redis user."""
        settings = settings.with_urls(self.nats_url, self.redis_url)
        if self.encrypt and not settings.lifecycle.master_key:
            settings = settings.with_(lifecycle={"master_key": local_master_key(self.data_dir)})
        return settings_for_role(settings, self.authority, role)

    def stop(self) -> None:
        if self.redis_cluster is not None:
            self.redis_cluster.stop()
        for server in (self.redis, self.nats):
            if server is not None:
                server.stop()
        state = self.data_dir / STATE_FILE
        try:
            if json.loads(state.read_text()).get("pid") == os.getpid():
                state.unlink()
        except (OSError, ValueError):
            pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def local_master_key(data_dir: Path) -> str:
    """The master key of the stack in ``data_dir`` (``ZEROMEM_MASTER_KEY`` when none is
    set): generated on first use, kept owner-only in ``{data_dir}/master.key``. Losing it
    loses every encrypted memory, as losing a KMS key would: back it up with the data."""
    return secret_file(Path(data_dir) / MASTER_KEY_FILE, new_secret)


def stack_master_key(data_dir: Path) -> str:
    """The master key a stack in ``data_dir`` generated, "" if it has none (a command
    run against it, such as ``zeromem rebuild``, must seal with the same key)."""
    try:
        return (Path(data_dir) / MASTER_KEY_FILE).read_text().strip()
    except OSError:
        return ""


def settings_for_role(settings: Settings, authority: Any, role: str) -> Settings:
    """``settings`` (URLs set) as service ``role`` of ``authority``'s deployment: the
    role's creds file, and its Redis user and password in the Redis URL. Unchanged when
    ``authority`` is None (an open stack)."""
    from zeromem.auth.redis_acl import url_with_user

    if authority is None:
        return settings
    return settings.with_(
        bus={"nats_creds": str(authority.service_creds_path(role))},
        store={
            "redis_url": url_with_user(
                settings.store.redis_url, role, authority.redis_password(role)
            )
        },
    )
