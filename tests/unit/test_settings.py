"""The settings object: every variable parses into its field, a bad value is one error
naming its variable, and no module but ``zeromem.settings`` reads the environment."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from zeromem.cli.main import main
from zeromem.settings import (
    ALSO_READ,
    Settings,
    SettingsError,
    Variable,
    variables,
)

ROOT = Path(__file__).resolve().parents[2]

# A value of each field type as a variable spells it, and the field's value it gives.
SAMPLES: dict[Any, tuple[str, object]] = {
    int: ("7", 7),
    float: ("2.5", 2.5),
    bool: ("true", True),
    str: ("some text", "some text"),
    Path: ("/srv/zeromem", Path("/srv/zeromem")),
}


def field_type(variable: Variable) -> Any:
    owner: Any = Settings
    for part in variable.path:
        owner = {f.name: f.type for f in msgspec.structs.fields(owner)}[part]
    return owner


# What a variable needs beside it to pass the rules across sections (Settings.__post_init__).
COMPANIONS: dict[tuple[str, ...], dict[str, str]] = {
    ("bus", "stream_max_age_s"): {"ZEROMEM_SNAPSHOT_INTERVAL_S": "1"},
}


def test_every_variable_and_every_other_name_of_it_sets_its_field() -> None:
    seen = 0
    for variable in variables():
        raw, expected = SAMPLES[field_type(variable)]
        for name in variable.names:
            env = {name: raw, **COMPANIONS.get(variable.path, {})}
            assert variable.value_in(Settings.from_env(env)) == expected, name
            seen += 1
    assert seen > 90  # every field of every section, and the conventional names


def test_an_age_on_the_command_log_must_outlast_two_snapshot_intervals() -> None:
    """An age shorter than what the snapshot interval needs is refused, naming both
    variables; so is an age with no periodic snapshot at all."""
    ok = Settings.from_env(
        {"ZEROMEM_STREAM_MAX_AGE_S": "86400", "ZEROMEM_SNAPSHOT_INTERVAL_S": "3600"}
    )
    assert ok.bus.stream_max_age_s == 86400
    with pytest.raises(SettingsError, match="shorter than two snapshot intervals") as short:
        Settings.from_env({"ZEROMEM_STREAM_MAX_AGE_S": "3600"})  # interval 6 h by default
    assert "ZEROMEM_STREAM_MAX_AGE_S" in str(short.value)
    assert "ZEROMEM_SNAPSHOT_INTERVAL_S" in str(short.value)
    with pytest.raises(SettingsError, match="needs snapshot interval_s > 0"):
        Settings.from_env({"ZEROMEM_STREAM_MAX_AGE_S": "86400", "ZEROMEM_SNAPSHOT_INTERVAL_S": "0"})
    with pytest.raises(SettingsError, match="keep must be at least 1"):
        Settings.from_env({"ZEROMEM_SNAPSHOT_KEEP": "0"})


def test_variable_names_follow_the_sections_and_are_unique() -> None:
    names = {variable.path: variable.names[0] for variable in variables()}
    assert names[("shards",)] == "ZEROMEM_SHARDS"
    assert names[("bus", "stream_replicas")] == "ZEROMEM_STREAM_REPLICAS"
    assert names[("store", "redis_url")] == "ZEROMEM_REDIS_URL"
    assert names[("worker", "batch_size")] == "ZEROMEM_BATCH_SIZE"
    assert names[("lifecycle", "archive_after_days")] == "ZEROMEM_ARCHIVE_AFTER_DAYS"
    assert names[("telemetry", "otlp_endpoint")] == "OTEL_EXPORTER_OTLP_ENDPOINT"
    assert names[("limits", "value_bytes")] == "ZEROMEM_LIMIT_VALUE_BYTES"
    assert names[("inspect", "page_size")] == "ZEROMEM_INSPECT_PAGE_SIZE"
    every = [name for variable in variables() for name in variable.names]
    assert len(every) == len(set(every))
    assert set(ALSO_READ) <= set(names.values())


def test_the_first_name_set_wins_and_an_empty_number_keeps_its_default() -> None:
    both = Settings.from_env({"ZEROMEM_NATS_URL": "nats://a:4222", "NATS_URL": "nats://b:4222"})
    assert both.bus.nats_url == "nats://a:4222"
    assert Settings.from_env({"NATS_URL": "nats://b:4222"}).bus.nats_url == "nats://b:4222"
    # an empty number or flag is unset; empty text is a value (here: no redaction pattern)
    empty = Settings.from_env(
        {"ZEROMEM_SHARDS": "", "ZEROMEM_DEBUG": "", "ZEROMEM_SENSITIVE_PATTERN": ""}
    )
    assert empty.shards == Settings().shards and empty.debug is False
    assert empty.lifecycle.sensitive_pattern == ""
    # an empty ZEROMEM_ name is still the one set: the conventional one is not read
    assert Settings.from_env({"ZEROMEM_NATS_URL": "", "NATS_URL": "nats://b"}).bus.nats_url == ""


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("0", False), ("true", True), ("False", False), ("TRUE", True)],
)
def test_flags_read_true_false_one_and_zero(raw: str, expected: bool) -> None:
    assert Settings.from_env({"ZEROMEM_DEBUG": raw}).debug is expected


def test_numbers_read_as_their_field_types() -> None:
    settings = Settings.from_env(
        {
            "ZEROMEM_ACK_WAIT_S": "3",  # a whole number is a float field's value too
            "ZEROMEM_LIMIT_TENANT_READ_SHARE": "1e-1",
            "ZEROMEM_STREAM_MAX_BYTES": "1048576",
            "ZEROMEM_DATA_DIR": "relative/dir",
        }
    )
    assert settings.bus.ack_wait_s == 3.0 and isinstance(settings.bus.ack_wait_s, float)
    assert settings.limits.tenant_read_share == 0.1
    assert settings.bus.stream_max_bytes == 1 << 20
    assert settings.data_dir == Path("relative/dir")


def test_nothing_set_gives_the_defaults() -> None:
    assert Settings.from_env({}) == Settings()
    assert Settings().bus.stream_max_bytes == 8 << 30 and Settings().worker.batch_size == 512
    assert Settings().authority_dir == Path(".zeromem/auth")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ZEROMEM_SHARDS": "many"}, "ZEROMEM_SHARDS='many': expected an integer"),
        ({"ZEROMEM_SHARDS": "4.5"}, "ZEROMEM_SHARDS='4.5': expected an integer"),
        (
            {"NATS_CREDS": "x", "ZEROMEM_ACK_WAIT_S": "soon"},
            "ZEROMEM_ACK_WAIT_S='soon': expected a number",
        ),
        ({"ZEROMEM_DEBUG": "yes"}, "ZEROMEM_DEBUG='yes': expected true or false (1 or 0)"),
        ({"ZEROMEM_INSPECT_PORT": "http"}, "ZEROMEM_INSPECT_PORT='http': expected an integer"),
        (
            {"ZEROMEM_LIMIT_NESTING_DEPTH": "-1"},
            "ZEROMEM_LIMIT_NESTING_DEPTH='-1': limit nesting_depth must not be negative",
        ),
        (
            {"ZEROMEM_LIMIT_READS_IN_FLIGHT": "0"},
            "ZEROMEM_LIMIT_READS_IN_FLIGHT='0': tenant_in_flight(_shared), reads_in_flight",
        ),
    ],
)
def test_a_bad_value_is_one_error_naming_its_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    assert str(caught.value).startswith(message)
    assert caught.value.variable in env


def test_the_cli_reports_a_bad_variable_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZEROMEM_LIMIT_VALUE_BYTES", "64k")
    assert main(["get", "user:u1:k"]) == 2  # EXIT_USAGE
    err = capsys.readouterr().err
    assert err == "error: ZEROMEM_LIMIT_VALUE_BYTES='64k': expected an integer\n"


def test_env_gives_a_child_process_the_same_settings() -> None:
    settings = Settings.from_env(
        {
            "ZEROMEM_NATS_URL": "nats://a:4222,nats://b:4222",
            "ZEROMEM_DEBUG": "1",
            "ZEROMEM_DATA_DIR": "/data",
            "ZEROMEM_LEASE_TTL_S": "1.5",
            "ZEROMEM_LIMIT_RECALL_OWNERS": "4",
            "ZEROMEM_INSPECT_HOST": "0.0.0.0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        }
    )
    assert settings.bus.nats_servers == ["nats://a:4222", "nats://b:4222"]
    assert settings.telemetry.otlp_metrics and settings.telemetry.otlp_traces
    assert Settings.from_env(settings.env()) == settings
    assert Settings().env() == {}


def test_with_changes_fields_and_section_fields() -> None:
    changed = Settings().with_(shards=4, bus={"nats_creds": "/a.creds"}, store={"redis_url": "r"})
    assert changed.shards == 4 and changed.bus.nats_creds == "/a.creds"
    assert changed.store.redis_url == "r" and changed.bus.ack_wait_s == Settings().bus.ack_wait_s
    assert changed.with_urls("n", "s").bus.nats_url == "n"


# --- nothing else reads the environment -------------------------------------------------

# Modules that may read the process environment, and why. Each must still do so (a stale
# entry fails), and nothing else may.
ENVIRONMENT_READERS = {
    # the one place zeromem's configuration comes from
    "services/zeromem/settings.py": "Settings.from_env, child_environment",
    # mirrors tiktoken's own lookup of its cache directory (TIKTOKEN_CACHE_DIR, then
    # DATA_GYM_CACHE_DIR) at the moment tiktoken reads it; not zeromem configuration
    "services/zeromem/store/tokens.py": "tiktoken's cache directory",
}
READS_ENVIRONMENT = re.compile(r"\bos\.environ\b|\bgetenv\(|\bfrom os import\b[^\n]*\benviron\b")


def test_no_module_but_the_settings_reads_the_environment() -> None:
    readers = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "services").rglob("*.py")
        if READS_ENVIRONMENT.search(path.read_text())
    }
    assert readers == set(ENVIRONMENT_READERS)


# Settings are built from the environment once, where a process (or an SDK user's program)
# starts; everything below takes them as an argument.
ENTRY_POINTS = {
    "services/zeromem/cli/main.py",  # every `zeromem` command, `up`, `worker`, `serve`...
    "services/zeromem/mcp_server.py",  # python -m zeromem.mcp_server
    "services/zeromem/sdk/client.py",  # MemoryClient.connect without settings=
    "services/zeromem/integrations/langgraph_store.py",  # ZeromemStore.connect_sync
}


def test_settings_are_built_from_the_environment_only_at_entry_points() -> None:
    builders = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "services").rglob("*.py")
        if "from_env(" in path.read_text() and path.name != "settings.py"
    }
    assert builders == ENTRY_POINTS


# Variables the documentation names that are not settings: read by tests, the Makefile or
# the manifests themselves, or written for Redis' own configuration.
NOT_SETTINGS = re.compile(
    r"ZEROMEM_(REDIS_PASSWORD_\w*|WORKER_INDEX|WORKER_COUNT|RELIABILITY|BROWSER_TESTS"
    r"|CHROMIUM|ARTIFACTS)$"
)


def test_every_variable_the_documentation_names_is_a_setting() -> None:
    known = {name for variable in variables() for name in variable.names}
    documents = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "k8s").rglob("*")]
    documents += [*(ROOT / "deploy").rglob("*")]
    named: set[str] = set()
    for document in documents:
        if document.is_file() and document.suffix in (".md", ".yaml", ".env", ".conf", ""):
            named |= set(re.findall(r"\bZEROMEM_[A-Z0-9_]*[A-Z0-9]\b", document.read_text()))
    unknown = {
        name
        for name in named
        if name not in known
        and not NOT_SETTINGS.match(name)
        and name
        not in ("ZEROMEM_LIMIT", "ZEROMEM_INSPECT")  # prefixes, as in `ZEROMEM_LIMIT_<NAME>`
    }
    assert not unknown, f"documented but not read by zeromem.settings: {sorted(unknown)}"
    assert len(named) > 30
