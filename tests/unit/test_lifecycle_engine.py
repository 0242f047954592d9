"""Issue 4's decision rules, without servers: touch, restore, forget and archive."""

from __future__ import annotations

import json

from zeromem.schemas import Applied, Archive, Forget, Put, Rejected, Restore, Touch
from zeromem.store.items import KeyState
from zeromem.worker.engine import ARCHIVE, TOMBSTONE, WRITE, Analysis, Engine


def analyse(item):  # type: ignore[no-untyped-def]
    words = item.content.lower().split()
    return Analysis({w: words.count(w) for w in words}, len(words), len(words))


def engine() -> Engine:
    return Engine(analyse, lambda v: json.dumps(v)[:200], "cl100k_base")


def put(key: str, cid: str = "p", **kw: object) -> Put:
    return Put(id=cid, tenant="acme", agent="a", ts=1.0, key=key, value=1, **kw)  # type: ignore[arg-type]


def test_touch_slides_a_sliding_expiry_without_a_version_bump() -> None:
    e, state = engine(), KeyState()
    e.decide(put("user:u1:s", ttl_s=10.0, refresh_on_read=True), "user:u1:s", state, 100.0)
    touch = Touch(id="t1", tenant="acme", agent="reader", ts=1.0, key="user:u1:s")
    slid = e.decide(touch, "user:u1:s", state, 105.0)
    assert slid.action == WRITE and slid.new_version == 1 and slid.item.expires_at == 115.0
    assert ("za", "zm:acme:exp", 115.0, "user:u1:s") in slid.ops
    fixed, fixed_state = engine(), KeyState()
    fixed.decide(put("user:u1:f", ttl_s=10.0), "user:u1:f", fixed_state, 100.0)
    unchanged = fixed.decide(touch, "user:u1:f", fixed_state, 105.0)
    assert unchanged.action == "-" and isinstance(unchanged.result, Applied)
    late = e.decide(touch, "user:u1:s", state, 200.0)
    assert isinstance(late.result, Rejected)


def test_forget_and_archive_decide_over_an_owner() -> None:
    e = engine()
    states = {}
    for i, key in enumerate(("task:t1:a1", "task:t1:a2", "task:t1:b1")):
        states[key] = KeyState()
        e.decide(put(key, f"p{i}", content=f"note {i}"), key, states[key], 10.0 + i)
    forget = Forget(
        id="f", tenant="acme", agent="a", ts=1.0, key="task:t1", prefix="task:t1:a", since=10.5
    )
    outcomes = e.decide_owner(forget, states, {}, 20.0)
    assert [o.key for o in outcomes] == ["task:t1:a2", "task:t1"]
    assert outcomes[0].action == TOMBSTONE and not outcomes[0].record and outcomes[-1].record
    assert outcomes[-1].result.keys == ("task:t1:a2",)

    archive = Archive(id="ar", tenant="acme", agent="a", ts=1.0, key="task:t1", older_than=11.5)
    archived = e.decide_owner(archive, states, {}, 30.0)
    assert [(o.key, o.action) for o in archived[:-1]] == [("task:t1:a1", ARCHIVE)]
    assert archived[-1].result.keys == ("task:t1:a1",)  # a2 was forgotten; b1 is too new
    assert any(op[0] == "hs" and op[1].endswith(":ar") for op in archived[0].ops)
    bad = e.decide_owner(
        Forget(id="x", tenant="acme", agent="a", ts=1.0, key="task:t1", prefix="task:t2:"),
        states,
        {},
        1.0,
    )
    assert len(bad) == 1 and isinstance(bad[0].result, Rejected)


def test_restore_continues_the_version_past_the_archive() -> None:
    e, state = engine(), KeyState()
    e.decide(put("user:u1:x", content="kept safe"), "user:u1:x", state, 1.0)
    archived_item = state.item
    state = KeyState(
        version=2, item=None, last_command="ar", archived=True, archived_item=archived_item
    )
    restore = Restore(id="r", tenant="acme", agent="b", ts=1.0, key="user:u1:x")
    outcome = e.decide(restore, "user:u1:x", state, 50.0)
    assert outcome.result.version == 3 and outcome.item.created_at == 1.0
    assert outcome.item.updated_at == 50.0 and outcome.item.content == "kept safe"
    again = e.decide(restore, "user:u1:x", state, 51.0)
    assert isinstance(again.result, Rejected) and again.result.reason.startswith("exists")
