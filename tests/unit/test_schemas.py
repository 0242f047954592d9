"""The wire contract: validation rules, and the committed JSON Schema files."""

from __future__ import annotations

import re
import time
from typing import Any

import jsonschema
import msgspec
import pytest
import yaml

from zeromem import naming
from zeromem.schemas import (
    Delete,
    InvalidKeyError,
    MemoryKey,
    Put,
    RecallRequest,
    decode,
    decode_command,
    encode,
)
from zeromem.schemas.asyncapi import ASYNCAPI_FILE, HEADERS, QUERY_KINDS, render_asyncapi
from zeromem.schemas.export import DEFAULT_DIR, SCHEMAS, render, schema_of


def envelope(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "op": "put",
        "id": "c1",
        "tenant": "acme",
        "agent": "planner",
        "ts": time.time(),
        "key": "user:u10086:pref_lang",
    }
    base.update(overrides)
    return base


def test_round_trip_of_every_command() -> None:
    put = Put(
        id="c1",
        tenant="acme",
        agent="a",
        ts=1.0,
        key="task:t42:status",
        value={"state": "running"},
        content="t42 running",
        tags=("ops",),
    )
    assert decode_command(encode(put)) == put
    delete = Delete(
        id="c2", tenant="acme", agent="a", ts=1.0, key="task:t42:status", expected_version=3
    )
    assert decode_command(encode(delete)) == delete


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"op": "explode"}, "Invalid value 'explode'"),
        ({"key": "user u1 pref"}, "$.key"),
        ({"key": "user:u1:pref:with:colons"}, "$.key"),
        ({"key": "User:u1:x"}, "$.key"),
        ({"tenant": "Acme Corp"}, "$.tenant"),
        ({"id": "c 1"}, "$.id"),
        ({"id": "c1\n"}, "$.id"),
        ({"key": "user:u1:x\n"}, "$.key"),
        ({"content": "x" * 201}, "$.content"),
        ({"ts": "yesterday"}, "$.ts"),
        ({"expected_version": -1}, "$.expected_version"),
        ({"confidence": 1.5}, "$.confidence"),
        ({"surprise": 1}, "unknown field"),
        ({"type": "gossip"}, "$.type"),
    ],
)
def test_invalid_commands_are_refused_with_a_reason(
    change: dict[str, object], fragment: str
) -> None:
    with pytest.raises(msgspec.ValidationError) as info:
        decode_command(msgspec.msgpack.encode(envelope(**change)))
    assert fragment in str(info.value)


def test_envelope_checks_hold_for_values_seen_before_and_at_construction() -> None:
    """The envelope's patterns are checked once per distinct tenant and key (a cache):
    a valid value seen before must not let a bad one through, and a command built in
    Python is checked as a decoded one is."""
    for _ in range(2):  # the second time, every valid value is a cache hit
        good = decode_command(
            msgspec.msgpack.encode(envelope(id="a-b_c", tenant="acme", key="user:u1:x"))
        )
        assert (good.id, good.tenant, good.key) == ("a-b_c", "acme", "user:u1:x")
        for change in ({"tenant": "acme "}, {"key": "user:u1:x:y"}, {"id": "a-b_c!"}):
            with pytest.raises(msgspec.ValidationError):
                decode_command(msgspec.msgpack.encode(envelope(**change)))
    with pytest.raises(InvalidKeyError, match="user u1"):
        Put(id="c1", tenant="acme", agent="a", ts=1.0, key="user u1")
    with pytest.raises(ValueError, match="tenant"):
        Put(id="c1", tenant="ACME", agent="a", ts=1.0, key="user:u1:x")


def test_missing_fields_are_named() -> None:
    data = envelope()
    del data["agent"]
    with pytest.raises(msgspec.ValidationError, match="agent"):
        decode_command(msgspec.msgpack.encode(data))


def test_key_grammar() -> None:
    key = MemoryKey.parse("user:u10086:pref_lang")
    assert (key.namespace, key.owner_id, key.name, key.owner) == (
        "user",
        "u10086",
        "pref_lang",
        "user:u10086",
    )
    assert MemoryKey.parse("task:t42").name is None
    for bad in ("", "user", "user:", ":u1:x", "user:u 1:x", "user:u1:", "user:u.1:x"):
        with pytest.raises(InvalidKeyError):
            MemoryKey.parse(bad)


@pytest.mark.parametrize("filename", sorted(SCHEMAS))
def test_committed_json_schemas_match_the_code(filename: str) -> None:
    committed = (DEFAULT_DIR / filename).read_text()
    assert committed == render(SCHEMAS[filename]), (
        f"schemas/json/{filename} is stale: run `make schemas` and commit the result"
    )


