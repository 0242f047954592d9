"""Hypothesis strategies for hostile messages: commands, batch messages, raw msgpack and
read requests, shaped the way the issue-12 findings were (mixed and non-string map keys,
extension types, deep nesting of lists and maps, huge arrays, NaN and infinities, lone
surrogates, oversize strings, batch messages of extreme lengths, every op).

Messages are built as plain Python structures and packed with ``msgpack`` (which, unlike
the services' own encoder, packs whatever it is given: integer and tuple map keys, ext
types, strings holding lone surrogates), so nothing here passes through the contract the
services enforce.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgpack
from hypothesis import strategies as st

from zeromem import naming

TENANT = "hostile"
AGENT = "fuzz"  # the subject's agent: what the server let the publisher use
OWNERS = [f"user:h{i}" for i in range(24)]
_packer = msgpack.Packer(use_bin_type=True, unicode_errors="surrogatepass")


def pack(value: Any) -> bytes:
    return _packer.pack(value)


@dataclass
class Hostile:
    """One hostile message: published on ``subject`` (a command's, or a query's)."""

    category: str
    payload: bytes
    owner: str = "user:h0"  # whose shard a command message goes to
    headers: dict[str, str] = field(default_factory=dict)
    read: str = ""  # for a request: get, list, recall or stats

    def subject(self, shards: int) -> str:
        if self.read:
            return naming.query_subject(TENANT, AGENT, self.read)
        return naming.command_subject(TENANT, naming.shard_for(TENANT, self.owner, shards), AGENT)


# --- building blocks -----------------------------------------------------------------------

surrogates = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
texts = st.text(max_size=12) | st.text(st.characters(), max_size=12) | surrogates
odd_keys = (
    st.integers(-(2**63), 2**64 - 1)
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=True)
    | st.binary(max_size=4)
    | st.tuples(st.integers(0, 9), st.integers(0, 9))
)
ext_values = st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8)) | st.builds(
    msgpack.Timestamp, st.integers(0, 2**32 - 1), st.integers(0, 999_999_999)
)
non_finite = st.sampled_from([float("nan"), float("inf"), float("-inf")])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def anything(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Nested lists and maps around ``leaves`` (and ordinary values), any map keys."""
    return st.recursive(
        scalars | leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(max_size=6) | odd_keys, inner, max_size=4)
        ),
        max_leaves=10,
    )


def _nest(depth: int, kind: str) -> Any:
    value: Any = None
    for i in range(depth):
        value = [value] if kind == "lists" or (kind == "mixed" and i % 2) else {"k": value}
    return value


def _nested_raw(depth: int, kind: str) -> bytes:
    """``_nest`` as msgpack, built byte by byte (a packer refuses such depths itself)."""
    one_list, one_map = b"\x91", b"\x81\xa1k"
    return (
        b"".join(
            one_list if kind == "lists" or (kind == "mixed" and i % 2) else one_map
            for i in range(depth)
        )
        + b"\xc0"
    )


def pack_with_raw(fields: dict[Any, Any], name: str, raw: bytes) -> bytes:
    """``fields`` packed as a map, plus ``name`` whose value is the msgpack ``raw``."""
    count = len(fields) + 1
    head = bytes((0x80 | count,)) if count < 16 else b"\xde" + count.to_bytes(2, "big")
    body = b"".join(pack(k) + pack(v) for k, v in fields.items())
    return head + body + pack(name) + raw


OPS = ["put", "patch", "delete", "expire", "feedback", "touch", "forget", "archive", "restore"]


@st.composite
def envelope(draw: st.DrawFn, op: str | None = None) -> tuple[dict[Any, Any], str]:
    """A command's envelope for a hostile owner: (fields, owner)."""
    owner = draw(st.sampled_from(OWNERS))
    op = op or draw(st.sampled_from(OPS))
    key = owner if op in ("forget", "archive") else f"{owner}:k{draw(st.integers(0, 3))}"
    fields: dict[Any, Any] = {
        "op": op,
        "id": f"x{time.time_ns()}{draw(st.integers(0, 999))}",
        "tenant": TENANT,
        "agent": AGENT,
        "ts": time.time(),
        "key": key,
    }
    return fields, owner


def _command(category: str, fields: dict[Any, Any], owner: str) -> Hostile:
    return Hostile(category, pack(fields), owner)


# --- the categories ----------------------------------------------------------------------


