"""The ``zeromem`` command line.

Service commands (``up``, ``worker``, ``serve``) run processes; client commands (``put``,
``get``, ``list``, ``delete``...) talk to a running stack exactly as an agent's SDK does.
Run from the directory where ``zeromem up`` runs (or below it), they find it without any
flag. Every mistake is one line on stderr and a documented exit code (``cli.common``).
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

from zeromem.cli import arguments as arg
from zeromem.cli.auth import add_auth_parser
from zeromem.cli.common import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    CliError,
    client_call,
    print_json,
    report_error,
    resolved_settings,
    settings_of,
    write_command,
)
from zeromem.cli.lifecycle import add_lifecycle_parsers
from zeromem.extras import require
from zeromem.schemas import FeedbackKind, MemoryItem, MemoryType
from zeromem.settings import Settings

ENVIRONMENT_HELP = """environment:
  ZEROMEM_NATS_URL, ZEROMEM_REDIS_URL  servers to use (NATS_URL / REDIS_URL also work);
                                       unset: the stack `zeromem up` runs in this directory
  ZEROMEM_NATS_CREDS (NATS_CREDS)      the creds file this process connects with
  ZEROMEM_REDIS_USERNAME/_PASSWORD     its Redis ACL user (or in the URL: redis://user:pw@...)
  ZEROMEM_SHARDS                       shard count, the same for every publisher and worker
"""

WAITS = ["none", "stored", "applied"]


class _JsonLogFormatter(logging.Formatter):
    """One JSON object per log line (``--json`` on the service commands)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(json_lines: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        _JsonLogFormatter()
        if json_lines
        else logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    )
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def _run_service(main: Callable[[], Awaitable[None]], json_lines: bool = False) -> int:
    """Run a service coroutine until SIGINT/SIGTERM/SIGHUP, then let it clean up."""

    async def runner() -> None:
        task = asyncio.create_task(main())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    configure_logging(json_lines)
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
        settings_of(args),
        workers=args.workers,
        readers=args.readers,
        metrics_port=args.metrics_port,
        inspect_port=args.inspect_port,
        json_output=args.json,
        data_dir_given=bool(args.data_dir),
    )


def cmd_inspect(args: argparse.Namespace) -> int:
    from zeromem.inspect.server import run_inspect

    settings = resolved_settings(args)
    flags = {"host": args.host, "port": args.port, "tokens_file": args.tokens}
    inspect = settings.with_(inspect={k: v for k, v in flags.items() if v is not None}).inspect
    return run_inspect(settings, inspect, link=not args.no_link)


def cmd_worker(args: argparse.Namespace) -> int:
    from zeromem.worker.service import run_worker

    if not 0 <= args.index < args.count:
        raise CliError(
            f"--index {args.index} is not below --count {args.count}", "0 <= INDEX < COUNT"
        )
    settings = resolved_settings(args)
    return _run_service(lambda: run_worker(settings, args.index, args.count), args.json)


