"""A zeromem deployment of its own for one scenario: real nats-server and Redis child
processes (free ports, a temp dir), `zeromem worker` and `zeromem serve` as separate OS
processes, so a fault can be a real SIGKILL / SIGSTOP of a real process.

Nothing here runs on a standard port, and nothing outside the scenario's temp dir is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from zeromem.auth.authority import REDIS_ROLES, Authority
from zeromem.auth.redis_acl import USERS, acl_file
from zeromem.bus import connect_nats, connect_redis, key_layout, provision
from zeromem.embedded import NatsServer, RedisServer
from zeromem.embedded.children import die_with_parent
from zeromem.embedded.nats_cluster import NatsCluster
from zeromem.embedded.redis_cluster import RedisClusterNodes
from zeromem.embedded.stack import settings_for_role
from zeromem.settings import BusSettings, Settings, WorkerSettings
from zeromem.store.keys import shard_lease_key, use_layout

REPO = Path(__file__).resolve().parents[2]  # where `python -m tests.reliability...` resolves

# Shorter than the main fixtures' (2 s / 3 s): a takeover waits a lease and an ack wait, and
# the normal suite has to fit several takeovers in well under a minute.
TIMINGS = Settings(
    shards=8,
    bus=BusSettings(ack_wait_s=1.0),
    worker=WorkerSettings(lease_ttl_s=1.5, reaper_interval_s=0.2),
)


def long_mode() -> bool:
    """`make reliability` sets ZEROMEM_RELIABILITY=long: the same scenarios, longer."""
    return os.environ.get("ZEROMEM_RELIABILITY", "").lower() == "long"


def scale(short: float, long: float) -> float:
    return long if long_mode() else short


@dataclass
class ServiceProcess:
    """One `zeromem worker|serve` child; its output goes to a log file in the data dir."""

    args: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # stopped on purpose (SIGTERM): its exit is no failure

    def start(self) -> ServiceProcess:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.reliability.service_main", *self.args],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a signal for the process is for it alone
                # and it dies with the test run, even a killed one: no orphaned stacks
                preexec_fn=die_with_parent(),
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release, no ack of the batch in hand."""
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None:
            return
        self.stopped = True
        self.signal(signal.SIGCONT)  # a paused process cannot handle SIGTERM
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Cluster:
    """Secured like any zeromem deployment: the servers trust ``authority`` (the test
    session's), ``settings`` are the operator's (admin), and each service process runs
    under its own identity."""

    root: Path
    authority: Authority | None = None
    # 1: one nats-server; 3: a JetStream cluster, every stream with three replicas
    nats_nodes: int = 1
    shards: int = TIMINGS.shards
    # 0: one Redis; more: a Redis Cluster of that many masters, each with ``redis_replicas``
    # replicas (embedded.redis_cluster). By default what the test run uses
    # (ZEROMEM_TEST_REDIS_MASTERS, tests/conftest.py): a process names keys one way.
    redis_masters: int = field(
        default_factory=lambda: int(os.environ.get("ZEROMEM_TEST_REDIS_MASTERS") or 0)
    )
    redis_replicas: int = 0
    settings: Settings = field(init=False)
    nats: NatsServer | NatsCluster = field(init=False)
    redis: RedisServer | RedisClusterNodes = field(init=False)
    processes: list[ServiceProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        authority = self.authority = self.authority or Authority.load_or_create(self.root / "auth")
        self.nats = (
            NatsServer(self.root / "nats", authority=authority)
            if self.nats_nodes == 1
            else NatsCluster(self.root / "nats", self.nats_nodes, authority=authority)
        )
        acl = acl_file({r: authority.redis_password(r) for r in REDIS_ROLES})
        self.redis = (
            RedisClusterNodes(
                self.root / "redis-cluster",
                masters=self.redis_masters,
                replicas=self.redis_replicas,
                acl=acl,
                admin=(USERS["admin"], authority.redis_password("admin")),
            )
            if self.redis_masters
            else RedisServer(self.root / "redis", acl=acl)
        )
        plain = TIMINGS.with_(
            bus={"nats_url": self.nats.url, "stream_replicas": min(3, self.nats_nodes)},
            store={"redis_url": self.redis.url},
            shards=self.shards,
            data_dir=self.root / "data",
            auth_dir=str(authority.directory),
        )
        self.settings = settings_for_role(plain, authority, "admin")

    # --- servers -------------------------------------------------------------------------

    async def start(self) -> Cluster:
        use_layout(key_layout(self.settings))  # keys named before any connection (leases)
        self.nats.start()
        self.redis.start()
        # Streams and consumers exist before any process starts, with this scenario's ack
        # wait (the consumer keeps the config of whoever created it first).
        nc = await connect_nats(self.settings, "provision")
        try:
            await provision(nc.jetstream(), self.settings)
        finally:
            await nc.close()
        return self

    def stop(self) -> None:
        for proc in self.processes:
            proc.stop()
        self.processes.clear()
        self.redis.stop()
        self.nats.stop()

    def env(self, role: str = "admin") -> dict[str, str]:
        s = settings_for_role(self.settings, self.authority, role)
        return dict(os.environ, **s.env(), OTEL_SDK_DISABLED="true")

    # --- service processes ---------------------------------------------------------------

    def worker(self, index: int = 0, count: int = 1, tag: str = "") -> ServiceProcess:
        name = f"worker-{index}-of-{count}{tag}-{len(self.processes)}.log"
        proc = ServiceProcess(
            ["worker", str(index), str(count)], self.env("worker"), self.root / name
        ).start()
        self.processes.append(proc)
        return proc

    def member(self, tag: str = "") -> ServiceProcess:
        """A worker in dynamic membership: it holds its share of the live workers'."""
        name = f"member{tag}-{len(self.processes)}.log"
        proc = ServiceProcess(["worker"], self.env("worker"), self.root / name).start()
        self.processes.append(proc)
        return proc

    def serve(self) -> ServiceProcess:
        proc = ServiceProcess(
            ["serve"], self.env("reader"), self.root / f"serve-{len(self.processes)}.log"
        )
        self.processes.append(proc.start())
        return proc

    def assert_processes_alive(self) -> None:
        """A service that died at start (an import error, a bad flag) fails the scenario
        at once, with its log, instead of after a timeout."""
        for proc in self.processes:
            if proc.stopped or proc.process is None:
                continue
            if proc.process.poll() not in (None, -signal.SIGKILL):
                tail = proc.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{proc.args} exited with {proc.process.returncode}:\n{tail}")

    async def wait_leases(self, shards: list[int] | None = None, limit_s: float = 30.0) -> None:
        """Until every shard's lease is held by someone (a worker is consuming it)."""
        keys = [shard_lease_key(s) for s in (shards or range(self.settings.shards))]
        redis = connect_redis(self.settings)
        try:
            deadline = time.monotonic() + limit_s
            while True:
                with contextlib.suppress(Exception):
                    if await redis.exists(*keys) == len(keys):
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError("the workers did not take every shard's lease")
                self.assert_processes_alive()
                await asyncio.sleep(0.05)
        finally:
            await redis.aclose()
        await asyncio.sleep(0.2)  # the lease is taken just before the consumer is bound

    async def wait_serving(self, limit_s: float = 30.0) -> None:
        """Until a read service answers a get."""
        from zeromem.sdk import MemoryClient
        from zeromem.sdk.errors import ServiceUnavailableError

        client = await MemoryClient.connect(
            self.settings.bus.nats_url,
            tenant="probe",
            shards=self.settings.shards,
            timeout=0.5,
            settings=self.settings,
        )
        try:
            deadline = time.monotonic() + limit_s
            while True:
                try:
                    await client.get("user:probe:x")
                    return
                except ServiceUnavailableError:
                    if time.monotonic() > deadline:
                        raise
                    self.assert_processes_alive()
                    await asyncio.sleep(0.1)
        finally:
            await client.close()

    async def start_services(self, workers: int = 1, serve: bool = True) -> list[ServiceProcess]:
        started = [self.worker(i, workers) for i in range(workers)]
        if serve:
            self.serve()
        await self.wait_leases()
        if serve:
            await self.wait_serving()
        return started

    def restart_redis(self) -> None:
        """SIGKILL, then start again on the same port and append-only file."""
        assert isinstance(self.redis, RedisServer)
        self.redis.kill()
        self.redis.start()

    def with_settings(self, **changes: object) -> Settings:
        return self.settings.with_(**changes)


class CutProxy:
    """A TCP relay in front of NATS whose connections can be cut at will: a client that
    loses its connection mid-stream (and reconnects through the same address)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.cuts = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> CutProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            for w in (writer, up_writer):
                w.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers -= {writer, up_writer}

    def cut(self) -> None:
        """Drop every relayed connection, mid-message if one is in flight."""
        self.cuts += 1
        for w in list(self._writers):
            transport = w.transport
            transport.abort()  # RST, no graceful close: bytes in flight are lost

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