@st.composite
def map_keys(draw: st.DrawFn) -> Hostile:
    fields, owner = draw(envelope(draw(st.sampled_from(["put", "patch"]))))
    bad = draw(st.dictionaries(odd_keys, json_like, min_size=1, max_size=3))
    good = draw(st.dictionaries(st.text(max_size=6), json_like, max_size=3))
    value = {**good, **bad}
    if draw(st.booleans()):
        value = {"outer": [value]}
    fields["value" if fields["op"] == "put" else "patch"] = value
    return _command("map keys", fields, owner)


@st.composite
def ext_types(draw: st.DrawFn) -> Hostile:
    fields, owner = draw(envelope(draw(st.sampled_from(["put", "patch"]))))
    value = draw(anything(ext_values).filter(_holds_ext))
    fields["value" if fields["op"] == "put" else "patch"] = value
    return _command("ext types", fields, owner)


def _holds_ext(value: Any) -> bool:
    if isinstance(value, (msgpack.ExtType, msgpack.Timestamp)):
        return True
    if isinstance(value, list):
        return any(_holds_ext(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_ext(v) for v in value.values())
    return False


@st.composite
def deep_nesting(draw: st.DrawFn) -> Hostile:
    fields, owner = draw(envelope(draw(st.sampled_from(["put", "patch"]))))
    depth = draw(st.integers(33, 600) | st.integers(600, 20_000))
    raw = _nested_raw(depth, draw(st.sampled_from(["lists", "maps", "mixed"])))
    name = "value" if fields["op"] == "put" else "patch"
    return Hostile("deep nesting", pack_with_raw(fields, name, raw), owner)


@st.composite
def huge_arrays(draw: st.DrawFn) -> Hostile:
    fields, owner = draw(envelope("put"))
    n = draw(st.integers(1_000, 120_000))
    where = draw(st.sampled_from(["value", "tags", "references", "value_ints"]))
    if where == "value":
        fields["value"] = [None] * n
    elif where == "value_ints":
        fields["value"] = list(range(n))
    elif where == "tags":
        fields["tags"] = [f"t{i}" for i in range(min(n, 20_000))]
    else:
        fields["references"] = [f"{owner}:r{i}" for i in range(min(n, 20_000))]
    return _command("huge arrays", fields, owner)


@st.composite
def non_finite_numbers(draw: st.DrawFn) -> Hostile:
    op = draw(st.sampled_from(["put", "expire", "forget", "archive", "put"]))
    fields, owner = draw(envelope(op))
    number = draw(non_finite)
    where = {
        "put": ["ts", "ttl_s", "confidence", "value"],
        "expire": ["ts", "ttl_s"],
        "forget": ["since", "until", "ts"],
        "archive": ["older_than", "ts"],
    }[op]
    target = draw(st.sampled_from(where))
    fields[target] = {"x": [number]} if target == "value" else number
    return _command("NaN / infinity", fields, owner)


@st.composite
def lone_surrogates(draw: st.DrawFn) -> Hostile:
    fields, owner = draw(envelope("put"))
    bad = draw(surrogates)
    where = draw(
        st.sampled_from(["key", "agent", "content", "tags", "value", "value_key", "id", "source"])
    )
    if where == "key":
        fields["key"] = f"{owner}:{bad}"
    elif where == "tags":
        fields["tags"] = [bad]
    elif where == "value":
        fields["value"] = {"v": bad}
    elif where == "value_key":
        fields["value"] = {bad: 1}
    else:
        fields[where] = bad
    return _command("lone surrogates", fields, owner)


@st.composite
def oversize_strings(draw: st.DrawFn) -> Hostile:
    op = draw(st.sampled_from(["put", "put", "forget"]))
    fields, owner = draw(envelope(op))
    size = draw(st.integers(200, 900_000))
    fields_of_put = ["key", "agent", "content", "tags", "source", "id", "value"]
    where = draw(st.sampled_from(["prefix"] if op == "forget" else fields_of_put))
    long = "x" * size
    if where == "key":
        fields["key"] = f"{owner}:{long}"
    elif where == "tags":
        fields["tags"] = [long]
    elif where == "prefix":
        fields["prefix"] = f"{owner}:{long}"
    else:
        fields[where] = long
    return _command("oversize strings", fields, owner)


@st.composite
def batch_lengths(draw: st.DrawFn) -> Hostile:
    owner = draw(st.sampled_from(OWNERS))
    n = draw(
        st.sampled_from([0, 1, 2, 127, 128, 999, 1000, 1001, 5000, 50_000]) | st.integers(0, 3000)
    )
    kind = draw(st.sampled_from(["nils", "puts", "mixed", "nested", "not_an_array"]))
    if kind == "nils":
        payload = pack([None] * n)
    elif kind == "not_an_array":
        payload = pack({"op": "put", "n": n})
    else:
        parts = []
        for i in range(min(n, 3000)):
            fields = {
                "op": "put",
                "id": f"b{time.time_ns()}{i}",
                "tenant": TENANT,
                "agent": AGENT,
                "ts": time.time(),
                "key": f"{owner}:b{i % 7}",
                "value": i,
            }
            if kind == "mixed" and i % 3 == 1:
                fields["value"] = {1: "int key"}
            parts.append(fields if kind != "nested" else [fields])
        payload = pack(parts)
    claimed = str(draw(st.sampled_from([n, n + 1, max(n - 1, 0), 1])))
    return Hostile("batch lengths", payload, owner, headers={naming.BATCH_HEADER: claimed})


@st.composite
def every_op(draw: st.DrawFn) -> Hostile:
    fields, owner = draw(envelope(draw(st.sampled_from([*OPS, "explode", ""]))))
    extra = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "value",
                    "patch",
                    "content",
                    "type",
                    "tags",
                    "references",
                    "source",
                    "confidence",
                    "ttl_s",
                    "refresh_on_read",
                    "sensitive",
                    "expected_version",
                    "kind",
                    "prefix",
                    "since",
                    "until",
                    "older_than",
                    "v",
                    "unknown",
                    "key",
                    "ts",
                ]
            ),
            anything(ext_values | non_finite | surrogates),
            max_size=4,
        )
    )
    fields.update(extra)
    return _command("every op", fields, owner)