def cmd_mcp(args: argparse.Namespace) -> int:
    require("mcp", "mcp", "`zeromem mcp`")
    from zeromem.mcp_server import run_mcp

    configure_logging(args.json)
    settings = settings_of(args)
    return run_mcp(
        settings, args.transport, args.host, args.port, args.tenant, args.agent, args.tokens
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from zeromem.serve import run_read_services

    settings = resolved_settings(args)
    return _run_service(lambda: run_read_services(settings), args.json)


# --- client commands -------------------------------------------------------------------


def _item_json(item: MemoryItem) -> dict[str, Any]:
    import msgspec

    return msgspec.to_builtins(item)


def cmd_put(args: argparse.Namespace) -> int:
    value = arg.parse_value(arg.read_text(args, "value", "VALUE"), args.string)
    content = arg.fit_content(args.content, args.summarise)

    return write_command(
        args,
        lambda client: client.put(
            args.key,
            value,
            content=content,
            type=args.type,
            tags=args.tag or (),
            references=args.ref or (),
            ttl=args.ttl,
            refresh_on_read=args.refresh_on_read,
            sensitive=args.sensitive,
            expected_version=args.expected_version,
            wait=args.wait,
        ),
    )


def cmd_patch(args: argparse.Namespace) -> int:
    patch = arg.parse_value(arg.read_text(args, "patch", "PATCH"), False, "PATCH")
    if not isinstance(patch, dict):
        raise CliError(
            "PATCH must be a JSON object (a merge patch: its keys replace the value's, "
            "null removes one)",
            'e.g. zeromem patch user:u1:profile \'{"city": "Lyon"}\'; `put` replaces a value',
        )
    content = arg.fit_content(args.content, args.summarise)

    return write_command(
        args,
        lambda client: client.patch(
            args.key,
            patch,
            content=content,
            tags=args.tag,
            expected_version=args.expected_version,
            wait=args.wait,
        ),
    )


def cmd_expire(args: argparse.Namespace) -> int:
    if (args.ttl is None) == (not args.never):
        raise CliError("say when: --ttl SECONDS, or --never to keep it forever", "pass one of them")

    return write_command(
        args,
        lambda client: client.expire(
            args.key,
            None if args.never else args.ttl,
            expected_version=args.expected_version,
            refresh_on_read=args.refresh_on_read,
            wait=args.wait,
        ),
    )


def cmd_feedback(args: argparse.Namespace) -> int:
    return write_command(args, lambda client: client.feedback(args.key, args.kind, wait=args.wait))


def cmd_delete(args: argparse.Namespace) -> int:
    return write_command(
        args,
        lambda client: client.delete(
            args.key, expected_version=args.expected_version, wait=args.wait
        ),
    )


def cmd_get(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        item = await client.get(args.key)
        if item is None:
            if args.json:
                print_json({"found": False, "key": args.key})
            else:
                print(f"not found: {args.key}", file=sys.stderr)
            return EXIT_NOT_FOUND
        if args.json:
            print_json({"found": True, "item": _item_json(item)})
        else:
            print(f"{item.key}  version {item.version}  [{item.type.value}]")
            print(f"  value:   {json.dumps(item.value, ensure_ascii=False)}")
            print(f"  content: {item.content}")
            if item.tags:
                print(f"  tags:    {', '.join(item.tags)}")
            if item.expires_at:
                print(f"  expires: {item.expires_at:.0f}")
        return 0

    return client_call(args, body)


def cmd_list(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        page = await client.list(args.prefix, cursor=args.cursor, limit=args.limit)
        if args.json:
            print_json(
                {"items": [_item_json(i) for i in page.items], "next_cursor": page.next_cursor}
            )
            return 0
        for item in page.items:
            print(f"{item.key}  v{item.version}  [{item.type.value}]  {item.content}")
        if page.next_cursor:
            print(f"(more: --cursor {page.next_cursor})")
        return 0

    return client_call(args, body)


def cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from zeromem.sdk.importer import ImportLineError, import_file

    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"no such file: {path}", "give the path of a JSON Lines file")
    size = path.stat().st_size

    async def body(client: Any) -> int:
        state_dir = resolved_settings(args).data_dir / "imports"
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
                raise CliError(
                    str(exc), "the lines before it are imported; fix it and run again to resume"
                ) from None
        if args.json:
            print_json(
                {
                    "lines": report.lines,
                    "sent": report.sent,
                    "resumed_at": report.resumed_at,
                    "rejected": report.rejected,
                }
            )
        else:
            resumed = f", resumed after line {report.resumed_at}" if report.resumed_at else ""
            waited = "" if args.no_wait else ", applied by the workers"
            print(
                f"imported {path.name}: {report.lines} lines, {report.sent} sent{resumed}{waited}"
            )
            for reason in report.rejected:
                print(f"  rejected: {reason}", file=sys.stderr)
        return EXIT_FAILED if report.rejected else 0

    return client_call(args, body)


def _strategy(text: str) -> dict[str, Any]:
    """``--strategy``: a JSON object the recall service can build (checked here)."""
    import argparse as _argparse

    from zeromem.recall.ranking import StrategyError, build_strategy

    spec = arg.json_object(text)
    try:
        build_strategy(spec)
    except StrategyError as exc:
        raise _argparse.ArgumentTypeError(str(exc)) from None
    return spec


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
            strategy=args.strategy,
            explain=args.explain,
            include_archived=args.include_archived,
        )
        if args.json:
            import msgspec

            print_json(msgspec.to_builtins(reply))
            return 0
        from zeromem.cli.views import print_recall

        print_recall(reply, args.explain)
        return 0

    return client_call(args, body)


def cmd_stats(args: argparse.Namespace) -> int:
    if args.png:
        require("matplotlib", "charts", "`zeromem stats --png`")

    async def body(client: Any) -> int:
        since = time.time() - args.hours * 3600
        reply = await client.stats(since=since)
        if args.json:
            import msgspec

            print_json(msgspec.to_builtins(reply))
            return 0
        from zeromem.cli.views import print_stats, save_stats_png

        print_stats(client.tenant, reply.rows)
        if args.png:
            save_stats_png(client.tenant, reply.rows, args.png)
            print(f"saved {args.png}")
        return 0

    return client_call(args, body)


# --- the parser ------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """argparse, with its mistakes in the CLI's one-line style (exit 2)."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_USAGE, f"error: {message}; see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="zeromem",
        description="Zero-token memory for agent fleets: commands over NATS, state in Redis.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-dir",
        help="where `up` keeps its servers' data (default ./.zeromem; the other commands "
        "look for it here and in the parent directories)",
    )
    parser.add_argument(
        "--shards",
        type=arg.number(1, 4096, integer=True),
        help="shard count (default 16; all parties must agree)",
    )
    parser.add_argument(
        "--debug", action="store_true", help="print the traceback of an error (any position)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def service_parser(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help_,
            description=description,
            epilog=ENVIRONMENT_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return p

    up = sub.add_parser(
        "up",
        help="run the whole stack on this machine",
        description="Start NATS (JetStream) and Redis unless NATS_URL/REDIS_URL "
        "are set, then the workers and the read services; 'ready' once the workers hold "
        "every shard and the read services answer. Ctrl-C (or closing the terminal) stops "
        "all; the children also die if `up` is killed. One `up` per data directory.",
    )
    count = arg.number(1, 256, integer=True)
    up.add_argument("--workers", type=count, default=2, help="worker processes (default 2)")
    up.add_argument("--readers", type=count, default=1, help="read-service processes (default 1)")
    port = arg.number(0, 65535, integer=True)
    up.add_argument(
        "--metrics-port",
        type=port,
        default=0,
        help="serve Prometheus metrics from this port on (one port per process)",
    )
    up.add_argument(
        "--inspect-port",
        type=port,
        default=0,
        help="also serve the inspector (`zeromem inspect`) on this port",
    )
    up.add_argument(
        "--json",
        action="store_true",
        help="print the ready banner as one JSON object (and the children log JSON lines)",
    )
    up.set_defaults(func=cmd_up)

    worker = service_parser(
        "worker",
        "apply the commands of a set of shards",
        "Own shards s where s % COUNT == INDEX (a StatefulSet "
        "ordinal maps to --index) and apply their commands to Redis.",
    )
    worker.add_argument(
        "--index",
        type=arg.number(0, integer=True),
        default=0,
        help="this worker's ordinal (default 0)",
    )
    worker.add_argument("--count", type=count, default=1, help="number of workers (default 1)")
    worker.add_argument("--json", action="store_true", help="log JSON lines")
    worker.set_defaults(func=cmd_worker)

    serve = service_parser(
        "serve",
        "answer get, list and recall requests",
        "The read services: exact get/list and ranked recall, "
        "in NATS queue groups so replicas share the load.",
    )
    serve.add_argument("--json", action="store_true", help="log JSON lines")
    serve.set_defaults(func=cmd_serve)

    mcp = service_parser(
        "mcp",
        "serve the memory tools to MCP clients",
        "The memory tools (write, read, update, delete, list, "
        "search, recall) over the Model Context Protocol, on stdio or "
        "streamable HTTP at http://HOST:PORT/mcp. Needs zeromem[mcp].",
    )
    mcp.add_argument("--transport", default="stdio", choices=["stdio", "http"])
    mcp.add_argument("--host", default="127.0.0.1")
    mcp.add_argument("--port", type=port, default=8765)
    mcp.add_argument(
        "--tenant",
        type=arg.tenant,
        help="tenant (stdio; default: the credential's, else 'default')",
    )
    mcp.add_argument(
        "--agent",
        type=arg.agent,
        help="agent id recorded with every write (stdio; default: the credential's, else 'mcp')",
    )
    mcp.add_argument(
        "--tokens",
        help="bearer token file for --transport http (default: "
        "mcp-tokens.json of the local authority)",
    )
    mcp.add_argument(
        "--json", action="store_true", help="log JSON lines on stderr (stdout is the protocol)"
    )
    mcp.set_defaults(func=cmd_mcp)

    inspect = service_parser(
        "inspect",
        "a web page: memories, recall explain, live, savings",
        "Serve the inspector: what the fleet remembers, why a recall chose what "
        "it chose, what it saved. Read-only; every viewer reads through its own credential "
        "(zeromem auth inspect-token).",
    )
    inspect.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    inspect.add_argument("--port", type=port, help="port (default 8766)")
    inspect.add_argument(
        "--tokens", help="token file (default: inspect-tokens.json of the local authority)"
    )
    inspect.add_argument(
        "--no-link",
        action="store_true",
        help="print no operator login link even where the authority is at hand",
    )
    inspect.set_defaults(func=cmd_inspect)

    def client_parser(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help_,
            description=description,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "--tenant", type=arg.tenant, help="tenant (default: the credential's, else 'default')"
        )
        p.add_argument(
            "--agent",
            type=arg.agent,
            help="agent id recorded with the command (default: the credential's, else 'cli')",
        )
        p.add_argument("--json", action="store_true", help="print JSON")
        return p

    def value_arguments(p: argparse.ArgumentParser, name: str) -> None:
        p.set_defaults(late_positional=name.lower())
        p.add_argument(
            name.lower(),
            metavar=name,
            nargs="?",
            help="JSON, or - to read it from stdin (or --file PATH)",
        )
        p.add_argument("--file", metavar="PATH", help=f"read {name} from this file (- for stdin)")

    def content_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--content",
            help="summary of at most 200 characters (derived from the value if absent); "
            "longer is refused unless --summarise",
        )
        p.add_argument(
            "--summarise",
            action="store_true",
            help="store the encoder's summary of an over-long --content (with a warning)",
        )

    def write_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--expected-version",
            type=arg.number(0, integer=True),
            help="apply only at this version (0: only if the key does not exist)",
        )
        p.add_argument(
            "--wait",
            default="applied",
            choices=WAITS,
            help="how long to wait (default applied: print the new version)",
        )

    put = client_parser(
        "put",
        "create or replace a memory",
        "Publish a put command. KEY is namespace:owner:name (e.g. user:u1:pref_lang); "
        'VALUE is JSON (\'"zh"\', \'{"lang": "zh"}\', 42), read from stdin with -, '
        "from a file with --file PATH; --string stores it as text instead.",
    )
    put.add_argument("key", metavar="KEY", type=arg.memory_key)
    value_arguments(put, "VALUE")
    put.add_argument(
        "--string", action="store_true", help="VALUE is text, stored as a string (not JSON)"
    )
    content_arguments(put)
    put.add_argument("--type", default="fact", choices=[t.value for t in MemoryType])
    put.add_argument("--tag", action="append", type=arg.tag, help="a tag (repeatable)")
    put.add_argument(
        "--ref", action="append", type=arg.memory_key, help="key of a related memory (repeatable)"
    )
    put.add_argument("--ttl", type=arg.number(0, above=True), help="seconds until it expires (> 0)")
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
    write_arguments(put)
    put.set_defaults(func=cmd_put)

    patch = client_parser(
        "patch",
        "change part of a memory's value",
        "Merge PATCH (a JSON object, RFC 7396: its keys replace the value's, null removes "
        "one) into the memory at KEY. PATCH from the argument, stdin (-) or --file PATH.",
    )
    patch.add_argument("key", metavar="KEY", type=arg.memory_key)
    value_arguments(patch, "PATCH")
    content_arguments(patch)
    patch.add_argument("--tag", action="append", type=arg.tag, help="replace the tags (repeatable)")
    write_arguments(patch)
    patch.set_defaults(func=cmd_patch)

    expire = client_parser(
        "expire",
        "set or clear a memory's time to live",
        "Let the memory at KEY live --ttl more seconds, or keep it forever (--never).",
    )
    expire.add_argument("key", metavar="KEY", type=arg.memory_key)
    expire.add_argument("--ttl", type=arg.number(0, above=True), help="seconds from now (> 0)")
    expire.add_argument("--never", action="store_true", help="clear the expiry")
    expire.add_argument(
        "--refresh-on-read",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="turn sliding expiry on or off (default: unchanged)",
    )
    write_arguments(expire)
    expire.set_defaults(func=cmd_expire)

    feedback = client_parser(
        "feedback",
        "mark a memory liked, disliked or important",
        "Count a piece of feedback on the memory at KEY; recall weighs memories by it.",
    )
    feedback.add_argument("key", metavar="KEY", type=arg.memory_key)
    feedback.add_argument("kind", metavar="KIND", choices=[k.value for k in FeedbackKind])
    feedback.add_argument("--wait", default="applied", choices=WAITS)
    feedback.set_defaults(func=cmd_feedback)

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
    get.add_argument("key", metavar="KEY", type=arg.memory_key)
    get.set_defaults(func=cmd_get)

    list_ = client_parser(
        "list",
        "list memories by key prefix",
        "Print the memories whose key starts with PREFIX, in key order.",
    )
    list_.add_argument("prefix", nargs="?", default="")
    list_.add_argument("--limit", type=arg.number(1, 1000, integer=True), default=50)
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
        "--owner",
        action="append",
        type=arg.owner,
        help="owner in scope, e.g. user:u1 (repeatable)",
    )
    recall.add_argument("--prefix", default="", help="only keys with this prefix")
    recall.add_argument("--type", action="append", choices=[t.value for t in MemoryType])
    recall.add_argument("--tag", action="append", help="only memories with this tag (repeatable)")
    recall.add_argument(
        "--since-days",
        type=arg.number(0, above=True),
        help="only memories updated in the last N days",
    )
    recall.add_argument(
        "--k",
        type=arg.number(1, 100, integer=True),
        default=5,
        help="memories to return (default 5)",
    )
    recall.add_argument(
        "--budget",
        type=arg.number(1, 200_000, integer=True),
        default=1500,
        help="token budget (default 1500)",
    )
    recall.add_argument("--strategy", type=_strategy, help='JSON, e.g. \'{"name": "no_decay"}\'')
    recall.add_argument("--explain", action="store_true", help="show every candidate's scores")
    recall.add_argument(
        "--include-archived", action="store_true", help="also search the archive tier"
    )
    recall.set_defaults(func=cmd_recall)

    stats = client_parser(
        "stats",
        "token savings per agent, with a chart",
        "Tokens recall injected against what injecting every memory in scope "
        "(baseline) or the agents' whole histories would have cost. --png needs "
        "zeromem[charts].",
    )
    stats.add_argument(
        "--hours", type=arg.number(0, above=True), default=24, help="period to show (default 24)"
    )
    stats.add_argument("--png", help="also save the chart to this PNG file")
    stats.set_defaults(func=cmd_stats)

    delete = client_parser("delete", "delete a memory", "Publish a delete command for KEY.")
    delete.add_argument("key", metavar="KEY", type=arg.memory_key)
    write_arguments(delete)
    delete.set_defaults(func=cmd_delete)

    add_lifecycle_parsers(sub, client_parser)
    add_auth_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug anywhere before a `--`: the traceback of an error, on top of its line
    cut = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:cut]
    if "--debug" in argv[:cut]:
        argv.remove("--debug")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse gives an optional positional (put's VALUE) nothing when options come
    # between it and KEY (`put KEY --content C VALUE`); the one word left over is it.
    late = getattr(args, "late_positional", None)
    if late and getattr(args, late) is None and len(extra) == 1 and extra[0][:2] != "--":
        setattr(args, late, extra.pop())
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.debug = debug
    try:
        # The one place a command's settings come from the environment (ZEROMEM_DEBUG
        # among them); commands take them from ``args.settings`` (cli.common.settings_of).
        args.settings = Settings.from_env()
        args.debug = debug = debug or args.settings.debug
        return int(args.func(args) or 0)
    except (Exception, KeyboardInterrupt) as exc:
        return report_error(exc, debug)


if __name__ == "__main__":
    sys.exit(main())
