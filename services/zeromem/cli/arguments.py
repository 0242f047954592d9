"""Argument types of the ``zeromem`` command line, checked before anything is sent: a
mistake is refused by argparse with the flag's name (``argument --ttl: ...``) instead of
travelling to a worker that would refuse it in its wire terms (``ttl_s``).

Also where values come from: ``put`` and ``patch`` take theirs from the command line, a
file (``--file PATH``) or standard input (``-``), as JSON unless ``--string`` says text.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from zeromem.cli.common import SHAPE_OF_FIELD, CliError
from zeromem.schemas import CONTENT_MAX_CHARS, MemoryKey
from zeromem.schemas.keys import (
    AGENT_REGEX,
    END,
    NAME_PATTERN,
    NAMESPACE_PATTERN,
    OWNER_ID_PATTERN,
    TENANT_REGEX,
)

_OWNER = re.compile(rf"^{NAMESPACE_PATTERN}:{OWNER_ID_PATTERN}{END}")
# A change-feed scope: `ns:*`, `ns:owner`, `ns:owner:*`, `ns:owner:name-prefix*`.
_SCOPE = re.compile(rf"^{NAMESPACE_PATTERN}:(\*|{OWNER_ID_PATTERN}(:(\*|{NAME_PATTERN}\*?))?){END}")


def memory_key(text: str) -> str:
    try:
        MemoryKey.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid memory key {text!r}: expected {SHAPE_OF_FIELD['key']}"
        ) from None
    return text


def owner(text: str) -> str:
    if not _OWNER.match(text):
        raise argparse.ArgumentTypeError(
            f"invalid owner {text!r}: expected namespace:owner, e.g. user:u1 or session:s1"
        )
    return text


def scope(text: str) -> str:
    if not _SCOPE.match(text):
        raise argparse.ArgumentTypeError(
            f"invalid scope {text!r}: expected namespace:*, namespace:owner, "
            "namespace:owner:* or namespace:owner:name-prefix*, e.g. task:t42:*"
        )
    return text


def tenant(text: str) -> str:
    if not TENANT_REGEX.match(text):
        raise argparse.ArgumentTypeError(
            f"invalid tenant {text!r}: expected {SHAPE_OF_FIELD['tenant']}"
        )
    return text


def agent(text: str) -> str:
    if not AGENT_REGEX.match(text):
        raise argparse.ArgumentTypeError(
            f"invalid agent {text!r}: expected {SHAPE_OF_FIELD['agent']}"
        )
    return text


def tag(text: str) -> str:
    if not 1 <= len(text) <= 64 or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"invalid tag {text!r}: expected {SHAPE_OF_FIELD['tags']}")
    return text


def number(
    low: float | None = None,
    high: float | None = None,
    *,
    above: bool = False,
    integer: bool = False,
) -> Callable[[str], Any]:
    """A finite number within [low, high] (``above``: strictly above ``low``)."""
    bound = (
        f"> {low:g}"
        if above and low is not None
        else " and ".join(
            part
            for part in (
                f">= {low:g}" if low is not None else "",
                f"<= {high:g}" if high is not None else "",
            )
            if part
        )
    )

    def parse(text: str) -> Any:
        try:
            value: Any = int(text) if integer else float(text)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        too_low = low is not None and (value <= low if above else value < low)
        too_high = high is not None and value > high
        if not math.isfinite(value) or too_low or too_high:
            raise argparse.ArgumentTypeError(f"{text} is out of range: it must be {bound}")
        return value

    parse.__name__ = "whole number" if integer else "number"  # argparse's "invalid <name> value"
    return parse


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('expected a JSON object, e.g. \'{"name": "no_decay"}\'')
    return value


# --- values ----------------------------------------------------------------------------------


def read_text(args: argparse.Namespace, positional: str, what: str) -> str:
    """The text of a value: the positional argument, ``-`` (stdin) or ``--file PATH``."""
    given = getattr(args, positional)
    path = args.file
    if given is not None and path is not None:
        raise CliError(f"both {what} and --file given", "pass one of them")
    if given is None and path is None:
        raise CliError(f"no {what} given", f"pass {what}, --file PATH, or - to read stdin")
    if given == "-" or path == "-":
        if sys.stdin.isatty():
            print(f"reading {what} from stdin (end with Ctrl-D)", file=sys.stderr)
        return sys.stdin.read()
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            raise CliError(f"cannot read --file {path}: {exc.strerror}", "check the path") from None
        except UnicodeDecodeError:
            raise CliError(f"--file {path} is not UTF-8 text", "store text or JSON") from None
    return str(given)


def parse_value(text: str, as_string: bool, what: str = "VALUE") -> Any:
    """JSON, unless ``as_string``; text that is not JSON is refused rather than silently
    stored as a string (a typo such as ``{"a": 1`` would otherwise become one)."""
    if as_string:
        return text
    try:
        return json.loads(text)
    except ValueError as exc:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise CliError(
            f"{what} {shown!r} is not valid JSON ({exc})",
            "give JSON (a string in double quotes: '\"text\"'), or pass --string to store "
            "the text as is",
        ) from None


def fit_content(content: str | None, summarise: bool) -> str | None:
    """``--content`` as given when it fits; over the limit, refused, or with
    ``--summarise`` replaced by the encoder's summary, with a warning saying so."""
    if content is None or len(content) <= CONTENT_MAX_CHARS:
        return content
    if not summarise:
        raise CliError(
            f"--content has {len(content)} characters, over the limit of {CONTENT_MAX_CHARS}",
            "shorten it, or pass --summarise to store the encoder's summary instead",
        )
    from zeromem.encoding import default_encoder

    summary = default_encoder().encode(content)
    print(
        f"warning: --content has {len(content)} characters (limit {CONTENT_MAX_CHARS}); "
        f"storing a {len(summary)}-character summary: {summary!r}",
        file=sys.stderr,
    )
    return summary
