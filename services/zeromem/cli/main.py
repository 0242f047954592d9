"""The ``zeromem`` command line.

Service commands (``up``, ``worker``, ``serve``) run processes; client commands (``put``,
``get``, ``list``, ``delete``...) talk to a running stack exactly as an agent's SDK does.
Run from the directory where ``zeromem up`` runs (or below it), they find it without any
flag. Every mistake is one line on stderr and a documented exit code (``cli.common``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from zeromem.cli import arguments as arg
from zeromem.cli.auth import add_auth_parser
from zeromem.cli.common import EXIT_CODES_HELP, EXIT_USAGE, report_error
from zeromem.cli.lifecycle import add_lifecycle_parsers
from zeromem.cli.reads import add_read_parsers
from zeromem.cli.services import add_service_parsers
from zeromem.cli.writes import add_delete_parser, add_write_parsers
from zeromem.settings import Settings


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
    add_service_parsers(sub)

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

    # The order of these calls is the order `zeromem --help` lists the commands in.
    add_write_parsers(client_parser)
    add_read_parsers(client_parser)
    add_delete_parser(client_parser)
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
