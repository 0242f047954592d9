"""The commands that read memories: ``get``, ``list``, ``recall`` and ``stats``, through the
read services exactly as an agent's SDK reads them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from zeromem.cli import arguments as arg
from zeromem.cli.common import EXIT_NOT_FOUND, client_call, print_json
from zeromem.extras import require
from zeromem.schemas import MemoryItem, MemoryType


def _item_json(item: MemoryItem) -> dict[str, Any]:
    import msgspec

    builtins: dict[str, Any] = msgspec.to_builtins(item)
    return builtins


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


def _strategy(text: str) -> dict[str, Any]:
    """``--strategy``: a JSON object of the wire contract's strategy union (checked here)."""
    import argparse as _argparse

    from zeromem.schemas import StrategyError, parse_strategy

    spec = arg.json_object(text)
    try:
        parse_strategy(spec)
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


def add_read_parsers(client_parser: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    """``get``, ``list``, ``recall`` and ``stats``."""
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
