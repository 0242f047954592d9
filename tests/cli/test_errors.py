"""Every user mistake is one line on stderr, in the command line's terms, with a
documented exit code; never a traceback (issue 18). No stack is needed to refuse these:
the arguments are checked before anything is sent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_cli_up import clean_env
from zeromem.cli.common import EXIT_CODES_HELP, in_user_terms

ZEROMEM = [sys.executable, "-m", "zeromem.cli.main"]


def run(*args: str, cwd: Path | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ZEROMEM, *args],
        cwd=cwd,
        env=clean_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )


def one_line_error(out: subprocess.CompletedProcess[str], code: int) -> str:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("get", ""), "invalid memory key ''"),
        (("put", "bad key", "1"), "invalid memory key 'bad key'"),
        (("delete", "user u1 x"), "invalid memory key"),
        (("restore", "User:u1:x"), "invalid memory key"),
        (("forget", "user:u1:x:y z"), "invalid owner"),
        (("recall", "q", "--strategy", '{"name": "nope"}'), "unknown strategy 'nope'"),
        (("recall", "q", "--strategy", "{nope"), "--strategy: not valid JSON"),
        (("get", "user:u1:x", "--tenant", "Acme!"), "invalid tenant 'Acme!'"),
        (("put", "user:u1:x", "1", "--ttl", "-5"), "argument --ttl: -5 is out of range"),
        (("archive", "--older-than-days", "-1"), "--older-than-days: -1 is out of range"),
        (("watch", "foo"), "invalid scope 'foo'"),
        (("put", "user:u1:x", "1", "--tag", "two words"), "invalid tag 'two words'"),
        (("put", "user:u1:x", "--type", "gossip", "1"), "invalid choice: 'gossip'"),
        (("list", "--limit", "0"), "--limit: 0 is out of range"),
    ],
)
def test_a_mistake_is_one_line_naming_the_flag(args: tuple[str, ...], says: str) -> None:
    line = one_line_error(run(*args), 2)
    assert says in line, line
    assert "regex" not in line and "ttl_s" not in line and "$." not in line


def test_watch_with_a_bad_scope_errors_at_once() -> None:
    one_line_error(run("watch", "foo", "--count", "1"), 2)  # the 30 s timeout would fail it


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (("put", "user:u1:x", '{"a": 1'), "", "is not valid JSON"),
        (("put", "user:u1:x", "hello"), "", "pass --string to store the text as is"),
        (("put", "user:u1:x", "-"), "not json\n", "is not valid JSON"),
        (("put", "user:u1:x"), "", "no VALUE given"),
        (("put", "user:u1:x", "1", "--file", "x.json"), "", "both VALUE and --file given"),
        (("put", "user:u1:x", "--file", "/nonexistent/v.json"), "", "cannot read --file"),
        (("put", "user:u1:x", "1", "--content", "c" * 300), "", "--content has 300 characters"),
        (("patch", "user:u1:x", "[1, 2]"), "", "PATCH must be a JSON object"),
        (("expire", "user:u1:x"), "", "--ttl SECONDS, or --never"),
        (("rebuild",), "", "pass --yes"),
    ],
)
def test_values_are_refused_rather_than_changed(
    args: tuple[str, ...], stdin: str, says: str
) -> None:
    line = one_line_error(run(*args, stdin=stdin), 2)
    assert says in line, line


def test_no_stack_says_where_it_looked(tmp_path: Path) -> None:
    below = tmp_path / "a" / "b"
    below.mkdir(parents=True)
    line = one_line_error(run("get", "user:u1:x", cwd=below), 5)
    assert "no zeromem stack found: looked in" in line
    for directory in (below, below.parent, tmp_path):
        assert str(directory / ".zeromem" / "stack.json") in line
    line = one_line_error(run("--data-dir", str(tmp_path / "d"), "get", "user:u1:x"), 5)
    assert f"looked in {tmp_path / 'd' / 'stack.json'};" in line


def test_a_missing_optional_dependency_names_its_extra(tmp_path: Path) -> None:
    # As after a plain `pip install zeromem`: matplotlib and mcp cannot be imported.
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\nfor name in ('matplotlib', 'mcp'):\n    sys.modules[name] = None\n"
    )
    env = dict(clean_env(), PYTHONPATH=str(tmp_path))
    for args, extra in ((("stats", "--png", "s.png"), "charts"), (("mcp",), "mcp")):
        out = subprocess.run(
            [*ZEROMEM, *args], env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path
        )
        line = one_line_error(out, 2)
        assert f"pip install 'zeromem[{extra}]'" in line, line


def test_debug_adds_the_traceback() -> None:
    out = run("--debug", "put", "user:u1:x", "hello")
    assert out.returncode == 2 and "Traceback" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: VALUE 'hello'")


def test_help_documents_the_exit_codes_and_has_no_format_escapes() -> None:
    for command in ((), ("put",), ("get",), ("patch",), ("expire",), ("feedback",)):
        out = run(*command, "--help")
        assert out.returncode == 0 and "exit codes:" in out.stdout, command
    worker = run("worker", "--help")
    assert "%%" not in worker.stdout and "s % COUNT == INDEX" in worker.stdout
    for command in ("up", "worker", "serve", "mcp"):
        assert "--json" in run(command, "--help").stdout, command
    assert "130  interrupted" in EXIT_CODES_HELP


def test_server_messages_are_reworded_in_the_command_lines_terms() -> None:
    raw = (
        "Expected `str` matching regex '^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_\\-]{1,64}$' - at `$.key`"
    )
    said = in_user_terms(raw)
    assert (
        said.startswith("KEY: expected a value of the form namespace:owner") and "regex" not in said
    )
    assert in_user_terms("Expected `float` > 0 - at `$.ttl_s`") == "--ttl: expected float > 0"
    assert in_user_terms("Expected `str` of length <= 200 - at `$.content`").startswith(
        "--content:"
    )


def test_the_langgraph_store_names_its_extra(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['langgraph'] = None\n")
    out = subprocess.run(
        [sys.executable, "-c", "import zeromem.integrations.langgraph_store"],
        env=dict(clean_env(), PYTHONPATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert "pip install 'zeromem[langgraph]'" in out.stderr.strip().splitlines()[-1]


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cooperating_agents.py"


def test_an_example_refuses_a_flag_and_says_when_no_stack_runs(tmp_path: Path) -> None:
    run_example = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, str(EXAMPLE), *args],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,  # it once retried for ever, printing tracebacks
    )
    flag = run_example("--short")
    assert flag.returncode == 2 and "unrecognized arguments: --short" in flag.stderr
    alone = run_example()
    assert alone.returncode == 1 and "Traceback" not in alone.stderr
    assert alone.stderr.startswith("error: no NATS URL given and no zeromem stack found")
    wrong = run_example("--nats-url", "nats://127.0.0.1:1")
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    assert "cannot connect to NATS at nats://127.0.0.1:1 within 10s" in wrong.stderr
