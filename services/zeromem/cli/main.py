"""The ``zeromem`` command line.

Service commands (``up``, ``worker``, ``serve``) run processes; client commands (``put``,
``get``, ``list``, ``delete``) talk to a running stack exactly as an agent's SDK does. Run
from the directory where ``zeromem up`` runs, they find it without any flag.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from zeromem.schemas import MemoryItem, MemoryType
from zeromem.settings import Settings

ENVIRONMENT_HELP = """environment:
  ZEROMEM_NATS_URL, ZEROMEM_REDIS_URL  servers to use (NATS_URL / REDIS_URL also work);
                                       unset: the stack `zeromem up` runs in this directory
  ZEROMEM_NATS_CREDS (NATS_CREDS)      the creds file this process connects with
  ZEROMEM_REDIS_USERNAME/_PASSWORD     its Redis ACL user (or in the URL: redis://user:pw@...)
  ZEROMEM_SHARDS                       shard count, the same for every publisher and worker
"""

EXIT_CONFLICT = 3
EXIT_NOT_FOUND = 4
EXIT_UNAVAILABLE = 5


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        data_dir=getattr(args, "data_dir", None), shards=getattr(args, "shards", None)
    )


def _resolved_settings(args: argparse.Namespace) -> Settings:
    """Settings with URLs: from the environment, else from the running embedded stack."""
    settings = _settings(args)
    if settings.nats_url and settings.redis_url:
        return settings
    from zeromem.embedded import find_running_stack

    info = find_running_stack(settings.data_dir)
    if info is None:
        sys.exit("no zeromem stack found: run `zeromem up`, or set NATS_URL and REDIS_URL")
    settings = settings.with_urls(
        settings.nats_url or info.nats_url, settings.redis_url or info.redis_url
    )
    if info.auth_dir and not settings.auth_dir:
        from dataclasses import replace

        settings = replace(settings, auth_dir=info.auth_dir)
    return settings


def _admin_settings(args: argparse.Namespace) -> Settings:
    """Resolved settings as the operator's admin identity (rebuild, archive's survey of
    Redis), when the local authority is at hand and no credential is configured."""
    settings = _resolved_settings(args)
    if settings.nats_creds or settings.nats_token:
        return settings
    from zeromem.auth.credentials import local_authority
    from zeromem.embedded.stack import settings_for_role

    return settings_for_role(settings, local_authority(settings), "admin")


def _run_service(main: Callable[[], Awaitable[None]]) -> int:
    """Run a service coroutine until SIGINT/SIGTERM, then let it clean up."""

    async def runner() -> None:
        task = asyncio.create_task(main())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        import uvloop  # a faster event loop: the services spend most of their time in I/O
    except ImportError:  # not on every platform; the standard loop works the same
        asyncio.run(runner())
    else:
        uvloop.run(runner())
    return 0


# --- service commands ------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    from zeromem.cli.stack import run_up

    return run_up(
        _settings(args),
        workers=args.workers,
        readers=args.readers,
        metrics_port=args.metrics_port,
        inspect_port=args.inspect_port,
    )


def cmd_inspect(args: argparse.Namespace) -> int:
    from zeromem.inspect.server import run_inspect
    from zeromem.inspect.settings import InspectSettings

    inspect = InspectSettings.from_env(host=args.host, port=args.port, tokens_file=args.tokens)
    return run_inspect(_resolved_settings(args), inspect, link=not args.no_link)


def cmd_worker(args: argparse.Namespace) -> int:
    from zeromem.worker.service import run_worker

    settings = _resolved_settings(args)
    return _run_service(lambda: run_worker(settings, args.index, args.count))


def cmd_mcp(args: argparse.Namespace) -> int:
    from zeromem.mcp_server import run_mcp

    settings = _settings(args)
    return run_mcp(
        settings, args.transport, args.host, args.port, args.tenant, args.agent, args.tokens
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from zeromem.serve import run_read_services

    settings = _resolved_settings(args)
    return _run_service(lambda: run_read_services(settings))


# --- client commands -------------------------------------------------------------------


def _client_call(args: argparse.Namespace, body: Callable[[Any], Awaitable[int]]) -> int:
    from zeromem.sdk import MemoryClient, ZeromemError

    async def run() -> int:
        settings = _resolved_settings(args)
        # With a credential of its own (ZEROMEM_CREDS...), tenant and agent are the
        # credential's; otherwise 'default' and 'cli' unless given.
        own = bool(settings.nats_creds or settings.nats_token)
        client = await MemoryClient.connect(
            settings.nats_url,
            tenant=args.tenant or (None if own else "default"),
            agent=args.agent or (None if own else "cli"),
            shards=settings.shards,
            settings=settings,
        )
        try:
            return await body(client)
        finally:
            await client.close()

    import nats.errors

    from zeromem.auth.authority import AuthError

    try:
        return asyncio.run(run())
    except (ZeromemError, AuthError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except nats.errors.Error as exc:  # e.g. the server refused the credential
        print(f"error: cannot use NATS: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE


def _item_json(item: MemoryItem) -> dict[str, Any]:
    import msgspec

    return msgspec.to_builtins(item)


def _print_receipt(args: argparse.Namespace, receipt: Any) -> int:
    if args.json:
        import msgspec

        print(
            json.dumps(
                {
                    "command_id": receipt.command_id,
                    "key": receipt.key,
                    "status": receipt.status,
                    "result": msgspec.to_builtins(receipt.result),
                }
            )
        )
    elif receipt.status == "applied":
        print(f"applied {receipt.key} version {receipt.version}")
    elif receipt.status == "conflict":
        print(
            f"conflict on {receipt.key}: expected version {receipt.result.expected_version}, "
            f"current version {receipt.result.current_version}"
        )
    elif receipt.status == "rejected":
        print(f"rejected {receipt.key}: {receipt.reason}")
    else:
        print(f"{receipt.status} {receipt.key} (command {receipt.command_id})")
    return {"conflict": EXIT_CONFLICT, "rejected": EXIT_NOT_FOUND}.get(receipt.status, 0)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # a bare word is a string; JSON is taken as JSON


def cmd_put(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        receipt = await client.put(
            args.key,
            _parse_value(args.value),
            content=args.content,
            type=args.type,
            tags=args.tag or (),
            references=args.ref or (),
            ttl=args.ttl,
            refresh_on_read=args.refresh_on_read,
            sensitive=args.sensitive,
            expected_version=args.expected_version,
            wait=args.wait,
        )
        return _print_receipt(args, receipt)

    return _client_call(args, body)


def cmd_delete(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        receipt = await client.delete(
            args.key, expected_version=args.expected_version, wait=args.wait
        )
        return _print_receipt(args, receipt)

    return _client_call(args, body)


def cmd_get(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        item = await client.get(args.key)
        if item is None:
            if args.json:
                print(json.dumps({"found": False, "key": args.key}))
            else:
                print(f"not found: {args.key}", file=sys.stderr)
            return EXIT_NOT_FOUND
        if args.json:
            print(json.dumps({"found": True, "item": _item_json(item)}))
        else:
            print(f"{item.key}  version {item.version}  [{item.type.value}]")
            print(f"  value:   {json.dumps(item.value, ensure_ascii=False)}")
            print(f"  content: {item.content}")
            if item.tags:
                print(f"  tags:    {', '.join(item.tags)}")
            if item.expires_at:
                print(f"  expires: {item.expires_at:.0f}")
        return 0

    return _client_call(args, body)


def cmd_list(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        page = await client.list(args.prefix, cursor=args.cursor, limit=args.limit)
        if args.json:
            print(
                json.dumps(
                    {"items": [_item_json(i) for i in page.items], "next_cursor": page.next_cursor}
                )
            )
            return 0
        for item in page.items:
            print(f"{item.key}  v{item.version}  [{item.type.value}]  {item.content}")
        if page.next_cursor:
            print(f"(more: --cursor {page.next_cursor})")
        return 0

    return _client_call(args, body)


def cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from zeromem.sdk.importer import ImportLineError, import_file

    path = Path(args.file)
    if not path.is_file():
        print(f"error: no such file: {path}", file=sys.stderr)
        return 2
    state_dir = _settings(args).data_dir / "imports"
    size = path.stat().st_size

    async def body(client: Any) -> int:
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            transient=args.json,
            disable=args.json,
        ) as progress:
            task = progress.add_task(f"importing {path.name}", total=size)
            try:
                report = await import_file(
                    client,
                    path,
                    state_dir=state_dir,
                    wait_applied=not args.no_wait,
                    restart=args.restart,
                    on_progress=lambda done, total: progress.update(task, completed=done),
                )
            except ImportLineError as exc:
                print(
                    f"error: {exc} (the lines before it are imported; fix it and run "
                    "again to resume)",
                    file=sys.stderr,
                )
                return 2
        if args.json:
            print(
                json.dumps(
                    {
                        "lines": report.lines,
                        "sent": report.sent,
                        "resumed_at": report.resumed_at,
                        "rejected": report.rejected,
                    }
                )
            )
        else:
            resumed = f", resumed after line {report.resumed_at}" if report.resumed_at else ""
            waited = "" if args.no_wait else ", applied by the workers"
            print(
                f"imported {path.name}: {report.lines} lines, {report.sent} sent{resumed}{waited}"
            )
            for reason in report.rejected:
                print(f"  rejected: {reason}", file=sys.stderr)
        return 1 if report.rejected else 0

    return _client_call(args, body)


def cmd_recall(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        since = time.time() - args.since_days * 86400 if args.since_days else None
        reply = await client.recall(
            args.query,
            owners=args.owner or (),
            prefix=args.prefix,
            types=args.type or (),
            tags=args.tag or (),
            since=since,
            k=args.k,
            budget=args.budget,
            strategy=json.loads(args.strategy) if args.strategy else None,
            explain=args.explain,
            include_archived=args.include_archived,
        )
        if args.json:
            import msgspec

            print(json.dumps(msgspec.to_builtins(reply), ensure_ascii=False))
            return 0
        from zeromem.cli.views import print_recall

        print_recall(reply, args.explain)
        return 0

    return _client_call(args, body)


def cmd_stats(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        since = time.time() - args.hours * 3600
        reply = await client.stats(since=since)
        if args.json:
            import msgspec

            print(json.dumps(msgspec.to_builtins(reply)))
            return 0
        from zeromem.cli.views import print_stats, save_stats_png

        print_stats(client.tenant, reply.rows)
        if args.png:
            save_stats_png(client.tenant, reply.rows, args.png)
            print(f"saved {args.png}")
        return 0

    return _client_call(args, body)


# --- the parser ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zeromem",
        description="Zero-token memory for agent fleets: commands over NATS, state in Redis.",
    )
    parser.add_argument(
        "--data-dir", help="where `up` keeps its servers' data (default ./.zeromem)"
    )
    parser.add_argument(
        "--shards", type=int, help="shard count (default 16; all parties must agree)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser(
        "up",
        help="run the whole stack on this machine",
        description="Start NATS (JetStream) and Redis unless NATS_URL/REDIS_URL "
        "are set, then the workers and the read services. Ctrl-C stops all.",
    )
    up.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    up.add_argument("--readers", type=int, default=1, help="read-service processes (default 1)")
    up.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve Prometheus metrics from this port on (one port per process)",
    )
    up.add_argument(
        "--inspect-port",
        type=int,
        default=0,
        help="also serve the inspector (`zeromem inspect`) on this port",
    )
    up.set_defaults(func=cmd_up)

    worker = sub.add_parser(
        "worker",
        help="apply the commands of a set of shards",
        description="Own shards s where s %% COUNT == INDEX (a StatefulSet "
        "ordinal maps to --index) and apply their commands to Redis.",
    )
    worker.add_argument("--index", type=int, default=0, help="this worker's ordinal (default 0)")
    worker.add_argument("--count", type=int, default=1, help="number of workers (default 1)")
    worker.set_defaults(func=cmd_worker)

    serve = sub.add_parser(
        "serve",
        help="answer get, list and recall requests",
        description="The read services: exact get/list and ranked recall, "
        "in NATS queue groups so replicas share the load.",
    )
    serve.set_defaults(func=cmd_serve)
    mcp = sub.add_parser(
        "mcp",
        help="serve the memory tools to MCP clients",
        description="The memory tools (write, read, update, delete, list, "
        "search, recall) over the Model Context Protocol, on stdio or "
        "streamable HTTP at http://HOST:PORT/mcp.",
    )
    mcp.add_argument("--transport", default="stdio", choices=["stdio", "http"])
    mcp.add_argument("--host", default="127.0.0.1")
    mcp.add_argument("--port", type=int, default=8765)
    mcp.add_argument("--tenant", help="tenant (stdio; default: the credential's, else 'default')")
    mcp.add_argument(
        "--agent",
        help="agent id recorded with every write (stdio; default: the credential's, else 'mcp')",
    )
    mcp.add_argument(
        "--tokens",
        help="bearer token file for --transport http (default: "
        "mcp-tokens.json of the local authority)",
    )
    mcp.set_defaults(func=cmd_mcp)

    inspect = sub.add_parser(
        "inspect",
        help="a web page: memories, recall explain, live, savings",
        description="Serve the inspector: what the fleet remembers, why a recall chose what "
        "it chose, what it saved. Read-only; every viewer reads through its own credential "
        "(zeromem auth inspect-token).",
    )
    inspect.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    inspect.add_argument("--port", type=int, help="port (default 8766)")
    inspect.add_argument(
        "--tokens", help="token file (default: inspect-tokens.json of the local authority)"
    )
    inspect.add_argument(
        "--no-link",
        action="store_true",
        help="print no operator login link even where the authority is at hand",
    )
    inspect.set_defaults(func=cmd_inspect)

    for service in (worker, serve, mcp, inspect):
        service.epilog = ENVIRONMENT_HELP
        service.formatter_class = argparse.RawDescriptionHelpFormatter

    def client_parser(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=description)
        p.add_argument("--tenant", help="tenant (default: the credential's, else 'default')")
        p.add_argument(
            "--agent",
            help="agent id recorded with the command (default: the credential's, else 'cli')",
        )
        p.add_argument("--json", action="store_true", help="print JSON")
        return p

    put = client_parser(
        "put",
        "create or replace a memory",
        "Publish a put command. KEY is namespace:owner:name (e.g. "
        "user:u1:pref_lang); VALUE is JSON, or a plain string.",
    )
    put.add_argument("key")
    put.add_argument("value")
    put.add_argument("--content", help="summary of at most 200 characters (derived if absent)")
    put.add_argument("--type", default="fact", choices=[t.value for t in MemoryType])
    put.add_argument("--tag", action="append", help="a tag (repeatable)")
    put.add_argument("--ref", action="append", help="key of a related memory (repeatable)")
    put.add_argument("--ttl", type=float, help="seconds until it expires")
    put.add_argument(
        "--refresh-on-read",
        action="store_true",
        help="sliding expiry: every read pushes the expiry --ttl further",
    )
    put.add_argument(
        "--sensitive",
        action="store_true",
        help="keep its content and value out of the audit trail and the logs",
    )
    put.add_argument(
        "--expected-version",
        type=int,
        help="apply only at this version (0: only if the key does not exist)",
    )
    put.add_argument(
        "--wait",
        default="applied",
        choices=["none", "stored", "applied"],
        help="how long to wait (default applied: print the new version)",
    )
    put.set_defaults(func=cmd_put)

    import_ = client_parser(
        "import",
        "bulk-load memories from a JSON Lines file, with their times",
        "Put one memory per line of FILE (JSON: key, value, content, type, "
        "tags, references, created_at, updated_at...) with its original "
        "times, at full write speed. Idempotent: running it again sends "
        "nothing twice; an interrupted run resumes where it stopped. "
        "Needs the right to publish on the tenant's import subjects.",
    )
    import_.add_argument("file")
    import_.add_argument(
        "--no-wait",
        action="store_true",
        help="return once JetStream stored every line, before the workers applied them",
    )
    import_.add_argument(
        "--restart",
        action="store_true",
        help="ignore an earlier run's progress and send every line again",
    )
    import_.set_defaults(func=cmd_import)

    get = client_parser("get", "read one memory", "Print the memory at KEY (exit 4 if none).")
    get.add_argument("key")
    get.set_defaults(func=cmd_get)

    list_ = client_parser(
        "list",
        "list memories by key prefix",
        "Print the memories whose key starts with PREFIX, in key order.",
    )
    list_.add_argument("prefix", nargs="?", default="")
    list_.add_argument("--limit", type=int, default=50)
    list_.add_argument("--cursor", default="", help="continue after this key")
    list_.set_defaults(func=cmd_list)

    recall = client_parser(
        "recall",
        "the memories that matter for a query, within a budget",
        "Rank the memories of the given owners for QUERY and pack the best "
        "into --budget tokens. --explain shows every candidate's scores "
        "and why it was kept or cut.",
    )
    recall.add_argument("query", nargs="?", default="")
    recall.add_argument(
        "--owner", action="append", help="owner in scope, e.g. user:u1 (repeatable)"
    )
    recall.add_argument("--prefix", default="", help="only keys with this prefix")
    recall.add_argument("--type", action="append", choices=[t.value for t in MemoryType])
    recall.add_argument("--tag", action="append", help="only memories with this tag (repeatable)")
    recall.add_argument("--since-days", type=float, help="only memories updated in the last N days")
    recall.add_argument("--k", type=int, default=5, help="memories to return (default 5)")
    recall.add_argument("--budget", type=int, default=1500, help="token budget (default 1500)")
    recall.add_argument("--strategy", help='JSON, e.g. \'{"name": "no_decay"}\'')
    recall.add_argument("--explain", action="store_true", help="show every candidate's scores")
    recall.add_argument(
        "--include-archived", action="store_true", help="also search the archive tier"
    )
    recall.set_defaults(func=cmd_recall)

    stats = client_parser(
        "stats",
        "token savings per agent, with a chart",
        "Tokens recall injected against what injecting every memory in scope "
        "(baseline) or the agents' whole histories would have cost.",
    )
    stats.add_argument("--hours", type=float, default=24, help="period to show (default 24)")
    stats.add_argument("--png", help="also save the chart to this PNG file")
    stats.set_defaults(func=cmd_stats)

    delete = client_parser("delete", "delete a memory", "Publish a delete command for KEY.")
    delete.add_argument("key")
    delete.add_argument("--expected-version", type=int)
    delete.add_argument("--wait", default="applied", choices=["none", "stored", "applied"])
    delete.set_defaults(func=cmd_delete)

    from zeromem.cli.auth import add_auth_parser
    from zeromem.cli.lifecycle import add_lifecycle_parsers

    add_lifecycle_parsers(sub, client_parser)
    add_auth_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
