"""``zeromem up``: the whole stack on one machine.

Starts the embedded servers unless NATS_URL / REDIS_URL point elsewhere, provisions the
streams, then runs the workers and the read services as child processes (one Python
process per core's worth of work), says "ready" once the workers hold every shard and the
read services answer, and stops everything cleanly on Ctrl-C, SIGTERM or SIGHUP (a closed
terminal). Killed outright (SIGKILL), it takes its children with it: each is armed to
receive SIGTERM when it dies (``zeromem.embedded.children``). One ``up`` per data
directory: a second one says which process holds it and exits 6.

Secure by default: the embedded servers trust the authority under ``{data_dir}/auth``
(created on the first start), each child runs under its service identity, and the CLI
in the same directory finds the authority through ``stack.json`` (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from zeromem import naming
from zeromem.bus import connect_nats, connect_redis, provision
from zeromem.cli.common import EXIT_IN_USE, CliError
from zeromem.embedded import EmbeddedStack
from zeromem.embedded.children import die_with_parent
from zeromem.embedded.stack import StackLockedError, local_master_key, settings_for_role
from zeromem.settings import Settings, child_environment
from zeromem.store.keys import shard_lease_key

# How long `up` waits for its children to hold every shard and answer reads. On this
# 2-core machine they import and connect in 2-4 s; a loaded one may take several times that.
READY_TIMEOUT_S = 60.0


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "zeromem.cli.main", *args],
        env=env,
        start_new_session=True,  # we forward the shutdown ourselves, in order
        preexec_fn=die_with_parent(),  # and if we are killed outright, they go too
    )


async def _provision(settings: Settings) -> None:
    nc = await connect_nats(settings, name="zeromem-up")
    try:
        await provision(nc.jetstream(), settings)
    finally:
        await nc.close()


async def _ready(settings: Settings, children: list[subprocess.Popen[bytes]], stopping: Any) -> str:
    """Wait until every shard's lease is held and the read services answer; '' when
    ready, else what is missing. ``settings`` are the admin's."""
    nc = await connect_nats(settings, name="zeromem-up-ready")
    redis = connect_redis(settings)
    leases = [shard_lease_key(s) for s in range(settings.shards)]
    # An empty request is refused by the read service's admission ('bad_request'): an
    # answer that proves it listens, without a read in anyone's audit trail.
    probes = [naming.query_subject("default", "zeromem-up", kind) for kind in ("get", "recall")]
    deadline = time.monotonic() + READY_TIMEOUT_S
    missing = "workers and read services"
    try:
        while time.monotonic() < deadline:
            if stopping():
                return ""
            if any(child.poll() is not None for child in children):
                return "a child process exited"
            held = sum(1 for holder in await redis.mget(leases) if holder)
            answered = 0
            for subject in probes:
                try:
                    await nc.request(subject, b"", timeout=1.0)
                    answered += 1
                except Exception:  # no responders yet, or not in time
                    pass
            if held == len(leases) and answered == len(probes):
                return ""
            missing = (
                f"{len(leases) - held} of {len(leases)} shards without a worker"
                if held < len(leases)
                else "the read services do not answer yet"
            )
            await asyncio.sleep(0.2)
        return f"not ready after {READY_TIMEOUT_S:.0f}s: {missing}"
    finally:
        await redis.aclose()
        await nc.close()


def _cli_hint(data_dir: Path, data_dir_given: bool) -> tuple[str, str]:
    """(where, command): how another shell reaches this stack. From this directory (or
    below) with no flag; with a --data-dir, from anywhere with that flag."""
    default = (Path.cwd() / ".zeromem").resolve()
    if not data_dir_given and data_dir == default:
        return "From another shell in this directory (or below)", "zeromem"
    return "From another shell", f"zeromem --data-dir {data_dir}"


