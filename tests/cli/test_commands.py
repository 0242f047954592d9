"""The client commands a newcomer tries first, against real servers (the suite's stack):
values from a file or stdin, the new patch / expire / feedback subcommands, a conflict in
`watch`, forget over several owners, `stats`' saved column and chart (issue 18)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from tests.integration.test_lifecycle_cli import cli


async def value_of(settings: Any, tenant: str, key: str) -> dict[str, Any]:
    got = await cli(settings, "get", key, "--json", "--tenant", tenant)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)["item"]


async def test_values_from_a_file_stdin_or_as_text(running, tenant: str, tmp_path: Path) -> None:
    t = ("--tenant", tenant)
    big = {"rows": ["r" * 100] * 300}  # 30 KB: more than a comfortable shell argument
    (tmp_path / "v.json").write_text(json.dumps(big))
    put = await cli(running, "put", "user:u1:file", "--file", str(tmp_path / "v.json"), *t)
    assert put.returncode == 0, put.stderr
    assert (await value_of(running, tenant, "user:u1:file"))["value"] == big

    put = await cli(running, "put", "user:u1:stdin", "-", *t, stdin='{"from": "stdin"}\n')
    assert put.returncode == 0, put.stderr
    assert (await value_of(running, tenant, "user:u1:stdin"))["value"] == {"from": "stdin"}

    put = await cli(running, "put", "user:u1:text", "hello {world", "--string", *t)
    assert put.returncode == 0, put.stderr
    assert (await value_of(running, tenant, "user:u1:text"))["value"] == "hello {world"

    # options between KEY and VALUE
    put = await cli(running, "put", "user:u1:late", "--type", "fact", "7", *t)
    assert put.returncode == 0, put.stderr
    assert (await value_of(running, tenant, "user:u1:late"))["value"] == 7


async def test_over_long_content_is_summarised_only_when_asked(running, tenant: str) -> None:
    t = ("--tenant", tenant)
    long = "the customer asked on 2026-11-30 to move order 4711 to the Lyon warehouse. " * 4
    refused = await cli(running, "put", "user:u1:c", "1", "--content", long, *t)
    assert refused.returncode == 2 and f"--content has {len(long)} characters" in refused.stderr
    assert (await cli(running, "get", "user:u1:c", *t)).returncode == 4  # nothing stored

    put = await cli(running, "put", "user:u1:c", "1", "--content", long, "--summarise", *t)
    assert put.returncode == 0, put.stderr
    assert put.stderr.startswith("warning: --content has") and "summary" in put.stderr
    content = (await value_of(running, tenant, "user:u1:c"))["content"]
    assert len(content) <= 200 and "4711" in content


async def test_patch_expire_and_feedback(running, tenant: str) -> None:
    t = ("--tenant", tenant)
    key = "user:u1:profile"
    assert (await cli(running, "put", key, '{"city": "Paris", "lang": "fr"}', *t)).returncode == 0
    patched = await cli(running, "patch", key, '{"city": "Lyon", "lang": null}', "--json", *t)
    assert patched.returncode == 0, patched.stderr
    assert json.loads(patched.stdout)["result"]["version"] == 2
    assert (await value_of(running, tenant, key))["value"] == {"city": "Lyon"}
    clash = await cli(running, "patch", key, "-", "--expected-version", "1", *t, stdin="{}")
    assert clash.returncode == 3 and "current version 2" in clash.stdout

    expire = await cli(running, "expire", key, "--ttl", "3600", *t)
    assert expire.returncode == 0, expire.stderr
    expires_at = (await value_of(running, tenant, key))["expires_at"]
    assert 3500 < expires_at - time.time() <= 3600
    forever = await cli(running, "expire", key, "--never", *t)
    assert forever.returncode == 0, forever.stderr
    assert "expires_at" not in await value_of(running, tenant, key)

    liked = await cli(running, "feedback", key, "important", *t)
    assert liked.returncode == 0, liked.stderr
    assert (await value_of(running, tenant, key))["feedback"] == {"important": 1}
    wrong = await cli(running, "feedback", key, "meh", *t)
    assert wrong.returncode == 2 and "invalid choice: 'meh'" in wrong.stderr


async def test_watch_shows_a_conflict_with_its_versions(running, tenant: str) -> None:
    t = ("--tenant", tenant)
    watch = asyncio.create_task(
        cli(running, "watch", "task:t1:*", "--since-minutes", "1", "--count", "2", *t)
    )
    await asyncio.sleep(0.5)
    assert (await cli(running, "put", "task:t1:status", '"open"', *t)).returncode == 0
    clash = await cli(running, "put", "task:t1:status", '"done"', "--expected-version", "0", *t)
    assert clash.returncode == 3
    lines = (await watch).stdout.splitlines()
    assert lines[0].endswith("put task:t1:status applied v1"), lines
    assert lines[1].endswith("put task:t1:status conflict: expected v0, current v1"), lines


async def test_forget_over_several_owners(running, tenant: str) -> None:
    t = ("--tenant", tenant)
    for owner in ("session:s1", "session:s2", "session:s3"):
        assert (await cli(running, "put", f"{owner}:draft", '"x"', *t)).returncode == 0
    forgot = await cli(running, "forget", "session:s1", "session:s2", "--json", *t)
    assert forgot.returncode == 0, forgot.stderr
    assert json.loads(forgot.stdout)["forgotten"] == ["session:s1:draft", "session:s2:draft"]
    assert (await cli(running, "get", "session:s3:draft", *t)).returncode == 0


async def test_a_refused_request_is_one_line_without_regexes(running, tenant: str) -> None:
    listed = await cli(running, "list", "user:" + "u" * 600, "--tenant", tenant)
    assert listed.returncode == 2, listed.stderr
    assert listed.stderr.startswith("error: the service refused the request")
    assert len(listed.stderr.strip().splitlines()) == 1 and "regex" not in listed.stderr


async def test_stats_saved_counts_both_sides_alike_and_charts(running, tenant: str) -> None:
    t = ("--tenant", tenant)
    # One short memory out of one: recall injects all there is, so it saves nothing. Its
    # line's [date type key] header once made this read "saved -29 (-264%)".
    assert (
        await cli(running, "put", "user:u1:a", "1", "--content", "alpha beta", *t)
    ).returncode == 0
    for _ in range(2):
        assert (await cli(running, "recall", "alpha", "--owner", "user:u1", *t)).returncode == 0
    stats = await cli(running, "stats", "--json", *t)
    rows = json.loads(stats.stdout)["rows"]
    assert sum(r["injected"] for r in rows) == sum(r["baseline"] for r in rows) > 0
    shown = await cli(running, "stats", *t)
    assert shown.returncode == 0, shown.stderr
    assert "0 (0%)" in shown.stdout and "(-" not in shown.stdout
    # A chart either way: the period's totals as bars when the recalls fell in one minute,
    # tokens per minute when they straddled a minute boundary (as they did once in CI).
    if len({r["minute"] for r in rows}) < 2:
        chart = shown.stdout.split("tokens over the period")[1]
        assert "injected" in chart
    else:
        assert "tokens per minute (UTC)" in shown.stdout
