"""The recall card, without servers: what the worker writes with each version of a memory,
and the memoised token counter the packer uses."""

from __future__ import annotations

import json

from zeromem.schemas import (
    Archive,
    Delete,
    Expire,
    MemoryItem,
    MemoryType,
    Patch,
    Put,
    Restore,
    Touch,
)
from zeromem.store.card import Card, card_of, decode_card
from zeromem.store.items import KeyState
from zeromem.store.keys import CARD_COMMAND_FIELD, CARD_FIELD
from zeromem.store.tokens import count_tokens, token_counter
from zeromem.worker.engine import Analysis, Engine

ITEM_KEY = "zm:acme:m:user:u1:plan"


def analyse(item):  # type: ignore[no-untyped-def]
    words = item.content.lower().split()
    return Analysis({w: words.count(w) for w in words}, len(words), len(words))


def engine() -> Engine:
    return Engine(analyse, lambda v: json.dumps(v)[:200], "cl100k_base")


def put(cid: str, **kw: object) -> Put:
    return Put(id=cid, tenant="acme", agent="a", ts=1.0, key="user:u1:plan", value=1, **kw)  # type: ignore[arg-type]


def written_card(ops: list[tuple[str, str, object, object]]) -> tuple[Card, object] | None:
    """The card and the command id the ops write, if they write one."""
    fields = {a: b for op, key, a, b in ops if op == "hs" and key == ITEM_KEY}
    if CARD_FIELD not in fields:
        assert CARD_COMMAND_FIELD not in fields
        return None
    return decode_card(fields[CARD_FIELD]), fields[CARD_COMMAND_FIELD]  # type: ignore[arg-type]


def test_the_card_holds_what_recall_reads() -> None:
    item = MemoryItem(
        key="user:u1:plan",
        value={"big": "x" * 1000},
        content="ship it",
        type=MemoryType.DECISION,
        created_at=1.0,
        updated_at=2.0,
        version=3,
        tags=("a", "b"),
        references=("user:u1:other",),
        expires_at=9.0,
        source="s",
        agent="a",
    )
    card = card_of(item)
    assert card == Card("ship it", "decision", 1.0, 2.0, 3, ("a", "b"), ("user:u1:other",), 9.0)
    assert not card.archived
    assert card_of(
        MemoryItem(
            key="user:u1:plan",
            value=1,
            content="c",
            type=MemoryType.FACT,
            created_at=1.0,
            updated_at=2.0,
            version=1,
            archived_at=3.0,
        )
    ).archived


def test_every_write_of_a_new_shape_writes_the_card_with_its_command() -> None:
    e, state = engine(), KeyState()
    first = e.decide(
        put("c1", content="alpha beta", tags=("x",), ttl_s=100.0), "user:u1:plan", state, 10.0
    )
    card, command = written_card(first.ops)  # type: ignore[misc]
    assert command == "c1"
    assert card == Card("alpha beta", "fact", 10.0, 10.0, 1, ("x",), (), 110.0)

    patch = Patch(
        id="c2",
        tenant="acme",
        agent="a",
        ts=1.0,
        key="user:u1:plan",
        patch={},
        content="alpha gamma",
    )
    patched = e.decide(patch, "user:u1:plan", state, 20.0)
    card, command = written_card(patched.ops)  # type: ignore[misc]
    assert command == "c2" and card.content == "alpha gamma" and card.version == 2

    expired = e.decide(
        Expire(id="c3", tenant="acme", agent="a", ts=1.0, key="user:u1:plan", ttl_s=None),
        "user:u1:plan",
        state,
        30.0,
    )
    card, command = written_card(expired.ops)  # type: ignore[misc]
    assert command == "c3" and card.expires_at is None and card.updated_at == 30.0


def test_a_same_shape_rewrite_leaves_the_card_to_be_distrusted() -> None:
    # Only the time index moves (see test_engine); the card keeps naming c1, not c2, which
    # is how recall knows to read the memory whole.
    e, state = engine(), KeyState()
    e.decide(put("c1", content="alpha"), "user:u1:plan", state, 1.0)
    again = e.decide(put("c2", content="alpha"), "user:u1:plan", state, 2.0)
    assert written_card(again.ops) is None


def test_a_sliding_expiry_rewrites_the_card() -> None:
    e, state = engine(), KeyState()
    e.decide(
        put("c1", content="alpha", ttl_s=10.0, refresh_on_read=True), "user:u1:plan", state, 100.0
    )
    touch = Touch(id="t1", tenant="acme", agent="reader", ts=1.0, key="user:u1:plan")
    slid = e.decide(touch, "user:u1:plan", state, 105.0)
    card, command = written_card(slid.ops)  # type: ignore[misc]
    assert command == "t1" and card.expires_at == 115.0 and card.version == 1


def test_a_restore_writes_the_card_and_a_delete_writes_none() -> None:
    e, state = engine(), KeyState()
    e.decide(put("c1", content="alpha"), "user:u1:plan", state, 1.0)
    archive = Archive(id="a1", tenant="acme", agent="a", ts=1.0, key="user:u1", older_than=50.0)
    states = {"user:u1:plan": state}
    parts = e.decide_owner(archive, states, {}, 5.0)
    assert written_card(parts[0].ops) is None
    record = decode_archived(parts[0].ops)
    state = KeyState(version=parts[0].new_version, archived=True, archived_item=record)
    restored = e.decide(
        Restore(id="r1", tenant="acme", agent="a", ts=1.0, key="user:u1:plan"),
        "user:u1:plan",
        state,
        6.0,
    )
    card, command = written_card(restored.ops)  # type: ignore[misc]
    assert command == "r1" and card.content == "alpha" and card.updated_at == 6.0
    deleted = e.decide(
        Delete(id="d1", tenant="acme", agent="a", ts=1.0, key="user:u1:plan"),
        "user:u1:plan",
        state,
        7.0,
    )
    assert written_card(deleted.ops) is None


def decode_archived(ops: list[tuple[str, str, object, object]]) -> MemoryItem:
    import msgspec

    blob = next(b for op, key, a, b in ops if op == "hs" and key.endswith(":ar"))
    return msgspec.msgpack.decode(blob, type=MemoryItem)  # type: ignore[arg-type]


def test_the_token_counter_remembers_counts_exactly() -> None:
    count = token_counter("cl100k_base")
    assert token_counter("cl100k_base") is count
    texts = ["[2026-01-01 fact user:u1:x] hello world\n", "中文回答 🙂\n", "", "a" * 500]
    for text in texts * 2:
        assert count(text) == count_tokens(text)
