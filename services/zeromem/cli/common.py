"""What every ``zeromem`` subcommand shares: finding the stack, connecting as the CLI,
printing receipts, and one error style.

The error style: a user's mistake is one line on stderr, ``error: <what is wrong>; <what
to do>``, in the terms of the command line (``--ttl``, not the wire field ``ttl_s``; a
key's shape, not the regular expression that checks it), and a documented exit code.
A traceback appears only with ``--debug`` (or ZEROMEM_DEBUG=1). The subcommand modules
import this one and never ``main``, so the parser can import them at the top.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from zeromem.settings import Settings, SettingsError

EXIT_OK = 0
EXIT_FAILED = 1  # partly done (an import with rejected lines), or an unexpected error
EXIT_USAGE = 2  # a mistake in the command line: a flag, key, value or file (argparse's code)
EXIT_CONFLICT = 3  # compare-and-set lost: the memory is at another version
EXIT_NOT_FOUND = 4  # no such memory, or the worker refused the command (rejected)
EXIT_UNAVAILABLE = 5  # no stack found, no answer in time, or the credential was refused
EXIT_IN_USE = 6  # `up`: another `zeromem up` holds the data directory
EXIT_INTERRUPTED = 130  # Ctrl-C

EXIT_CODES_HELP = """exit codes:
  0  done                        3  conflict (--expected-version lost)
  1  partly failed, or a bug     4  not found, or refused by the worker (rejected)
  2  a mistake in the command    5  no stack, no answer, or credential refused
     line (flag, key, value) or  6  `up`: the data directory is in use by another `up`
     in a ZEROMEM_* variable
  130  interrupted (Ctrl-C)
Errors are one line on stderr; --debug (or ZEROMEM_DEBUG=1) adds the traceback."""


class CliError(Exception):
    """A mistake the user can fix: ``what`` is wrong, ``todo`` says what to do."""

    def __init__(self, what: str, todo: str = "", code: int = EXIT_USAGE) -> None:
        self.what = what
        self.todo = todo
        self.code = code
        super().__init__(f"{what}; {todo}" if todo else what)


# --- messages in the user's terms ---------------------------------------------------------

# Wire fields as the command line names them. A field missing here keeps its own name.
FLAG_OF_FIELD = {
    "ttl_s": "--ttl",
    "content": "--content",
    "tags": "--tag",
    "references": "--ref",
    "expected_version": "--expected-version",
    "older_than": "--older-than-days",
    "since": "--since",
    "until": "--until",
    "prefix": "--prefix",
    "tenant": "--tenant",
    "agent": "--agent",
    "reader": "--agent",
    "k": "--k",
    "budget": "--budget",
    "limit": "--limit",
    "strategy": "--strategy",
    "cursor": "--cursor",
    "key": "KEY",
    "value": "VALUE",
    "patch": "PATCH",
    "kind": "KIND",
    "query": "QUERY",
    "owners": "--owner",
}

# What a value checked by a regular expression must look like, by the field it is in.
SHAPE_OF_FIELD = {
    "key": "namespace:owner[:name], e.g. user:u1:pref_lang (namespace: lowercase letters, "
    "digits, _; owner: letters, digits, _ and -)",
    "tenant": "lowercase letters, digits, _ and -, starting with a letter or digit, "
    "at most 64 characters",
    "agent": "lowercase letters, digits, _ and -, starting with a letter or digit, "
    "at most 64 characters",
    "tags": "1 to 64 characters without spaces",
}

_AT_PATH = re.compile(r"\s*-\s*at `\$\.?([A-Za-z_][\w]*)?[^`]*`")
_REGEX = re.compile(r"`str` matching regex '(?:[^'\\]|\\.)*'")
_TYPE_TICKS = re.compile(r"`(\w+)`")


def in_user_terms(message: str) -> str:
    """A validation message from msgspec, the SDK or a server, reworded for the command
    line: the field's flag instead of its wire name, a description instead of a regex."""
    match = _AT_PATH.search(message)
    field = match.group(1) if match else None
    text = _AT_PATH.sub("", message)
    if _REGEX.search(text):
        shape = SHAPE_OF_FIELD.get(field or "", "the documented form")
        text = _REGEX.sub(f"a value of the form {shape}", text)
    text = _TYPE_TICKS.sub(r"\1", text)
    if field:
        flag = FLAG_OF_FIELD.get(field, field)
        text = f"{flag}: {text[0].lower()}{text[1:]}" if text else flag
    return text


