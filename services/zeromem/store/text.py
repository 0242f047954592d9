"""The term analyser: one definition of "term" for indexing (workers) and querying (recall).

Both sides must produce identical terms for identical text, so everything here is
deterministic and depends on nothing but the input (no locale, no models, no data files).
Changing any rule changes the index: memories written before the change keep their old
terms until rewritten, so treat edits here like a schema change.

The pipeline for ``terms()``:

1. NFKC-normalise (full-width ``ｔ４２`` becomes ``t42``, ligatures split) and lowercase.
2. Drop apostrophes so ``user's`` is one word (``users`` -> ``user``), not ``user`` + ``s``.
3. Cut the text into runs of CJK characters and the rest.
   - CJK runs (Han, kana, Hangul) have no spaces between words, so they become overlapping
     character bigrams (``中文回答`` -> ``中文 文回 回答``); a lone CJK character stays a
     unigram. Bigrams never cross punctuation or non-CJK text.
   - The rest splits on anything that is not a letter or digit. Dotted numbers stay whole
     when a digit precedes the dot (``v2.1``, ``3.14``, ``10.0.0.1``), so versions and
     addresses match exactly; ``file.txt`` still splits.
4. Drop a small list of English stop words.
5. Stem ASCII words with the Snowball English stemmer (PyStemmer: the Snowball project's
   own C implementation). Words containing digits (ids such as ``t42``, ``u10086``) and
   non-ASCII words are never stemmed.
6. Cap every term at 64 characters.

What a memory is indexed by (``index_terms``), as fields:

- its content (the short form recall injects), each term counted ``CONTENT_WEIGHT`` times;
- its source text: a string value, or the string leaves of a structured one, up to
  ``INDEX_TEXT_MAX_CHARS`` characters, when it says more than the content (a long turn
  whose content is the encoder's 200-character cut). What the content lost stays findable;
  the injected context stays the short content;
- its speaker: the ``Name:`` that opens a transcript line (``Mara: I finally...``), as
  field terms (``speaker mara``) that BM25 scores without length normalisation (a short
  chit-chat turn must not beat a long one merely by being short) and that are not part of
  the text (a turn *by* Mara is not the same as a turn that *mentions* her);
- its tags (analysed, and whole);
- its key name only when the memory asks for it (``Put.index_key``): numbered names
  (``s03-t017``) would otherwise match numbers and dates in questions.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import Stemmer

MAX_TERM_CHARS = 64
INDEX_TEXT_MAX_CHARS = 2000  # of a memory's source text (see index_terms)
CONTENT_WEIGHT = 1  # times a content term counts (2 measured worse: bench/quality/run.py)
# A speaker field term is this + a term of the speaker's name ("speaker mara"): the space
# keeps it apart from every text term and whole tag, neither of which holds whitespace.
SPEAKER_FIELD = "speaker "

# Small on purpose: only words that carry no meaning in a memory or a question about one.
# Negations ("no", "not") are dropped too: bag-of-words ranking cannot use them anyway.
STOP_WORDS = frozenset(
    (
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "so",
        "than",
        "too",
        "very",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "into",
        "onto",
        "about",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "done",
        "has",
        "have",
        "had",
        "having",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "i",
        "me",
        "my",
        "mine",
        "we",
        "us",
        "our",
        "ours",
        "you",
        "your",
        "yours",
        "he",
        "him",
        "his",
        "she",
        "her",
        "hers",
        "they",
        "them",
        "their",
        "theirs",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "how",
        "when",
        "where",
        "why",
        "will",
        "would",
        "shall",
        "should",
        "can",
        "could",
        "may",
        "might",
        "must",
        "not",
        "no",
        "nor",
        "all",
        "any",
        "some",
        "such",
        "just",
        "also",
        "only",
        "own",
        "same",
        "other",
        "each",
        "both",
        "few",
        "more",
        "most",
        "up",
        "down",
        "out",
        "over",
        "under",
        "again",
        "further",
        "once",
    )
)

# Han (BMP blocks, compatibility ideographs, the supplementary planes), kana, Hangul.
_CJK_CHARS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
# One capturing group: re.split returns [other, cjk, other, cjk, ..., other].
_CJK_SPLIT = re.compile(f"([{_CJK_CHARS}]+)")
# A dotted number needs a digit right before its first dot ("v2.1"), otherwise plain runs
# of letters and digits ([^\W_] is \w without the underscore). Written as "a run, then
# the dotted part if the run ends in a digit", the words of ``[^\W_]*\d(?:\.\d+)+|[^\W_]+``
# (a dot can only follow a run's last character), without that form's backtracking
# through every word in search of a digit and a dot: the append workload's contents and
# texts 24 -> 14 µs of findall (two alternating timings, the same words;
# tests/unit/test_recall_text.py compares both forms). ASCII text (lowercased) takes the
# same expression with its classes spelled out: 14 -> 11 µs.
_WORD = re.compile(r"[^\W_]+(?:(?<=\d)(?:\.\d+)+)?")
_ASCII_WORD = re.compile(r"[a-z0-9]+(?:(?<=[0-9])(?:\.[0-9]+)+)?")
_APOSTROPHES = str.maketrans("", "", "'\u2018\u2019\u02bc")
# "I'm", "what's", "we've": the clitic goes, so the word meets the stop-word list instead of
# becoming a term of its own ("im", "whats").
_CONTRACTION = re.compile("(?<=[a-z])['\u2019\u02bc](?:m|s|re|ve|ll|d)\\b")

# Key names: separators, then camelCase boundaries ("prefLang", "HTTPServer" -> HTTP Server).
_NAME_SEPARATORS = re.compile(r"[_\-./@:]+")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# Generated names (a command id in ULID layout) are unique noise: never useful as terms.
_GENERATED_NAME = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")

# "Mara: ...", "Anna Lee: ...": one to three capitalised words and a colon open the line.
_SPEAKER = re.compile(r"\s*([A-Z][^\s:]{0,40}(?: [A-Z][^\s:]{0,40}){0,2}):\s")


def terms(text: str) -> list[str]:
    """The terms of ``text``, in order, with repeats (callers count or dedupe)."""
    if not text:
        return []
    if text.isascii():
        # What agents mostly write. ASCII is its own NFKC form and holds no CJK character,
        # so this is the full pipeline without its no-op steps: 15 against 24 µs of
        # process time for the append workload's contents (best of 5, the same terms).
        text = text.lower()
        if "'" in text:
            text = _CONTRACTION.sub("", text).replace("'", "")
        return [term for term in map(_term, _ASCII_WORD.findall(text)) if term is not None]
    return _normalised_terms(text)


def _normalised_terms(text: str) -> list[str]:
    """``terms`` by the pipeline of the module docstring, step by step (any text)."""
    text = _CONTRACTION.sub("", unicodedata.normalize("NFKC", text).lower()).translate(_APOSTROPHES)
    out: list[str] = []
    # Even indexes hold non-CJK text, odd indexes hold CJK runs.
    for index, part in enumerate(_CJK_SPLIT.split(text)):
        if not part:
            continue
        if index % 2:
            if len(part) == 1:
                out.append(part)
            else:
                out.extend(part[j : j + 2] for j in range(len(part) - 1))
            continue
        out.extend(term for term in map(_term, _WORD.findall(part)) if term is not None)
    return out


@lru_cache(maxsize=1 << 16)
def _term(word: str) -> str | None:
    """The term a word of ``terms`` becomes (None for a stop word): one cached look-up per
    word instead of a stop-word test, a cached stem and a cut."""
    if word in STOP_WORDS:
        return None
    return stem(word)[:MAX_TERM_CHARS]


def speaker_of(text: str) -> tuple[str, int]:
    """The speaker a transcript line opens with (``"Mara: I..."`` -> ``("Mara", 6)``): the
    name and where the rest begins; ``("", 0)`` for a line with none."""
    match = _SPEAKER.match(text)
    if match is None:
        return "", 0
    return match.group(1), match.end()


def source_text(value: Any) -> str:
    """The text of a memory's value worth indexing: a string value itself, or the string
    leaves of a structured one in order (keys and numbers are left out: a number per
    memory would make a posting list per number). Cut at ``INDEX_TEXT_MAX_CHARS``."""
    kind = type(value)
    if kind is str:
        text: str = value
        return text[:INDEX_TEXT_MAX_CHARS]
    if kind is not dict and kind is not list:
        return value[:INDEX_TEXT_MAX_CHARS] if isinstance(value, str) else ""
    leaves: dict[str, Any] | list[Any] = value
    parts: list[str] = []
    _string_leaves(leaves, parts, INDEX_TEXT_MAX_CHARS)
    return (parts[0] if len(parts) == 1 else " ".join(parts))[:INDEX_TEXT_MAX_CHARS]


def _string_leaves(value: dict[str, Any] | list[Any], out: list[str], budget: int) -> int:
    """Append the string leaves of ``value`` to ``out`` until ``budget`` characters (and a
    separator each) are taken; what is left of the budget. type() checks first and no
    explicit stack: 0.6 µs on the write benchmark's value against 1.4 µs for the first
    version (isinstance on a union, a stack)."""
    item: Any  # a leaf or a nested dict or list: told apart by type() below
    for item in value.values() if type(value) is dict else value:
        kind = type(item)
        if kind is str:
            out.append(item)
            budget -= len(item) + 1
        elif kind is dict or kind is list:
            budget = _string_leaves(item, out, budget)
        elif isinstance(item, str):  # a subclass (an enum member): rare, still text
            out.append(item)
            budget -= len(item) + 1
        elif isinstance(item, dict | list):
            budget = _string_leaves(item, out, budget)
        if budget <= 0:
            break
    return budget


def same_source_text(old: Any, new: Any) -> bool:
    """``source_text(old) == source_text(new)``. A worker asks this on every overwrite
    whose content is unchanged (is the index still right?); when only numbers in the value
    changed, one walk over both answers it without building either text (0.8 µs on the
    write benchmark's values, against 2.4 µs for two ``source_text`` calls of the first
    version). With both texts built each time a worker spent +18% CPU per command over
    main (bench/write_cost.py, median of 5 paired runs); with this, +4% (12 pairs)."""
    return _same_strings(old, new) or source_text(old) == source_text(new)


_NO_TEXT = frozenset((int, float, bool, type(None)))  # leaves that give no source text


def _same_strings(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are containers of the same shape with the same strings in
    the same places (so the same source text); False when this cannot tell."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is str:
        text: str = a
        other: str = b
        return text == other
    if kind is dict or kind is list:
        if len(a) != len(b):
            return False
        if kind is dict:
            a, b = a.values(), b.values()
        for x, y in zip(a, b, strict=False):  # the lengths are equal
            kind = type(x)
            if kind is str:
                if x != y:
                    return False
            elif kind in _NO_TEXT:
                if type(y) not in _NO_TEXT:
                    return False
            elif not _same_strings(x, y):
                return False
        return True
    # Same type, no text in either (a number, a bool, None); a subclass of str, dict or
    # list is left to the exact comparison.
    return not isinstance(a, str | dict | list)


def index_terms(
    content: str,
    name: str | None,
    tags: Sequence[str],
    *,
    text: str = "",
    index_name: bool = False,
) -> dict[str, int]:
    """Term frequencies of one memory, by field (see the module docstring): content (each
    term ``CONTENT_WEIGHT`` times), source ``text`` when it differs from the content, the
    speaker (field terms), tags, and the key ``name`` only with ``index_name``.

    The name is split on ``_ - . / @ :`` and camelCase boundaries before analysis, so
    ``pref_lang`` and ``prefLang`` both give ``pref``, ``lang``. Each tag is analysed like
    text *and* kept whole (lowercased, e.g. ``billing-v2``) so an exact tag is a term of
    its own; the whole form is not added again when the analysis already produced it.
    """
    tf: dict[str, int] = {}

    def add(words: list[str], times: int = 1) -> None:
        for word in words:
            tf[word] = tf.get(word, 0) + times

    speaker, rest = speaker_of(text or content)
    if speaker:
        for word in terms(speaker):
            tf[SPEAKER_FIELD + word] = 1
        if content.startswith(speaker + ":"):
            content = content[len(speaker) + 1 :]
        if text:
            text = text[rest:]
    content_terms = terms(content)
    add(content_terms, CONTENT_WEIGHT)
    if text and " ".join(text.split()) != " ".join(content.split()):
        add(_continued_terms(content, content_terms, text[:INDEX_TEXT_MAX_CHARS]))
    if index_name and name and not _GENERATED_NAME.match(name):
        add(terms(_CAMEL_BOUNDARY.sub(" ", _NAME_SEPARATORS.sub(" ", name))))
    for tag in tags:
        analysed = terms(tag)
        add(analysed)
        whole = unicodedata.normalize("NFKC", tag).lower()[:MAX_TERM_CHARS]
        if whole and analysed != [whole]:
            add([whole])
    return tf


_BLANKS = " \t\n\r"


def _continued_terms(content: str, content_terms: list[str], text: str) -> list[str]:
    """``terms(text)``, without analysing again a content that ``text`` opens with (the
    encoder's cut of a long text, or a value's text with more leaves after it): when the
    content ends where ``text`` has an ASCII blank, the blank separates both analyses
    (normalisation, lowercasing, contractions and words never reach across it), so the
    text's terms are the content's followed by the rest's. Leading blanks make no term
    (a speaker's content keeps the blank after "Name:", its text does not)."""
    body = content.lstrip(_BLANKS)
    end = len(body)
    if end and len(text) > end and text[end] in _BLANKS and text.startswith(body):
        return content_terms + terms(text[end:])
    return terms(text)


def memory_terms(
    content: str, key_name: str | None, tags: Sequence[str], value: Any, index_key: bool
) -> dict[str, int]:
    """``index_terms`` of a stored memory's fields: what the workers index it by."""
    return index_terms(content, key_name, tags, text=source_text(value), index_name=index_key)


def field_terms(query_terms: Sequence[str]) -> list[str]:
    """The speaker field terms a query looks up beside its text terms: any query word may
    be the name of whoever said something."""
    return [SPEAKER_FIELD + t for t in query_terms if not t.startswith(SPEAKER_FIELD)]


def is_field_term(term: str) -> bool:
    return term.startswith(SPEAKER_FIELD)


def doc_length(tf: Mapping[str, int]) -> int:
    """The document length BM25 normalises by: the indexed text terms, with repeats (field
    terms are scored without length normalisation and do not count)."""
    return sum(n for term, n in tf.items() if not term.startswith(SPEAKER_FIELD))


# --- Stemmer -------------------------------------------------------------------------

_SNOWBALL = Stemmer.Stemmer("english")


@lru_cache(maxsize=1 << 16)  # a vocabulary repeats: stemming each word once is most of the win
def stem(word: str) -> str:
    """The Snowball English stem of a lowercase ASCII word (``eating`` and ``eat`` meet at
    ``eat``, ``classes`` at ``class``); other words unchanged. Stems are not always words
    (``pottery`` -> ``potteri``): they only have to agree between indexing and querying."""
    if len(word) < 3 or not word.isascii() or not word.isalpha():
        return word
    stemmed: str = _SNOWBALL.stemWord(word)
    return stemmed


__all__ = [
    "CONTENT_WEIGHT",
    "INDEX_TEXT_MAX_CHARS",
    "MAX_TERM_CHARS",
    "SPEAKER_FIELD",
    "STOP_WORDS",
    "doc_length",
    "field_terms",
    "index_terms",
    "is_field_term",
    "memory_terms",
    "same_source_text",
    "source_text",
    "speaker_of",
    "stem",
    "terms",
]