@st.composite
def raw_msgpack(draw: st.DrawFn) -> Hostile:
    owner = draw(st.sampled_from(OWNERS))
    if draw(st.booleans()):
        payload = draw(st.binary(max_size=300))
    else:
        payload = pack(draw(anything(ext_values | non_finite | surrogates)))
    return Hostile("raw msgpack", payload, owner)


@st.composite
def hostile_requests(draw: st.DrawFn) -> Hostile:
    kind = draw(st.sampled_from(["get", "list", "recall", "stats", "info"]))
    fields: dict[Any, Any] = {"tenant": TENANT}
    choice = draw(
        st.sampled_from(
            ["reader", "numbers", "owners", "query", "strategy", "garbage", "prefix", "raw"]
        )
    )
    if choice == "raw":
        return Hostile("hostile requests", draw(st.binary(max_size=200)), read=kind)
    if choice == "reader":
        fields["reader"] = draw(
            st.sampled_from(["a|b", "x" * 200_000, "tab\t", "ключ"]) | surrogates
        )
    elif choice == "numbers":
        number = draw(non_finite | st.sampled_from([-1.0, 1e300, 0.0]))
        if kind == "stats":
            fields[draw(st.sampled_from(["since", "until"]))] = number
        else:
            kind = "recall"
            fields["scope"] = {
                "owners": ["user:h1"],
                draw(st.sampled_from(["since", "until"])): number,
            }
    elif choice == "owners":
        kind = "recall"
        fields["scope"] = {"owners": [f"user:o{i}" for i in range(draw(st.integers(65, 5000)))]}
    elif choice == "query":
        kind = "recall"
        fields.update(
            query=" ".join(f"w{i}" for i in range(draw(st.integers(65, 30_000)))),
            scope={"owners": ["user:h1"]},
        )
    elif choice == "strategy":
        kind = "recall"
        fields.update(scope={"owners": ["user:h1"]}, query="x")
        strategy = draw(
            st.sampled_from(
                [
                    "deep",
                    {"name": "compose", "steps": _nest(40, "lists")},
                    {1: 2, "name": "recency"},
                    {"name": float("nan")},
                ]
            )
        )
        if strategy == "deep":
            return Hostile(
                "hostile requests",
                pack_with_raw(fields, "strategy", _nested_raw(5000, "maps")),
                read=kind,
            )
        fields["strategy"] = strategy
    elif choice == "prefix":
        fields["prefix" if kind != "get" else "key"] = "user:h1:" + "p" * 300_000
    else:
        fields.update(
            draw(
                st.dictionaries(
                    st.text(max_size=8) | odd_keys, anything(ext_values | non_finite), max_size=4
                )
            )
        )
    return Hostile("hostile requests", pack(fields), read=kind)


CATEGORIES: dict[str, st.SearchStrategy[Hostile]] = {
    "map keys": map_keys(),
    "ext types": ext_types(),
    "deep nesting": deep_nesting(),
    "huge arrays": huge_arrays(),
    "NaN / infinity": non_finite_numbers(),
    "lone surrogates": lone_surrogates(),
    "oversize strings": oversize_strings(),
    "batch lengths": batch_lengths(),
    "every op": every_op(),
    "raw msgpack": raw_msgpack(),
    "hostile requests": hostile_requests(),
}