# --- finding the stack ---------------------------------------------------------------------


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings ``main`` built from the environment, with the command's own flags
    (``--data-dir``, ``--shards``) over them."""
    settings: Settings = args.settings
    data_dir, shards = getattr(args, "data_dir", None), getattr(args, "shards", None)
    if data_dir:
        settings = settings.with_(data_dir=Path(data_dir))
    if shards is not None:
        settings = settings.with_(shards=shards)
    return settings


def candidate_data_dirs(settings: Settings, explicit: bool) -> Iterator[Path]:
    """Where a running stack may be: the data directory given, or else ``.zeromem`` in
    this directory and in each of its parents (as git finds its repository)."""
    if explicit:
        yield settings.data_dir
        return
    if settings.data_dir.is_absolute():  # ZEROMEM_DATA_DIR as an absolute path: that one
        yield settings.data_dir
        return
    here = Path.cwd().resolve()
    for directory in (here, *here.parents):
        yield directory / settings.data_dir


def resolved_settings(args: argparse.Namespace) -> Settings:
    """Settings with URLs: from the environment, else from the running embedded stack."""
    settings = settings_of(args)
    if settings.bus.nats_url and settings.store.redis_url:
        return settings
    from zeromem.embedded import find_running_stack

    explicit = bool(getattr(args, "data_dir", None))
    looked = []
    for directory in candidate_data_dirs(settings, explicit):
        looked.append(directory / "stack.json")
        info = find_running_stack(directory)
        if info is not None:
            break
    else:
        shown = ", ".join(str(p) for p in looked[:4]) + (" ..." if len(looked) > 4 else "")
        raise CliError(
            f"no zeromem stack found: looked in {shown}",
            "start one with `zeromem up` (or `make run`), pass the --data-dir it uses, "
            "or set ZEROMEM_NATS_URL and ZEROMEM_REDIS_URL",
            EXIT_UNAVAILABLE,
        )
    settings = settings.with_(data_dir=directory).with_urls(
        settings.bus.nats_url or info.nats_url, settings.store.redis_url or info.redis_url
    )
    if info.auth_dir and not settings.auth_dir:
        settings = settings.with_(auth_dir=info.auth_dir)
    if not settings.lifecycle.master_key:  # the stack's own, so a rebuild seals as its workers did
        from zeromem.embedded.stack import stack_master_key

        settings = settings.with_(lifecycle={"master_key": stack_master_key(directory)})
    return settings


def admin_settings(args: argparse.Namespace) -> Settings:
    """Resolved settings as the operator's admin identity (rebuild, archive's survey of
    Redis), when the local authority is at hand and no credential is configured."""
    settings = resolved_settings(args)
    if settings.bus.nats_creds or settings.bus.nats_token:
        return settings
    from zeromem.auth.credentials import local_authority
    from zeromem.embedded.stack import settings_for_role

    return settings_for_role(settings, local_authority(settings), "admin")


# --- client commands -----------------------------------------------------------------------


def client_call(args: argparse.Namespace, body: Callable[[Any], Awaitable[int]]) -> int:
    """Connect as the CLI's agent, run ``body(client)``, close. Errors propagate to
    ``report_error``, which words them."""
    import logging

    from zeromem.sdk import MemoryClient

    if not getattr(args, "debug", False):  # its failures end as the one error line
        logging.getLogger("zeromem.sdk").setLevel(logging.ERROR)

    async def run() -> int:
        settings = resolved_settings(args)
        # With a credential of its own (ZEROMEM_CREDS...), tenant and agent are the
        # credential's; otherwise 'default' and 'cli' unless given.
        own = bool(settings.bus.nats_creds or settings.bus.nats_token)
        client = await MemoryClient.connect(
            settings.bus.nats_url,
            tenant=args.tenant or (None if own else "default"),
            agent=args.agent or (None if own else "cli"),
            shards=settings.shards,
            settings=settings,
        )
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(run())


def write_command(args: argparse.Namespace, send: Callable[[Any], Awaitable[Any]]) -> int:
    """A command that publishes one write: ``send(client)`` returns its receipt."""

    async def body(client: Any) -> int:
        return print_receipt(args, await send(client))

    return client_call(args, body)


def print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False), flush=True)


def describe_result(result: Any) -> str:
    """One result (of a receipt or a change event) in words: ``applied v3``,
    ``conflict: expected v0, current v1``, ``rejected: <reason>``."""
    from zeromem.schemas import Applied, Conflict

    if isinstance(result, Applied):
        return f"applied v{result.version}"
    if isinstance(result, Conflict):
        return f"conflict: expected v{result.expected_version}, current v{result.current_version}"
    reason = getattr(result, "reason", "")
    return f"rejected: {in_user_terms(reason)}" if reason else "rejected"


def print_receipt(args: argparse.Namespace, receipt: Any) -> int:
    if args.json:
        import msgspec

        print_json(
            {
                "command_id": receipt.command_id,
                "key": receipt.key,
                "status": receipt.status,
                "result": msgspec.to_builtins(receipt.result),
            }
        )
    elif receipt.status == "applied":
        print(f"applied {receipt.key} version {receipt.version}")
    elif receipt.status == "conflict":
        print(
            f"conflict on {receipt.key}: expected version {receipt.result.expected_version}, "
            f"current version {receipt.result.current_version}"
        )
    elif receipt.status == "rejected":
        print(f"rejected {receipt.key}: {in_user_terms(receipt.reason)}")
    else:
        print(f"{receipt.status} {receipt.key} (command {receipt.command_id})")
    return {"conflict": EXIT_CONFLICT, "rejected": EXIT_NOT_FOUND}.get(receipt.status, EXIT_OK)


# --- one error style -------------------------------------------------------------------------


def classify(exc: BaseException) -> tuple[int, str]:
    """(exit code, one line) for an exception that reached the top of a command."""
    from zeromem.auth.authority import AuthError
    from zeromem.embedded.servers import ServerNotFoundError, ServerStartError
    from zeromem.extras import MissingExtraError
    from zeromem.sdk.errors import (
        RequestRejectedError,
        ServiceUnavailableError,
        WaitTimeoutError,
        ZeromemError,
    )

    if isinstance(exc, CliError):
        return exc.code, str(exc)
    if isinstance(exc, (MissingExtraError, SettingsError)):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, "interrupted"
    if isinstance(exc, ServiceUnavailableError):
        return EXIT_UNAVAILABLE, (
            f"{exc}; is the stack running? (`zeromem up`; workers and `zeromem serve` "
            "answer the requests)"
        )
    if isinstance(exc, WaitTimeoutError):
        return EXIT_UNAVAILABLE, str(exc)
    if isinstance(exc, RequestRejectedError):
        code = EXIT_USAGE if exc.code in ("invalid", "limit", "bad_request") else EXIT_UNAVAILABLE
        message = in_user_terms(str(exc).removeprefix(f"{exc.code}: "))
        return code, f"the service refused the request ({exc.code}): {message}"
    if isinstance(exc, ZeromemError):
        return EXIT_UNAVAILABLE, str(exc)
    if isinstance(exc, (AuthError, PermissionError)):
        return EXIT_UNAVAILABLE, f"{exc}; check ZEROMEM_CREDS, or `zeromem auth list`"
    if isinstance(exc, (ServerNotFoundError, ServerStartError)):
        return EXIT_UNAVAILABLE, str(exc).splitlines()[0]
    if isinstance(exc, (ValueError, TypeError)) and _is_validation(exc):
        return EXIT_USAGE, in_user_terms(str(exc))
    import nats.errors

    if isinstance(exc, (nats.errors.Error, ConnectionError, OSError, TimeoutError)):
        return EXIT_UNAVAILABLE, f"cannot reach the stack: {exc or type(exc).__name__}"
    return EXIT_FAILED, (
        f"unexpected {type(exc).__name__}: {exc} (a bug; run again with --debug for "
        "the traceback, and report it)"
    )


def _is_validation(exc: BaseException) -> bool:
    import msgspec

    from zeromem.schemas.keys import InvalidKeyError

    return isinstance(exc, (msgspec.ValidationError, InvalidKeyError)) or " - at `$" in str(exc)


def report_error(exc: BaseException, debug: bool) -> int:
    code, line = classify(exc)
    if debug:
        import traceback

        traceback.print_exception(exc)
    print(f"error: {line}", file=sys.stderr, flush=True)
    return code
