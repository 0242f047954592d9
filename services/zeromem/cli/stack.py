"""``zeromem up``: the whole stack on one machine.

Starts the embedded servers unless NATS_URL / REDIS_URL point elsewhere, provisions the
streams, then runs the workers and the read services as child processes (one Python
process per core's worth of work), and stops everything cleanly on Ctrl-C or SIGTERM.

Secure by default: the embedded servers trust the authority under ``{data_dir}/auth``
(created on the first start), each child runs under its service identity, and the CLI
in the same directory finds the authority through ``stack.json`` (docs/security.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

from zeromem.bus import connect_nats, provision
from zeromem.embedded import EmbeddedStack
from zeromem.embedded.stack import settings_for_role
from zeromem.settings import Settings


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "zeromem.cli.main", *args],
        env=env,
        start_new_session=True,  # we forward the shutdown ourselves, in order
    )


async def _provision(settings: Settings) -> None:
    nc = await connect_nats(settings, name="zeromem-up")
    try:
        await provision(nc.jetstream(), settings)
    finally:
        await nc.close()


def run_up(
    settings: Settings,
    workers: int,
    readers: int,
    metrics_port: int = 0,
    quiet: bool = False,
    inspect_port: int = 0,
) -> int:
    # Both servers embedded: both secured by the local authority. Servers of your own come
    # with their own credentials (ZEROMEM_NATS_CREDS, a Redis user in the URL).
    embedded = not settings.nats_url and not settings.redis_url
    stack = EmbeddedStack(
        settings.data_dir, nats_url=settings.nats_url, redis_url=settings.redis_url, secure=embedded
    ).start()
    settings = settings.with_urls(stack.nats_url, stack.redis_url)
    authority = stack.authority
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        asyncio.run(_provision(settings_for_role(settings, authority, "admin")))
        env = dict(os.environ)
        env.update(
            ZEROMEM_NATS_URL=settings.nats_url,
            ZEROMEM_REDIS_URL=settings.redis_url,
            ZEROMEM_SHARDS=str(settings.shards),
        )

        def role_env(role: str) -> dict[str, str]:
            """The child's identity: its creds file, its Redis user and password."""
            if authority is None:
                return env
            as_role = settings_for_role(settings, authority, role)
            return dict(
                env, ZEROMEM_NATS_CREDS=as_role.nats_creds, ZEROMEM_REDIS_URL=as_role.redis_url
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
            endpoints.append(f"http://{settings.metrics_host}:{port}/metrics")
            return dict(base, ZEROMEM_METRICS_PORT=str(port))

        children += [_spawn(["serve"], child_env("reader")) for _ in range(readers)]
        children += [
            _spawn(["worker", "--index", str(i), "--count", str(workers)], child_env("worker"))
            for i in range(workers)
        ]
        if inspect_port:  # reads Redis as the read services do; it prints its own login link
            inspect_env = role_env("reader")
            if authority is not None:
                inspect_env["ZEROMEM_AUTH_DIR"] = str(authority.directory)
            children.append(_spawn(["inspect", "--port", str(inspect_port)], inspect_env))
        if not quiet:
            print(
                f"zeromem is up ({settings.shards} shards, {workers} worker process(es), "
                f"{readers} read service(s))\n"
                f"  NATS_URL={settings.nats_url}\n"
                f"  REDIS_URL={settings.redis_url}\n"
                f"  data: {stack.data_dir}\n"
                + (
                    f"  auth: {authority.directory} (agents: `zeromem auth issue TENANT AGENT`)\n"
                    if authority is not None
                    else "  auth: off (servers of your own)\n"
                )
                + (f"  metrics: {' '.join(endpoints)}\n" if endpoints else "")
                + "From another shell in this directory:  zeromem put user:u1:pref_lang '\"zh\"'"
                "  then  zeromem get user:u1:pref_lang\n"
                "Ctrl-C stops everything.",
                flush=True,
            )
        while not stopping:
            for child in children:
                if child.poll() is not None:
                    print(
                        f"a child process exited ({child.args[3:]}, code {child.returncode});"
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
        if not quiet:
            print("zeromem stopped", flush=True)
