"""The Lua scripts under store/: each documents its arguments, and names only hash fields
that store.keys defines (the scripts cannot import the constants, so this keeps them in
step)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from zeromem.store import keys, scripts

SCRIPTS = [v for v in vars(scripts).values() if isinstance(v, scripts.Script)]
LUA_FILES = sorted(
    p.name for p in resources.files("zeromem.store").iterdir() if p.name.endswith(".lua")
)
# Hash commands whose third argument onwards are field names.
_HASH_CALL = re.compile(r"redis\.call\('H(?:GET|MGET|SET|DEL|INCRBY|STRLEN)', [^,]+, ([^)]*)\)")
KNOWN_FIELDS = {
    keys.VERSION_FIELD,
    keys.DATA_FIELD,
    keys.LAST_COMMAND_FIELD,
    *keys.FEEDBACK_FIELDS.values(),
    keys.DOC_LENGTH_FIELD,
    keys.ARCHIVED_FIELD,
    keys.CARD_FIELD,
    keys.CARD_COMMAND_FIELD,
    keys.STORED_MEMORIES,
    keys.STORED_BYTES,
}


def test_every_lua_file_is_loaded_by_the_scripts_module() -> None:
    used = {s.name for s in SCRIPTS} | {lib for s in SCRIPTS for lib in s.libraries}
    assert used == set(LUA_FILES)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_a_script_documents_its_keys_and_arguments(script: scripts.Script) -> None:
    header = resources.files("zeromem.store").joinpath(script.name).read_text()[:3000]
    assert "KEYS" in header
    if "ARGV" in script.source:
        assert "ARGV" in header


@pytest.mark.parametrize("name", LUA_FILES)
def test_a_script_names_only_known_hash_fields(name: str) -> None:
    source = resources.files("zeromem.store").joinpath(name).read_text()
    literals = {
        lit for args in _HASH_CALL.findall(source) for lit in re.findall(r"'([a-z]+)'", args)
    }  # a value written ('', '1') is not a name
    if "redis.call('H" in source:
        assert literals, "no hash field found: the pattern no longer matches the script"
    if name == "commit.lua":  # the script that writes a memory names most of them
        assert {keys.VERSION_FIELD, keys.DATA_FIELD, keys.ARCHIVED_FIELD} <= literals
    assert literals <= KNOWN_FIELDS, literals - KNOWN_FIELDS


def test_read_only_scripts_are_flagged_so() -> None:
    # run with EVALSHA_RO: the read services' Redis user may not write
    assert scripts.RECALL_SURVEY.readonly and scripts.RECALL_FETCH.readonly
    assert scripts.RECALL_STAGE_ONE.readonly and scripts.RECALL_NEIGHBOURS.readonly
    assert scripts.RECALL_STAGE_TWO.readonly
    assert scripts.OWNERS.readonly
    assert not scripts.COMMIT.readonly and not scripts.CACHE_TOKENS.readonly


def test_a_library_goes_after_the_flags_line() -> None:
    source = scripts.RECALL_SURVEY.source
    assert source.startswith("#!lua flags=no-writes\n")
    assert source.index("local function read(") < source.index("local call, tonumber")
