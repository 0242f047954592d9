"""The engine as the services run it: a memory analysed for recall's inverted index and
token counts computed once, at write time, instead of on every recall."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from zeromem.encoding import encode_value
from zeromem.lifecycle.redact import Redactor
from zeromem.lifecycle.vault import EncryptionPolicy
from zeromem.schemas import MemoryItem, MemoryKey
from zeromem.store.text import doc_length, index_terms, source_text
from zeromem.store.tokens import DEFAULT_ENCODING, count_tokens
from zeromem.worker.engine import DEFAULT_MAX_CLOCK_SKEW_S, Analysis, Engine


def analyse(item: MemoryItem) -> Analysis:
    return _analyse(
        item.content,
        MemoryKey.parse(item.key).name,
        item.tags,
        source_text(item.value),
        item.index_key,
    )


@lru_cache(maxsize=1 << 14)
def _analyse(
    content: str, name: str | None, tags: tuple[str, ...], text: str, index_name: bool
) -> Analysis:
    # Cached because an overwrite analyses the old version too, which this worker most
    # likely analysed when it wrote it. Analysis is a pure function of these.
    terms = index_terms(content, name, tags, text=text, index_name=index_name)
    return Analysis(
        terms=terms, length=doc_length(terms), tokens=count_tokens(content, DEFAULT_ENCODING)
    )


def default_engine(
    max_clock_skew_s: float = DEFAULT_MAX_CLOCK_SKEW_S,
    redactor: Redactor | None = None,
    encryption: EncryptionPolicy | None = None,
) -> Engine:
    redactor = redactor or Redactor()

    def derive_content(value: Any) -> str:
        # From the redacted value: content is indexed, audited and injected into prompts,
        # so a password field or an API key in a value must not reach it (issue 14).
        return encode_value(redactor.value(value))

    return Engine(
        analyse=analyse,
        derive_content=derive_content,
        encoding=DEFAULT_ENCODING,
        max_clock_skew_s=max_clock_skew_s,
        encryption=encryption,
    )
