"""The lifecycle subcommands of ``zeromem``: archive, restore, forget, audit, watch,
rebuild. They talk to a running stack like the other client commands (``archive`` and
``rebuild`` also read Redis: which owners hold old memories, and the state to rebuild)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

from zeromem.cli import arguments as arg
from zeromem.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    CliError,
    admin_settings,
    client_call,
    describe_result,
    print_json,
    print_receipt,
    write_command,
)


def cmd_archive(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from zeromem.bus import connect_redis
    from zeromem.lifecycle.archive import owners_to_archive

    settings = admin_settings(args)
    cutoff = time.time() - args.older_than_days * 86400

    async def body(client: Any) -> int:
        owners = list(args.owner or ())
        if not owners:  # every owner of the tenant (or under --prefix) holding old memories
            redis = connect_redis(settings)
            try:
                owners = [
                    o
                    async for o in owners_to_archive(
                        redis, client.tenant, cutoff, prefix=args.prefix
                    )
                ]
            finally:
                await redis.aclose()
        archived = 0
        keys: list[str] = []
        with Progress(
            TextColumn("[bold]archiving[/bold] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[memories]} memories"),
            TimeElapsedColumn(),
            disable=args.json or not owners,
        ) as bar:
            task = bar.add_task(client.tenant, total=len(owners), memories=0)
            slots = asyncio.Semaphore(32)  # owners in flight at once

            async def one(owner: str) -> None:
                nonlocal archived
                prefix = args.prefix if args.prefix.startswith(owner + ":") else ""
                async with slots:
                    receipt = await client.archive(owner, older_than=cutoff, prefix=prefix)
                if receipt.status == "applied":
                    archived += len(receipt.result.keys)
                    keys.extend(receipt.result.keys)
                bar.update(task, advance=1, memories=archived)

            await asyncio.gather(*(one(owner) for owner in owners))
        if args.json:
            print_json({"owners": len(owners), "archived": archived, "keys": sorted(keys)})
        else:
            print(
                f"archived {archived} memories of {len(owners)} owner(s), "
                f"last updated before {datetime.fromtimestamp(cutoff, UTC):%Y-%m-%d %H:%M} UTC"
            )
        return 0

    return client_call(args, body)


def cmd_restore(args: argparse.Namespace) -> int:
    return write_command(args, lambda client: client.restore(args.key))


def cmd_forget(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if args.since is not None and args.until is not None and args.since > args.until:
        raise CliError(f"--since {args.since:g} is after --until {args.until:g}", "swap them")
    last_seconds = args.last_minutes * 60 if args.last_minutes else None

    async def body(client: Any) -> int:
        receipts: list[Any] = []
        # One atomic command per owner; over many owners, a bar (8 owners in flight).
        with Progress(
            TextColumn("[bold]forgetting[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[memories]} memories"),
            TimeElapsedColumn(),
            disable=args.json or len(args.owner) < 2,
            transient=True,
        ) as bar:
            task = bar.add_task("owners", total=len(args.owner), memories=0)
            slots = asyncio.Semaphore(8)
            forgotten = 0

            async def one(owner: str) -> None:
                nonlocal forgotten
                async with slots:
                    receipt = await client.forget(
                        owner,
                        prefix=args.prefix,
                        since=args.since,
                        until=args.until,
                        last_seconds=last_seconds,
                    )
                receipts.append(receipt)
                if receipt.status == "applied":
                    forgotten += len(receipt.result.keys)
                bar.update(task, advance=1, memories=forgotten)

            await asyncio.gather(*(one(owner) for owner in args.owner))
        if len(receipts) == 1 and (args.json or receipts[0].status != "applied"):
            return print_receipt(args, receipts[0])
        keys = sorted(k for r in receipts if r.status == "applied" for k in r.result.keys)
        failed = [r for r in receipts if r.status != "applied"]
        if args.json:
            print_json(
                {
                    "owners": len(receipts),
                    "forgotten": keys,
                    "refused": {r.key: describe_result(r.result) for r in failed},
                }
            )
        else:
            print(f"forgot {len(keys)} memories of {', '.join(args.owner)}")
            for key in keys:
                print(f"  {key}")
            for r in failed:
                print(f"  {r.key}: {describe_result(r.result)}", file=sys.stderr)
        return exit_code_of(failed)

    return client_call(args, body)


def exit_code_of(failed: list[Any]) -> int:
    from zeromem.cli.common import EXIT_CONFLICT, EXIT_NOT_FOUND

    if not failed:
        return 0
    return EXIT_CONFLICT if any(r.status == "conflict" for r in failed) else EXIT_NOT_FOUND


def cmd_audit(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        since = time.time() - args.since_hours * 3600 if args.since_hours else None
        entries = await client.audit(key=args.key, agent=args.filter_agent, since=since)
        if args.limit:
            entries = entries[-args.limit :]
        if args.json:
            print(json.dumps(msgspec.to_builtins(entries)))
            return 0
        print_audit(entries)
        return 0

    return client_call(args, body)


def print_audit(entries: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"audit trail ({len(entries)} records)")
    for column in ("time (UTC)", "agent", "op", "key", "result", "version", "detail"):
        table.add_column(column)
    styles = {"conflict": "yellow", "rejected": "red", "dead_letter": "red", "read": "dim"}
    for e in entries:
        when = datetime.fromtimestamp(e.at, UTC).strftime("%m-%d %H:%M:%S.%f")[:-3]
        key = e.key or ", ".join(e.keys[:3]) + (" ..." if len(e.keys) > 3 else "")
        version = f"{e.version_before}->{e.version_after}" if e.kind == "write" else ""
        detail = e.reason or (json.dumps(e.detail, ensure_ascii=False) if e.detail else "")
        if e.kind == "write" and e.keys:
            detail = f"{len(e.keys)} memories " + detail
        table.add_row(
            when, e.agent, e.op, key, e.status, version, detail[:80], style=styles.get(e.status)
        )
    Console().print(table)


def cmd_watch(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        since_time = time.time() - args.since_minutes * 60 if args.since_minutes else None
        feed = await client.watch(
            args.scope, since_position=args.since_position, since_time=since_time
        )
        seen = 0
        try:
            while args.count is None or seen < args.count:
                event = await feed.next()
                seen += 1
                if args.json:
                    print(
                        json.dumps(
                            {
                                "position": event.position,
                                "time": event.time,
                                "result": msgspec.to_builtins(event.result),
                            }
                        ),
                        flush=True,
                    )
                else:
                    print(
                        f"#{event.position} {event.result.agent} {event.op} {event.key} "
                        f"{describe_result(event.result)}",
                        flush=True,
                    )
        finally:
            await feed.close()
        return 0

    return client_call(args, body)


def cmd_rebuild(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from zeromem.worker.rebuild import SnapshotUnusableError, TruncatedLogError, rebuild

    what = f"tenant {args.tenant}" if args.tenant else "every tenant"
    if not args.yes:
        raise CliError(
            f"this replaces the Redis state of {what} with a replay of the command log "
            "(the workers pause while it runs)",
            "pass --yes to go ahead",
            EXIT_USAGE,
        )
    settings = admin_settings(args)

    async def run() -> Any:
        with Progress(
            TextColumn("[bold]replaying[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            disable=args.json,
        ) as bar:
            task = bar.add_task("commands", total=None)
            update: Callable[[int, int], None] = lambda done, total: bar.update(  # noqa: E731
                task, completed=done, total=total
            )
            return await rebuild(
                settings,
                tenant=args.tenant or None,
                progress=update,
                use_snapshot=not args.whole_log,
            )

    try:
        report = asyncio.run(run())
    except TruncatedLogError as exc:
        raise CliError(
            str(exc),
            "the rebuild needs a snapshot and the whole log after it (zeromem snapshot)",
            EXIT_FAILED,
        ) from None
    except SnapshotUnusableError as exc:
        raise CliError(
            str(exc),
            "take a new snapshot first (zeromem snapshot), or replay the whole log "
            "(--whole-log) while it is whole",
            EXIT_FAILED,
        ) from None
    return print_report(
        args,
        report,
        f"rebuilt {what}: {report.commands} commands replayed ({report.applied} applied, "
        f"{report.conflicts} conflicts, {report.rejected} rejected), {report.reaped} "
        f"expired memories reaped, up to stream sequence {report.last_sequence}, "
        f"in {report.seconds:.2f}s"
        + (
            f" (from snapshot {report.snapshot}: {report.restored} keys restored)"
            if report.snapshot
            else ""
        ),
    )


def print_report(args: argparse.Namespace, report: Any, text: str) -> int:
    """A dataclass report as JSON with --json, else ``text``."""
    print(json.dumps(dataclasses.asdict(report)) if args.json else text)
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from zeromem.embedded.snapshot import SnapshotRefusedError, snapshot_every, take_snapshot

    settings = admin_settings(args)
    if args.list:
        return _list_snapshots(args, settings)
    if args.every is not None:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        asyncio.run(
            _until_stopped(snapshot_every(settings, args.every or settings.snapshot.interval_s))
        )
        return 0
    try:
        report = asyncio.run(take_snapshot(settings))
    except SnapshotRefusedError as exc:
        raise CliError(str(exc), "no snapshot was taken", EXIT_FAILED) from None
    return print_report(
        args,
        report,
        f"snapshot {report.name}: {report.keys} keys, {report.stored_bytes} bytes stored "
        f"(Redis's copy {report.rdb_bytes} bytes; its fork paused Redis {report.fork_ms:.1f}"
        f" ms), in {report.seconds:.2f}s",
    )


async def _until_stopped(job: Any) -> None:
    """Run ``job`` until SIGTERM or SIGINT, then cancel it, so a snapshot in progress
    removes its files (a whole copy of Redis) and stops its scratch server on the way."""
    import signal

    task = asyncio.ensure_future(job)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _list_snapshots(args: argparse.Namespace, settings: Any) -> int:
    from zeromem.bus import connect_nats
    from zeromem.lifecycle.snapshot_store import snapshots

    async def run() -> list[Any]:
        nc = await connect_nats(settings, name="zeromem-snapshot-list")
        try:
            return await snapshots(nc.jetstream())
        finally:
            await nc.drain()

    found = asyncio.run(run())
    if args.json:
        print_json(
            [{"name": s.name, "bytes": s.size, **msgspec.to_builtins(s.header)} for s in found]
        )
        return 0
    for s in found:
        when = datetime.fromtimestamp(s.header.taken_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        print(
            f"{s.name}  {when} UTC  {s.header.keys} keys  {s.size} bytes  "
            f"covers the log to {min(s.header.covered.values(), default=0)}"
        )
    if not found:
        print("no snapshot yet (zeromem snapshot takes one)")
    return 0


def cmd_erase_tenant(args: argparse.Namespace) -> int:
    from zeromem.bus import connect_nats, connect_redis
    from zeromem.lifecycle.erasure import ErasureRecordRefusedError, erase_tenant

    if not args.yes:
        raise CliError(
            f"this erases tenant {args.tenant} for good: its commands from the log, its "
            "change feed, audit trail and dead letters, and all its Redis state and keys",
            "revoke its credentials first (zeromem auth revoke --tenant), then pass --yes",
            EXIT_USAGE,
        )
    settings = admin_settings(args)

    async def run() -> Any:
        nc = await connect_nats(settings, name="zeromem-erase")
        redis = connect_redis(settings)
        try:
            return await erase_tenant(nc, redis, args.tenant)
        finally:
            await nc.drain()
            await redis.aclose()

    try:
        erasure = asyncio.run(run())
    except ErasureRecordRefusedError as exc:
        raise CliError(str(exc), "then run erase-tenant again", EXIT_FAILED) from None
    return print_report(
        args,
        erasure,
        f"erased tenant {erasure.tenant}: {erasure.commands} commands, {erasure.changes} "
        f"changes, {erasure.audit} audit records, {erasure.dead_letters} dead letters, "
        f"{erasure.redis_keys} Redis keys, {erasure.snapshots} snapshots rewritten "
        "(the append-only file is being rewritten)",
    )


def add_lifecycle_parsers(sub: Any, client_parser: Callable[..., argparse.ArgumentParser]) -> None:
    archive = client_parser(
        "archive",
        "move old memories to the archive tier",
        "Archive memories last updated more than --older-than-days ago: "
        "for the given owners, or every owner of the tenant (under "
        "--prefix). Default recall skips them; `recall --include-archived` "
        "finds them; `restore KEY` brings one back.",
    )
    archive.add_argument(
        "--older-than-days",
        type=arg.number(0),
        required=True,
        help="archive what was last updated more than N days ago (N >= 0)",
    )
    archive.add_argument(
        "--owner", action="append", type=arg.owner, help="e.g. user:u1 (repeatable)"
    )
    archive.add_argument("--prefix", default="", help="only owners / keys with this prefix")
    archive.set_defaults(func=cmd_archive)

    restore = client_parser(
        "restore",
        "bring an archived memory back",
        "Restore KEY from the archive tier (its version continues).",
    )
    restore.add_argument("key", metavar="KEY", type=arg.memory_key)
    restore.set_defaults(func=cmd_restore)

    forget = client_parser(
        "forget",
        "delete an owner's memories by prefix or time, at once",
        "Delete, as one atomic command per owner, ordered with the owner's others, the "
        "memories of each OWNER matching --prefix and the time range "
        "(archived ones included). Several owners: a progress bar.",
    )
    forget.add_argument(
        "owner", nargs="+", type=arg.owner, help="namespace:owner_id, e.g. session:s1"
    )
    forget.add_argument("--prefix", default="", help="full key prefix, e.g. session:s1:draft")
    forget.add_argument(
        "--last-minutes",
        type=arg.number(0, above=True),
        help="only memories of the last N minutes",
    )
    forget.add_argument("--since", type=arg.number(0), help="epoch seconds, lower bound (updated)")
    forget.add_argument("--until", type=arg.number(0), help="epoch seconds, upper bound (updated)")
    forget.set_defaults(func=cmd_forget)

    # Not a client_parser: its --agent filters by agent instead of naming the caller.
    audit = sub.add_parser(
        "audit",
        help="who changed or read what, and when",
        description="The tenant's audit trail in order: every applied, "
        "conflicting and rejected command (versions before and after) and "
        "every read (reader and keys, never values). Sensitive values are "
        "redacted.",
    )
    audit.add_argument(
        "--tenant", type=arg.tenant, help="tenant (default: the credential's, else 'default')"
    )
    audit.add_argument("--json", action="store_true", help="print JSON")
    audit.add_argument("--key", help="only records about this key")
    audit.add_argument(
        "--agent", dest="filter_agent", help="only records of this agent (or reader)"
    )
    audit.set_defaults(agent=None)
    audit.add_argument(
        "--since-hours", type=arg.number(0, above=True), help="only the last N hours"
    )
    audit.add_argument("--limit", type=arg.number(1, integer=True), help="only the last N records")
    audit.set_defaults(func=cmd_audit)

    watch = client_parser(
        "watch",
        "follow the changes of a scope",
        "Print the change feed of SCOPE (e.g. 'task:t42:*'); resume with "
        "--since-position (an event's #) or --since-minutes.",
    )
    watch.add_argument("scope", type=arg.scope)
    watch.add_argument(
        "--since-position", type=arg.number(1, integer=True), help="resume after this event #"
    )
    watch.add_argument("--since-minutes", type=arg.number(0, above=True), help="from N minutes ago")
    watch.add_argument("--count", type=arg.number(1, integer=True), help="stop after N events")
    watch.set_defaults(func=cmd_watch)

    rebuild = sub.add_parser(
        "rebuild",
        help="reconstruct Redis from the command log",
        description="Restore the latest snapshot and replay the command stream after "
        "it into Redis, for one tenant or everything (e.g. after Redis lost its data). The "
        "workers pause while it runs and resume where it ended.",
    )
    rebuild.add_argument(
        "--whole-log",
        action="store_true",
        help="ignore the snapshots: replay the log from its first command (it must be whole)",
    )
    rebuild.add_argument("--tenant", type=arg.tenant, help="only this tenant (default: everything)")
    rebuild.add_argument("--yes", action="store_true", help="do it (it replaces the state)")
    rebuild.add_argument("--json", action="store_true", help="print JSON")
    rebuild.set_defaults(func=cmd_rebuild)

    snapshot = sub.add_parser(
        "snapshot",
        help="take a snapshot of the state, for rebuilds from a bounded log",
        description="Store a consistent snapshot of the Redis state the command log "
        "determines (Redis's own point-in-time copy) with each shard's position, in the "
        "JetStream object store ZM_SNAPSHOTS; keep the newest ZEROMEM_SNAPSHOT_KEEP. "
        "`zeromem rebuild` starts from the latest.",
    )
    snapshot.add_argument(
        "--every",
        type=arg.number(0),
        metavar="SECONDS",
        help="keep running: one now and one every SECONDS (0: ZEROMEM_SNAPSHOT_INTERVAL_S)",
    )
    snapshot.add_argument("--list", action="store_true", help="list the stored snapshots")
    snapshot.add_argument("--json", action="store_true", help="print JSON")
    snapshot.set_defaults(func=cmd_snapshot)

    erase = sub.add_parser(
        "erase-tenant",
        help="erase a tenant everywhere, its command log included",
        description="Purge TENANT's commands from the command log and its change feed, "
        "audit trail and dead letters; delete its Redis state and its owners' data keys; "
        "rewrite Redis's append-only file. A later rebuild accounts for the purged "
        "commands. Revoke the tenant's credentials first.",
    )
    erase.add_argument("tenant", metavar="TENANT", type=arg.tenant)
    erase.add_argument("--yes", action="store_true", help="do it (there is no undo)")
    erase.add_argument("--json", action="store_true", help="print JSON")
    erase.set_defaults(func=cmd_erase_tenant)
