"""The inspector's view models, without servers: what the page draws from a reply."""

from __future__ import annotations

import pytest

from zeromem.inspect.memories import Masker, owner_prefix, state_of
from zeromem.inspect.playground import FormError, RecallForm, explain_view
from zeromem.inspect.savings import series, totals
from zeromem.lifecycle.redact import Redactor
from zeromem.schemas import (
    REDACTED,
    Candidate,
    MemoryItem,
    MemoryType,
    RecalledMemory,
    RecallReply,
    UsageRow,
)
from zeromem.schemas.strategies import NoDecayStrategy

MASKER = Masker(Redactor())


def _item(key: str, **extra: object) -> MemoryItem:
    fields = {
        "value": {"a": 1},
        "content": "c",
        "type": MemoryType.FACT,
        "created_at": 100.0,
        "updated_at": 100.0,
        "version": 1,
        **extra,
    }
    return MemoryItem(key=key, **fields)  # type: ignore[arg-type]


def test_masking_sensitive_memories_and_fields() -> None:
    flagged = MASKER.item(_item("user:u1:note", value="s3cret", content="s3cret", sensitive=True))
    assert (flagged["value"], flagged["content"], flagged["masked"]) == (REDACTED, REDACTED, True)
    named = MASKER.item(_item("user:u1:api_key", value="s3cret"))
    assert named["value"] == REDACTED
    field = MASKER.item(_item("user:u1:login", value={"user": "ana", "password": "s3cret"}))
    assert field["value"] == {"user": "ana", "password": REDACTED} and field["masked"]
    plain = MASKER.item(_item("user:u1:city", value="Lisbon"))
    assert (plain["value"], plain["masked"], plain["owner"]) == ("Lisbon", False, "user:u1")
    assert plain["tags"] == () and plain["confidence"] == 1.0  # defaults are named too


def test_ttl_and_archive_state() -> None:
    assert state_of(_item("user:u1:a"), now=0) == {"tier": "live"}
    sliding = _item("user:u1:a", expires_at=160.0, ttl_s=60.0, refresh_on_read=True)
    expiring = state_of(sliding, now=130)
    assert expiring == {
        "tier": "live",
        "expires_at": 160.0,
        "expires_in_s": 30.0,
        "ttl_s": 60.0,
        "sliding": True,
    }
    assert state_of(_item("user:u1:a", archived_at=5.0), now=0)["tier"] == "archived"


def test_owner_prefix_of_a_key_prefix() -> None:
    assert owner_prefix("user:u1:pref") == "user:u1"
    assert owner_prefix("user:u1:") == "user:u1"
    assert owner_prefix("user:u") == "user:u"
    assert owner_prefix("") == ""


def test_recall_form_refuses_with_reasons() -> None:
    form = RecallForm.parse({"q": "lang", "owners": "user:u1, task:t2", "k": "3", "budget": "90"})
    assert form.owners == ("user:u1", "task:t2") and form.ready and form.strategy() is None
    assert not RecallForm.parse({"q": "lang"}).ready
    assert RecallForm.parse({"prefix": "user:u1:pref"}).ready
    chosen = RecallForm.parse({"strategy": "no_decay", "owners": "user:u1"})
    assert chosen.strategy() == NoDecayStrategy()
    for params, reason in (
        ({"k": "0"}, "between 1 and 100"),
        ({"budget": "lots"}, "whole number"),
        ({"strategy": "magic"}, "unknown strategy"),
        ({"strategy": "custom", "strategy_json": "[1]"}, "JSON object"),
        ({"strategy": "custom", "strategy_json": "{"}, "not JSON"),
        ({"strategy": "custom", "strategy_json": '{"name": "recency"}'}, "needs half_life_s"),
    ):
        with pytest.raises(FormError, match=reason):
            RecallForm.parse(params)


def test_explain_view_keeps_the_reply_and_derives_the_bars() -> None:
    reply = RecallReply(
        memories=(
            RecalledMemory("user:u1:a", "alpha", MemoryType.FACT, 1.0, 1.0, 1, 2.0, 5),
            RecalledMemory("user:u1:token", "tok", MemoryType.FACT, 1.0, 1.0, 1, 1.0, 4),
        ),
        context="[1970-01-01 fact user:u1:a] alpha\n[1970-01-01 fact user:u1:token] tok\n",
        tokens=20,
        baseline_tokens=60,
        saved_tokens=40,
        candidates=(
            Candidate("user:u1:a", 2.0, 4.0, 0.5, 1.0, 5, "kept"),
            Candidate("user:u1:token", 1.0, 2.0, 1.0, 0.5, 4, "kept"),
            Candidate("user:u1:b", 0.5, 1.0, 0.5, 3.0, 9, "cut: over budget"),
        ),
    )
    view = explain_view(reply, budget=30, masker=MASKER, sensitive={"user:u1:a"})
    rows = view["rows"]
    assert [r["decision"] for r in rows] == ["kept", "kept", "cut: over budget"]
    assert [r["why"] for r in rows] == ["kept", "kept", "over budget"]
    assert [r["width"]["relevance"] for r in rows] == [100.0, 50.0, 25.0]
    assert [r["width"]["decay"] for r in rows] == [50.0, 100.0, 50.0]
    assert [r["width"]["feedback"] for r in rows] == pytest.approx([33.33, 16.67, 100.0], abs=0.01)
    assert view["meter"] == {"tokens": 33.33, "budget": 50.0, "baseline": 100.0, "scale": 60}
    # both sensitive memories (one flagged, one by its key name) are masked, headers kept
    assert view["context"] == (
        f"[1970-01-01 fact user:u1:a] {REDACTED}\n[1970-01-01 fact user:u1:token] {REDACTED}\n"
    )
    assert [m["content"] for m in view["reply"]["memories"]] == [REDACTED, REDACTED]
    assert view["reply"]["candidates"][2]["feedback"] == 3.0  # the reply's figures, as they came


def test_savings_buckets_per_agent_zero_filled() -> None:
    rows = [
        UsageRow(minute=600, agent="p", recalls=2, injected=10, baseline=100, history=500),
        UsageRow(minute=660, agent="p", recalls=1, injected=5, baseline=50),
        UsageRow(minute=960, agent="w", recalls=1, injected=7, baseline=7),
        UsageRow(minute=50, agent="w", recalls=1, injected=1, baseline=1),
    ]  # before: left out
    out = series(rows, since=600, until=1199, bucket=300)
    assert out["times"] == [600, 900]
    assert out["agents"]["p"]["injected"] == [15, 0] and out["agents"]["p"]["saved"] == [135, 0]
    assert out["agents"]["w"]["baseline"] == [0, 7]
    assert out["total"]["history"] == [500, 0]
    summed = {t["agent"]: t for t in totals(rows[:3])}
    assert summed["all"]["injected"] == 22 and summed["p"]["saved_pct"] == 90.0
    assert summed["w"]["saved_pct"] == 0.0
    assert (summed["p"]["saved_history"], summed["p"]["saved_history_pct"]) == (485, 97.0)
    assert summed["w"]["saved_history"] is None  # no history reported: nothing to compare