def run_up(
    settings: Settings,
    workers: int,
    readers: int,
    metrics_port: int = 0,
    quiet: bool = False,
    inspect_port: int = 0,
    json_output: bool = False,
    data_dir_given: bool = False,
) -> int:
    # Both servers embedded: both secured by the local authority. Servers of your own come
    # with their own credentials (ZEROMEM_NATS_CREDS, a Redis user in the URL).
    embedded = not settings.bus.nats_url and not settings.store.redis_url
    stopping = False

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    # SIGHUP: the terminal closed. Stop in order, as for Ctrl-C, rather than die at once.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, request_stop)
    try:
        stack = EmbeddedStack(
            settings.data_dir,
            nats_url=settings.bus.nats_url,
            redis_url=settings.store.redis_url,
            secure=embedded,
        ).start()
    except StackLockedError as exc:
        stop = f"stop it first (kill -INT {exc.pid})" if exc.pid else "stop it first"
        raise CliError(
            str(exc), f"{stop}, or give this one another --data-dir", EXIT_IN_USE
        ) from None
    settings = settings.with_urls(stack.nats_url, stack.redis_url)
    if (
        not settings.lifecycle.master_key
    ):  # encryption at rest: generated once, kept in the data dir
        settings = settings.with_(lifecycle={"master_key": local_master_key(stack.data_dir)})
    authority = stack.authority
    children: list[subprocess.Popen[bytes]] = []

    def say(text: str) -> None:
        if not (quiet or json_output):
            print(text, flush=True)

    try:
        admin = settings_for_role(settings, authority, "admin")
        asyncio.run(_provision(admin))
        env = child_environment(
            ZEROMEM_NATS_URL=settings.bus.nats_url,
            ZEROMEM_REDIS_URL=settings.store.redis_url,
            ZEROMEM_SHARDS=str(settings.shards),
            ZEROMEM_MASTER_KEY=settings.lifecycle.master_key,
        )

        def role_env(role: str) -> dict[str, str]:
            """The child's identity: its creds file, its Redis user and password."""
            if authority is None:
                return env
            as_role = settings_for_role(settings, authority, role)
            return dict(
                env,
                ZEROMEM_NATS_CREDS=as_role.bus.nats_creds,
                ZEROMEM_REDIS_URL=as_role.store.redis_url,
            )

        # With --metrics-port P: the read services scrape at P, P+1, ..., then the workers.
        ports = (
            iter(range(metrics_port, metrics_port + readers + workers)) if metrics_port else None
        )
        endpoints = []

        def child_env(role: str) -> dict[str, str]:
            base = role_env(role)
            if ports is None:
                return base
            port = next(ports)
            endpoints.append(f"http://{settings.telemetry.metrics_host}:{port}/metrics")
            return dict(base, ZEROMEM_METRICS_PORT=str(port))

        log_json = ["--json"] if json_output else []
        children += [_spawn(["serve", *log_json], child_env("reader")) for _ in range(readers)]
        # Dynamic membership: the workers share the shards among themselves (and would
        # take over a dead one's), so none needs an index.
        children += [_spawn(["worker", *log_json], child_env("worker")) for _ in range(workers)]
        # Periodic snapshots (ZEROMEM_SNAPSHOT_INTERVAL_S; 0: none), as the operator: its
        # Redis user may fetch Redis's point-in-time copy.
        if settings.snapshot.interval_s > 0:
            children.append(_spawn(["snapshot", "--every", "0"], role_env("admin")))
        if inspect_port:  # reads Redis as the read services do; it prints its own login link
            inspect_env = role_env("reader")
            if authority is not None:
                inspect_env["ZEROMEM_AUTH_DIR"] = str(authority.directory)
            children.append(_spawn(["inspect", "--port", str(inspect_port)], inspect_env))
        say(
            f"zeromem is starting ({settings.shards} shards, {workers} worker process(es), "
            f"{readers} read service(s)); data: {stack.data_dir}"
        )
        problem = asyncio.run(_ready(admin, children, lambda: stopping))
        if problem:
            raise CliError(
                f"the stack did not come up: {problem}",
                "see the children's messages above, and the server logs in "
                f"{stack.data_dir}/nats and {stack.data_dir}/redis",
            )
        if json_output and not stopping:
            print(
                json.dumps(
                    {
                        "status": "ready",
                        "nats_url": settings.bus.nats_url,
                        "redis_url": settings.store.redis_url,
                        "data_dir": str(stack.data_dir),
                        "auth_dir": str(authority.directory) if authority is not None else "",
                        "shards": settings.shards,
                        "pid": os.getpid(),
                        "children": _labelled(children),
                        "metrics": endpoints,
                    }
                ),
                flush=True,
            )
        elif not quiet and not stopping:
            where, cli = _cli_hint(stack.data_dir, data_dir_given)
            say(
                f"zeromem is up and ready ({settings.shards} shards, {workers} worker "
                f"process(es), {readers} read service(s))\n"
                f"  NATS_URL={settings.bus.nats_url}\n"
                f"  REDIS_URL={settings.store.redis_url}\n"
                f"  data: {stack.data_dir}\n"
                + (
                    f"  auth: {authority.directory} (agents: `zeromem auth issue TENANT AGENT`)\n"
                    if authority is not None
                    else "  auth: off (servers of your own)\n"
                )
                + (f"  metrics: {' '.join(endpoints)}\n" if endpoints else "")
                + f"{where}:  {cli} put user:u1:pref_lang '\"zh\"'  then  "
                f"{cli} get user:u1:pref_lang\n"
                "Ctrl-C stops everything."
            )
        while not stopping:
            for child in children:
                if child.poll() is not None:
                    print(
                        f"a child process exited ({_name(child)}, code {child.returncode});"
                        " stopping",
                        file=sys.stderr,
                    )
                    stopping = True
            time.sleep(0.2)
        return 0
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        stack.stop()
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
            if json_output:
                print(json.dumps({"status": "stopped"}), flush=True)
            elif not quiet:
                print("zeromem stopped", flush=True)


def _labelled(children: list[subprocess.Popen[bytes]]) -> dict[str, int]:
    """Each child's pid under its command line, numbered where several share one (the
    workers): ``{"serve": 11, "worker 0": 12, "worker 1": 13}``."""
    names = Counter(_name(child) for child in children)
    seen: Counter[str] = Counter()
    labelled = {}
    for child in children:
        name = _name(child)
        labelled[name if names[name] == 1 else f"{name} {seen[name]}"] = child.pid
        seen[name] += 1
    return labelled


def _name(child: subprocess.Popen[Any]) -> str:
    return " ".join(str(a) for a in child.args[3:])  # type: ignore[index]