def test_no_committed_schema_is_left_over() -> None:
    assert sorted(p.name for p in DEFAULT_DIR.glob("*.json")) == sorted(SCHEMAS)


def test_committed_asyncapi_document_matches_the_code() -> None:
    committed = (DEFAULT_DIR.parent / ASYNCAPI_FILE).read_text()
    assert committed == render_asyncapi(), (
        f"schemas/{ASYNCAPI_FILE} is stale: run `make schemas` and commit the result"
    )


@pytest.mark.parametrize("filename", sorted(SCHEMAS))
def test_json_schemas_pass_the_draft_2020_12_metaschema(filename: str) -> None:
    schema = schema_of(SCHEMAS[filename])
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    # An OpenAPI keyword a strict validator (Ajv) refuses as unknown.
    assert '"discriminator"' not in render(SCHEMAS[filename])


def test_a_union_stays_exact_without_discriminator() -> None:
    """Every command variant fixes ``op``: a put's body is not a valid delete."""
    validator = jsonschema.Draft202012Validator(schema_of(SCHEMAS["command.v1.json"]))
    put = envelope(value={"a": 1})
    assert validator.is_valid(put)
    assert not validator.is_valid({**put, "op": "delete"})  # a delete has no value
    assert not validator.is_valid({**put, "op": "explode"})


def test_asyncapi_document_names_every_schema_file() -> None:
    document = yaml.safe_load(render_asyncapi())
    named = {
        message["payload"]["schema"]["$ref"].removeprefix("./json/")
        for message in document["components"]["messages"].values()
    }
    # memory items and commands' parts are reached through the others
    assert set(SCHEMAS) - named == {"memory_item.v1.json", "audit_entry.v1.json"}


def test_the_contract_page_agrees_with_the_code() -> None:
    """schemas/README.md's test vectors are the shard function's, and it names every
    header and query kind the AsyncAPI document has."""
    page = (DEFAULT_DIR.parent / "README.md").read_text()
    vectors = re.findall(r'crc32\("(\w+)\\0([\w:]+)"\) = (0x[0-9a-f]{8})', page)
    assert len(vectors) >= 2
    for tenant, owner, crc in vectors:
        assert naming.shard_for(tenant, owner, 1 << 32) == int(crc, 16)
    assert naming.shard_for("acme", "user:u1", 16) == 12 and "(shard 12 of 16" in page
    for name in HEADERS:
        assert f"`{name}`" in page, name
    for kind in QUERY_KINDS:
        assert f"`{kind}`" in page, kind


# Every strategy form the services took as a free-form map before the tagged union.
OLD_STRATEGY_FORMS: list[dict[str, Any]] = [
    {"name": "default"},
    {"name": "time_window", "seconds": 604800.0},
    {"name": "by_tag", "tags": ["billing"], "boost": 3.0, "only": True},
    {"name": "by_type", "types": ["user_preference"]},
    {
        "name": "feedback_weight",
        "liked": 5.0,
        "disliked": 0.1,
        "important": 3.0,
        "max_exponent": 2.0,
    },
    {"name": "recency", "half_life_s": 3600.0, "floor": 0.0},
    {"name": "recency", "half_life_s": None},
    {"name": "no_decay"},
    {"name": "compose", "steps": [{"name": "no_decay"}, {"name": "by_tag", "tags": ["a"]}]},
]


@pytest.mark.parametrize("form", OLD_STRATEGY_FORMS, ids=lambda f: f["name"])
def test_a_strategy_keeps_its_wire_form(form: dict[str, Any]) -> None:
    wire = msgspec.msgpack.encode({"tenant": "acme", "strategy": form})
    request = decode(wire, RecallRequest)
    assert request.strategy is not None and request.strategy.__struct_config__.tag == form["name"]
    assert msgspec.msgpack.decode(encode(request))["strategy"] == form


def test_no_strategy_is_left_out_of_the_wire() -> None:
    assert "strategy" not in msgspec.msgpack.decode(encode(RecallRequest(tenant="acme")))


def test_the_published_schema_takes_every_strategy_the_services_take() -> None:
    schema = schema_of(RecallRequest)
    for form in [*OLD_STRATEGY_FORMS, {}, None]:
        jsonschema.validate({"tenant": "acme", "strategy": form}, schema)
    for bad in ({"name": "psychic"}, {"seconds": 5}, {"name": "recency"} | {"x": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"tenant": "acme", "strategy": bad}, schema)
