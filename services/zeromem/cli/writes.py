"""The commands that change memories: ``put``, ``patch``, ``expire``, ``feedback``,
``delete`` and ``import``. Each publishes commands as an agent's SDK does and, unless told
otherwise, waits for the worker's result (``cli.common.write_command``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from zeromem.cli import arguments as arg
from zeromem.cli.common import (
    EXIT_FAILED,
    CliError,
    client_call,
    print_json,
    resolved_settings,
    write_command,
)
from zeromem.schemas import FeedbackKind, MemoryType

WAITS = ["none", "stored", "applied"]


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


def add_write_parsers(client_parser: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    """``put``, ``patch``, ``expire``, ``feedback`` and ``import`` (``delete`` is listed after
    the read commands: :func:`add_delete_parser`)."""
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


def add_delete_parser(client_parser: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    delete = client_parser("delete", "delete a memory", "Publish a delete command for KEY.")
    delete.add_argument("key", metavar="KEY", type=arg.memory_key)
    write_arguments(delete)
    delete.set_defaults(func=cmd_delete)
