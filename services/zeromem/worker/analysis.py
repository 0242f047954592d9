"""The engine as the services run it: content analysed for recall's inverted index and
token counts computed once, at write time, instead of on every recall."""

from __future__ import annotations

from zeromem.encoding import encode_value
from zeromem.recall.text import doc_length, index_terms
from zeromem.recall.tokens import count_tokens
from zeromem.schemas import MemoryItem, MemoryKey
from zeromem.worker.engine import Analysis, Engine

DEFAULT_ENCODING = "cl100k_base"


def analyse(item: MemoryItem) -> Analysis:
    terms = index_terms(item.content, MemoryKey.parse(item.key).name, item.tags)
    return Analysis(
        terms=terms, length=doc_length(terms), tokens=count_tokens(item.content, DEFAULT_ENCODING)
    )


def default_engine() -> Engine:
    return Engine(analyse=analyse, derive_content=encode_value, encoding=DEFAULT_ENCODING)
