"""The service commands of ``zeromem``: ``up``, ``worker``, ``serve``, ``mcp``, ``inspect``.

Each runs a process until it is told to stop (SIGINT, SIGTERM or SIGHUP); the code they
run lives in the service packages and is imported only when the command is chosen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from zeromem.cli import arguments as arg
from zeromem.cli.common import CliError, resolved_settings, settings_of
from zeromem.extras import require

ENVIRONMENT_HELP = """environment:
  ZEROMEM_NATS_URL, ZEROMEM_REDIS_URL  servers to use (NATS_URL / REDIS_URL also work);
                                       unset: the stack `zeromem up` runs in this directory
  ZEROMEM_NATS_CREDS (NATS_CREDS)      the creds file this process connects with
  ZEROMEM_REDIS_USERNAME/_PASSWORD     its Redis ACL user (or in the URL: redis://user:pw@...)
  ZEROMEM_SHARDS                       shard count, the same for every publisher and worker
"""


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


def _run_service(main: Callable[[], Coroutine[Any, Any, None]], json_lines: bool = False) -> int:
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

    static = None
    if args.index is not None or args.count is not None:
        if args.index is None or args.count is None:
            raise CliError(
                "--index and --count go together", "give both (static shards), or neither"
            )
        if not 0 <= args.index < args.count:
            raise CliError(
                f"--index {args.index} is not below --count {args.count}", "0 <= INDEX < COUNT"
            )
        static = (args.index, args.count)
    settings = resolved_settings(args)
    return _run_service(lambda: run_worker(settings, static), args.json)


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


def service_parser(sub: Any, name: str, help_: str, description: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_,
        description=description,
        epilog=ENVIRONMENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return p


def add_service_parsers(sub: Any) -> None:
    """``up``, ``worker``, ``serve``, ``mcp`` and ``inspect``, in ``--help``'s order."""
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
        sub,
        "worker",
        "apply the commands of a set of shards",
        "Apply shards' commands to Redis. By default the workers share the shards among "
        "themselves: each registers in Redis and holds its fair share of the live "
        "workers' shards, so workers can be added or stopped at any time and the shards "
        "follow. With --index and --count, this worker owns the shards s where "
        "s % COUNT == INDEX for good (static; every worker needs the same COUNT).",
    )
    worker.add_argument(
        "--index",
        type=arg.number(0, integer=True),
        help="static mode: this worker's ordinal",
    )
    worker.add_argument("--count", type=count, help="static mode: the number of workers")
    worker.add_argument("--json", action="store_true", help="log JSON lines")
    worker.set_defaults(func=cmd_worker)

    serve = service_parser(
        sub,
        "serve",
        "answer get, list and recall requests",
        "The read services: exact get/list and ranked recall, "
        "in NATS queue groups so replicas share the load.",
    )
    serve.add_argument("--json", action="store_true", help="log JSON lines")
    serve.set_defaults(func=cmd_serve)

    mcp = service_parser(
        sub,
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
        sub,
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
