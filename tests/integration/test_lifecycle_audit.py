"""Issue 4: the audit trail. Every command of a scripted session is recorded in order
(who, agent, op, key, when, result, versions before and after), reads with the reader and
the keys but no values, and sensitive values appear neither there nor in any log line."""

from __future__ import annotations

import logging

import msgspec
import pytest

from tests.eventually import eventually
from zeromem.sdk import MemoryClient

SECRETS = ("hunter2", "tok-9f8e7d", "hunter3", "Zurich-1234")


async def test_audit_trail_of_a_scripted_session(
    client: MemoryClient, running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # each agent on a connection of its own: its credential is for that agent alone
    planner = await MemoryClient.connect(
        running.bus.nats_url, tenant=client.tenant, agent="planner", shards=running.shards
    )
    coder = await MemoryClient.connect(
        running.bus.nats_url, tenant=client.tenant, agent="coder", shards=running.shards
    )
    steps = [
        await planner.put("task:t42:status", "planned", expected_version=0, wait="applied"),
        await coder.put("task:t42:status", "mine", expected_version=0, wait="applied"),  # conflict
        await coder.put("task:t42:status", "running", expected_version=1, wait="applied"),
        # sensitive by flag: content and value never in the audit
        await planner.put(
            "user:u1:bank",
            {"pin": "Zurich-1234"},
            content="bank pin Zurich-1234",
            sensitive=True,
            wait="applied",
        ),
        # sensitive by key name (the pattern): content redacted
        await planner.put("user:u1:api_token", "tok-9f8e7d", wait="applied"),
        # a sensitive field in an ordinary memory: that field's value redacted
        await coder.put(
            "user:u1:profile", {"name": "Ada"}, content="profile of Ada", wait="applied"
        ),
        await coder.patch(
            "user:u1:profile", {"password": "hunter3", "city": "Basel"}, wait="applied"
        ),
        await coder.patch("user:u1:missing", {"password": "hunter2"}, wait="applied"),  # rejected
        await coder.patch("user:u1:bank", {"pin": "hunter2"}, wait="applied"),
        await planner.delete("task:t42:status", wait="applied"),
    ]
    assert [s.status for s in steps] == [
        "applied",
        "conflict",
        "applied",
        "applied",
        "applied",
        "applied",
        "applied",
        "rejected",
        "applied",
        "applied",
    ]
    logging.getLogger("zeromem.test").warning(
        "agent sent password=%s and token: %s", "hunter2", "tok-9f8e7d"
    )
    assert (await coder.get("user:u1:profile")).value["password"] == "hunter3"
    await coder.list("user:u1:")
    await planner.recall("Ada profile", owners=["user:u1"])

    trail = await eventually(client.audit, lambda t: sum(e.kind == "read" for e in t) >= 3)
    writes = [e for e in trail if e.kind == "write"]
    assert [e.command_id for e in writes] == [s.command_id for s in steps]  # all, in order
    assert [
        (e.agent, e.op, e.key, e.status, e.version_before, e.version_after) for e in writes
    ] == [
        ("planner", "put", "task:t42:status", "applied", 0, 1),
        ("coder", "put", "task:t42:status", "conflict", 1, 1),
        ("coder", "put", "task:t42:status", "applied", 1, 2),
        ("planner", "put", "user:u1:bank", "applied", 0, 1),
        ("planner", "put", "user:u1:api_token", "applied", 0, 1),
        ("coder", "put", "user:u1:profile", "applied", 0, 1),
        ("coder", "patch", "user:u1:profile", "applied", 1, 2),
        ("coder", "patch", "user:u1:missing", "rejected", 0, 0),
        ("coder", "patch", "user:u1:bank", "applied", 1, 2),
        ("planner", "delete", "task:t42:status", "applied", 2, 3),
    ]
    assert all(e.at > 0 for e in writes) and writes == sorted(writes, key=lambda e: e.seq)
    assert writes[6].detail["patch"] == {"password": "[redacted]", "city": "Basel"}
    assert writes[3].detail["content"] == "[redacted]"
    assert writes[4].detail["content"] == "[redacted]"
    assert writes[5].detail["content"] == "profile of Ada"
    assert writes[8].detail == {"fields": ["pin"]}
    reads = [e for e in trail if e.kind == "read"]
    assert [(e.agent, e.op) for e in reads] == [
        ("coder", "get"),
        ("coder", "list"),
        ("planner", "recall"),
    ]
    assert reads[0].keys == ("user:u1:profile",) and "user:u1:profile" in reads[1].keys
    text = msgspec.json.encode(trail).decode()
    for secret in SECRETS:
        assert secret not in text, f"{secret} leaked into the audit trail"
    assert "Basel" in text  # an ordinary field is kept: the redaction is targeted
    for record in caplog.records:
        for secret in SECRETS:
            assert secret not in record.getMessage(), f"{secret} leaked into a log line"

    by_key = await client.audit(key="task:t42:status")
    assert [e.op for e in by_key] == ["put", "put", "put", "delete"]
    by_agent = await client.audit(agent="planner")
    assert {e.agent for e in by_agent} == {"planner"} and len(by_agent) == 5  # 4 writes, 1 read
    await planner.close()
    await coder.close()
