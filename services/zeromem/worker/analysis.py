"""The engine as the services run it: a memory analysed for recall's inverted index and
token counts computed once, at write time, instead of on every recall."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from zeromem.encoding import encode_value
from zeromem.lifecycle.redact import Redactor
from zeromem.lifecycle.vault import EncryptionPolicy
from zeromem.schemas import MemoryItem, MemoryKey
from zeromem.store.text import doc_length, index_terms, source_text, speaker_of
from zeromem.store.tokens import DEFAULT_ENCODING, count_tokens, get_encoding
from zeromem.worker.engine import DEFAULT_MAX_CLOCK_SKEW_S, Analysis, Engine


def analyse(item: MemoryItem) -> Analysis:
    return _analyse(
        item.content,
        # the name is indexed only when the memory asks (a key is not parsed for nothing)
        MemoryKey.parse(item.key).name if item.index_key else None,
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
    # Field terms (a speaker's) do not count in the length; without a speaker, and with
    # tags that cannot turn into one (ASCII, no blank), there are none: one C-level sum
    # instead of a test per term (15 µs an append, loaded, for doc_length's walk).
    if speaker_of(text or content)[0] or not all(tag.isascii() for tag in tags):
        length = doc_length(terms)
    else:
        length = sum(terms.values())
    return Analysis(terms=terms, length=length, tokens=content_tokens(content))


# Token counts of ASCII text by its pieces. tiktoken cuts a text into pieces with one
# regular expression and encodes each piece on its own, so a text's count is the sum of
# its pieces' counts; a memory's pieces are mostly words this worker has seen before.
# The expression is cl100k's own with its classes spelled out for ASCII (``\p{L}`` is
# ``[A-Za-z]``, ``\p{N}`` ``[0-9]``, ``\s`` the six ASCII blanks: not Python's ``\s``,
# which takes \x1c-\x1f too; ``$`` is ``\Z``, the end of the text only, as in Rust).
# 25 -> 15 µs per content of the append workload, and every count equal to tiktoken's
# (tests/unit/test_analysis_tokens.py). Any other text, or a tiktoken whose cl100k
# expression is not the one this was written from, is counted by tiktoken itself.
CL100K_PATTERN = (
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++"
    "[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s"
)
_BLANK = r"\t\n\x0b\x0c\r "
_ASCII_PIECES = re.compile(
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+"
    rf"| ?[^{_BLANK}A-Za-z0-9]++[\r\n]*+|[{_BLANK}]++\Z|[{_BLANK}]*[\r\n]"
    rf"|[{_BLANK}]+(?![^{_BLANK}])|[{_BLANK}]"
).findall
_PIECE_CACHE_MAX = 1 << 16
_piece_tokens: dict[str, int] = {}


def content_tokens(content: str) -> int:
    """``count_tokens(content, DEFAULT_ENCODING)``, exactly (see above)."""
    encoding = get_encoding(DEFAULT_ENCODING)
    if not content.isascii() or encoding._pat_str != CL100K_PATTERN:
        return count_tokens(content, DEFAULT_ENCODING)
    cache = _piece_tokens
    if len(cache) > _PIECE_CACHE_MAX:
        cache.clear()
    total = 0
    for piece in _ASCII_PIECES(content):
        n = cache.get(piece)
        if n is None:
            n = cache[piece] = len(encoding._encode_single_piece(piece.encode()))
        total += n
    return total


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
