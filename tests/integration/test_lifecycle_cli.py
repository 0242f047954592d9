"""Issue 4 from the command line: put --sensitive, archive (with its progress bar),
recall --include-archived, restore, forget --last-minutes, audit --key / --agent, watch."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

ZEROMEM = [sys.executable, "-m", "zeromem.cli.main"]


async def cli(  # type: ignore[no-untyped-def]
    settings, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """The CLI against ``settings``' servers; never a traceback."""
    env = dict(
        os.environ,
        ZEROMEM_NATS_URL=settings.bus.nats_url,
        ZEROMEM_REDIS_URL=settings.store.redis_url,
        ZEROMEM_SHARDS=str(settings.shards),
        ZEROMEM_MASTER_KEY=settings.lifecycle.master_key,  # the operator's, as the services have it
        COLUMNS="200",
    )
    proc = await asyncio.create_subprocess_exec(
        *ZEROMEM,
        *args,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    assert "Traceback" not in err.decode(), err.decode()
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


async def test_lifecycle_from_the_command_line(running, tenant: str) -> None:
    t = ("--tenant", tenant)
    put = await cli(
        running,
        "put",
        "user:u1:vault",
        '{"code": "Zurich-1234"}',
        "--content",
        "vault code Zurich-1234",
        "--sensitive",
        "--agent",
        "ops",
        "--json",
        *t,
    )
    assert put.returncode == 0, put.stderr
    note = await cli(
        running,
        "put",
        "user:u1:note",
        '"buy milk"',
        "--content",
        "buy oat milk on the way home",
        *t,
    )
    assert note.returncode == 0, note.stderr
    watch = asyncio.create_task(
        cli(running, "watch", "user:u1:*", "--since-minutes", "5", "--count", "3", "--json", *t)
    )

    archived = await cli(running, "archive", "--older-than-days", "0", "--json", *t)
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout) == {
        "owners": 1,
        "archived": 2,
        "keys": ["user:u1:note", "user:u1:vault"],
    }
    recalled = await cli(running, "recall", "oat milk", "--owner", "user:u1", "--json", *t)
    assert json.loads(recalled.stdout).get("memories", []) == []
    recalled = await cli(
        running, "recall", "oat milk", "--owner", "user:u1", "--include-archived", "--json", *t
    )
    memories = json.loads(recalled.stdout)["memories"]
    assert [(m["key"], m["archived"]) for m in memories] == [("user:u1:note", True)]
    restored = await cli(running, "restore", "user:u1:note", "--json", *t)
    assert json.loads(restored.stdout)["result"]["version"] == 3

    events = [json.loads(line) for line in (await watch).stdout.splitlines()]
    assert [(e["result"]["op"], e["result"]["key"]) for e in events] == [
        ("put", "user:u1:vault"),
        ("put", "user:u1:note"),
        ("archive", "user:u1"),
    ]

    forgot = await cli(running, "forget", "user:u1", "--last-minutes", "10", *t)
    assert forgot.returncode == 0, forgot.stderr
    assert "forgot 2 memories" in forgot.stdout  # the restored note and the archived vault

    trail = await cli(running, "audit", "--key", "user:u1:vault", "--json", *t)
    records = json.loads(trail.stdout)
    assert [(r["op"], r["status"]) for r in records] == [
        ("put", "applied"),
        ("archive", "applied"),
        ("forget", "applied"),
    ]
    assert "Zurich-1234" not in trail.stdout
    by_agent = await cli(running, "audit", "--agent", "ops", *t)
    assert by_agent.returncode == 0 and "user:u1:vault" in by_agent.stdout
    assert "Zurich-1234" not in by_agent.stdout
