"""The memory tool definitions: valid JSON Schema, small, and concrete enough for a model."""

from __future__ import annotations

import re

import jsonschema
import pytest

from zeromem.integrations.langgraph_store import escape, unescape
from zeromem.schemas import KNOWN_NAMESPACES, MemoryKey
from zeromem.sdk.hooks import PreferenceRule, PreferenceRules, safe_id, safe_name
from zeromem.tools import (
    TOOL_NAMES,
    ToolArgumentError,
    check_arguments,
    compact_json,
    tool_definitions,
    tool_definitions_tokens,
)

TOOLS = tool_definitions()


def test_the_seven_tools_in_openai_format() -> None:
    assert [t["function"]["name"] for t in TOOLS] == list(TOOL_NAMES)
    for tool in TOOLS:
        assert tool["type"] == "function"
        assert set(tool["function"]) == {"name", "description", "parameters"}
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["function"]["name"])


@pytest.mark.parametrize("tool", TOOLS, ids=[t["function"]["name"] for t in TOOLS])
def test_parameters_are_valid_json_schema(tool: dict) -> None:
    params = tool["function"]["parameters"]
    jsonschema.Draft202012Validator.check_schema(params)
    jsonschema.Draft7Validator.check_schema(params)  # what older tool runtimes speak
    assert params["type"] == "object"
    assert set(params["required"]) <= set(params["properties"])
    assert params["properties"]["namespace"]["enum"] == list(KNOWN_NAMESPACES)


@pytest.mark.parametrize("tool", TOOLS, ids=[t["function"]["name"] for t in TOOLS])
def test_descriptions_are_short_and_show_a_real_key(tool: dict) -> None:
    description = tool["function"]["description"]
    assert len(description) <= 220
    keys = re.findall(r"\b[a-z]+:[A-Za-z0-9_-]+(?::[A-Za-z0-9_.-]+)?\b", description)
    assert keys, description
    for key in keys:
        MemoryKey.parse(key)


def test_definitions_stay_small() -> None:
    tokens = tool_definitions_tokens()
    assert 300 < tokens < 1000, tokens


def test_the_validator_agrees_with_jsonschema_on_samples() -> None:
    samples = [
        ("memory_write", {"namespace": "user", "owner": "u1", "name": "a", "value": 1}, True),
        ("memory_write", {"namespace": "nope", "owner": "u1", "value": 1}, False),
        ("memory_write", {"namespace": "user", "owner": "u1"}, False),
        ("memory_write", {"namespace": "user", "owner": "u1", "value": 1, "ttl_s": 0}, False),
        ("memory_read", {"namespace": "task", "owner": "t1", "name": "s", "extra": 1}, False),
        ("memory_list", {"namespace": "task", "owner": "t1", "limit": 500}, False),
        ("memory_list", {"namespace": "task", "owner": "t1", "limit": True}, False),
        ("memory_recall", {"query": "q", "namespace": "task", "owner": "t1", "budget": 300}, True),
        ("memory_update", {"namespace": "task", "owner": "t", "name": "s", "patch": []}, False),
        ("memory_write", {"namespace": "user", "owner": "u", "value": 1, "tags": ["a", 2]}, False),
    ]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for name, args, valid in samples:
        assert jsonschema.Draft202012Validator(schemas[name]).is_valid(args) is valid, args
        if valid:
            check_arguments(schemas[name], args)
        else:
            with pytest.raises(ToolArgumentError):
                check_arguments(schemas[name], args)


def test_compact_json_keeps_cjk() -> None:
    assert compact_json({"a": "中文", "b": [1, 2]}) == '{"a":"中文","b":[1,2]}'


# --- preference rules (hooks) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "slot", "polarity", "obj"),
    [
        ("Please answer in Chinese from now on.", "pref.lang", "set", "zh"),
        ("请用英文回答。", "pref.lang", "set", "en"),
        ("Call me Ada.", "profile.name", "set", "Ada"),
        ("叫我小林", "profile.name", "set", "小林"),
        ("I prefer window seats", None, "like", "window seats"),
        ("I don't like cilantro.", None, "dislike", "cilantro"),
        ("我喜欢喝咖啡", None, "like", "喝咖啡"),
        ("我不喜欢香菜！", None, "dislike", "香菜"),
        ("Never use emoji.", None, "dislike", "use emoji"),
    ],
)
def test_preference_rules(text: str, slot: str | None, polarity: str, obj: str) -> None:
    (found,) = PreferenceRules().find(text)
    assert (found.polarity, found.object) == (polarity, obj)
    if slot:
        assert found.slot == slot
    MemoryKey.parse(f"user:u1:{safe_name(found.slot)}")


def test_like_and_dislike_of_one_thing_share_a_slot() -> None:
    rules = PreferenceRules()
    assert rules.find("I like tea")[0].slot == rules.find("I don't like tea.")[0].slot


def test_plain_statements_are_not_preferences() -> None:
    assert PreferenceRules().find("The meeting is at 3pm. 我们明天去北京。") == []


def test_rules_are_pluggable() -> None:
    rules = PreferenceRules([]).extend(
        [
            PreferenceRule.keywords(
                "units", ["use metric", "公制"], polarity="set", slot="pref.units"
            )
        ]
    )
    (found,) = rules.find("Always use metric units please")
    assert (found.slot, found.object) == ("pref.units", "units please")
    assert PreferenceRules([]).find("I prefer tea") == []


def test_safe_ids_fit_the_grammar() -> None:
    for raw in ["t42", "任务 7", "a.b*c", "", "x" * 200]:
        MemoryKey.parse(f"task:{safe_id(raw)}:{safe_name(raw)}")


# --- LangGraph key escaping -----------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "_", "__x", "a b/c", "用户", "x.y", "_2F", "e\u0301", "🙂"])
def test_escape_round_trips_into_the_key_alphabet(text: str) -> None:
    escaped = escape(text)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", escaped)
    assert unescape(escaped) == text
