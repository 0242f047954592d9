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
5. Stem ASCII words with a conservative suffix stemmer (Porter's step 1a/1b with guards):
   plurals (``-s``, ``-es`` after x/ch/sh, ``-ies`` -> ``-y``), ``-ed`` and ``-ing``.
   Words containing digits (ids such as ``t42``, ``u10086``) and non-ASCII words are never
   stemmed.
6. Cap every term at 64 characters.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from functools import lru_cache

MAX_TERM_CHARS = 64

# Small on purpose: only words that carry no meaning in a memory or a question about one.
# Negations ("no", "not") are dropped too: bag-of-words ranking cannot use them anyway.
STOP_WORDS = frozenset((
    "a", "an", "the", "and", "or", "but", "if", "then", "else", "so", "than", "too", "very", "of",
    "to", "in", "on", "at", "by", "for", "with", "from", "into", "onto", "about", "as", "is",
    "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "done", "has", "have",
    "had", "having", "it", "its", "this", "that", "these", "those", "there", "here", "i", "me",
    "my", "mine", "we", "us", "our", "ours", "you", "your", "yours", "he", "him", "his", "she",
    "her", "hers", "they", "them", "their", "theirs", "what", "which", "who", "whom", "whose",
    "how", "when", "where", "why", "will", "would", "shall", "should", "can", "could", "may",
    "might", "must", "not", "no", "nor", "all", "any", "some", "such", "just", "also", "only",
    "own", "same", "other", "each", "both", "few", "more", "most", "up", "down", "out", "over",
    "under", "again", "further", "once",
))

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
# of letters and digits ([^\W_] is \w without the underscore).
_WORD = re.compile(r"[^\W_]*\d(?:\.\d+)+|[^\W_]+")
_APOSTROPHES = str.maketrans("", "", "'\u2018\u2019\u02bc")
# "I'm", "what's", "we've": the clitic goes, so the word meets the stop-word list instead of
# becoming a term of its own ("im", "whats").
_CONTRACTION = re.compile("(?<=[a-z])['\u2019\u02bc](?:m|s|re|ve|ll|d)\\b")

# Key names: separators, then camelCase boundaries ("prefLang", "HTTPServer" -> HTTP Server).
_NAME_SEPARATORS = re.compile(r"[_\-./@:]+")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# Generated names (a command id in ULID layout) are unique noise: never useful as terms.
_GENERATED_NAME = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")

_VOWELS = frozenset("aeiou")


def terms(text: str) -> list[str]:
    """The terms of ``text``, in order, with repeats (callers count or dedupe)."""
    if not text:
        return []
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
        for word in _WORD.findall(part):
            if word in STOP_WORDS:
                continue
            out.append(stem(word)[:MAX_TERM_CHARS])
    return out


def index_terms(content: str, name: str | None, tags: Sequence[str]) -> dict[str, int]:
    """Term frequencies of one memory: its content, its key name and its tags.

    The name is split on ``_ - . / @ :`` and camelCase boundaries before analysis, so
    ``pref_lang`` and ``prefLang`` both give ``pref``, ``lang``. Each tag is analysed like
    text *and* kept whole (lowercased, e.g. ``billing-v2``) so an exact tag is a term of
    its own; the whole form is not added again when the analysis already produced it.
    """
    tf: dict[str, int] = {}

    def add(words: list[str]) -> None:
        for word in words:
            tf[word] = tf.get(word, 0) + 1

    add(terms(content))
    if name and not _GENERATED_NAME.match(name):
        add(terms(_CAMEL_BOUNDARY.sub(" ", _NAME_SEPARATORS.sub(" ", name))))
    for tag in tags:
        analysed = terms(tag)
        add(analysed)
        whole = unicodedata.normalize("NFKC", tag).lower()[:MAX_TERM_CHARS]
        if whole and analysed != [whole]:
            add([whole])
    return tf


def doc_length(tf: Mapping[str, int]) -> int:
    """The document length BM25 normalises by: the number of indexed terms, with repeats."""
    return sum(tf.values())


# --- Stemmer -------------------------------------------------------------------------


@lru_cache(maxsize=1 << 16)  # a vocabulary repeats: stemming each word once is most of the win
def stem(word: str) -> str:
    """A conservative English suffix stemmer: Porter steps 1a and 1b with extra guards, then
    a silent final e is dropped (step 5a), so ``decide`` and ``decided`` meet at ``decid``.

    Only lowercase ASCII words of 4+ letters are touched. Stems are not always words
    (``updated`` -> ``updat``, ``running`` -> ``run``, ``morning`` -> ``morn``): they only
    have to agree between indexing and querying.
    """
    if len(word) < 4 or not word.isascii() or not word.isalpha():
        return word
    return _drop_silent_e(_strip_suffixes(word))


def _drop_silent_e(word: str) -> str:
    """Porter step 5a: ``update``/``updat``, ``arrive``/``arriv``; ``like`` keeps its e (a
    one-syllable consonant-vowel-consonant stem), ``agree`` keeps it (ee)."""
    if len(word) >= 5 and word.endswith("e") and not word.endswith("ee"):
        base = word[:-1]
        m = _measure(base)
        if m > 1 or (m == 1 and not _ends_cvc(base)):
            return base
    return word


def _strip_suffixes(word: str) -> str:
    # Step 1a: plurals.
    if word.endswith("sses"):
        word = word[:-2]  # classes -> class
    elif word.endswith("ies"):
        word = word[:-3] + "y" if len(word) > 4 else word[:-1]  # policies -> policy, ties -> tie
    elif word.endswith(("xes", "ches", "shes")) and len(word) > 4:
        word = word[:-2]  # boxes -> box, matches -> match, wishes -> wish
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]  # answers -> answer; class, status, analysis stay
    # Step 1b: -eed, -ed, -ing.
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]  # agreed -> agree; need, feed, speed stay
        return word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix):
            base = word[: -len(suffix)]
            if len(base) >= 2 and _has_vowel(base):
                return _restore(base)
            return word  # bring, string, shed: no vowel left, not a suffix
    return word


def _restore(base: str) -> str:
    """Repair a stem after removing -ed/-ing so it meets the stem of the bare word."""
    if len(base) == 2:
        # used -> use, aged -> age, owing -> owe; a consonant-vowel base (do, go) is kept as is.
        return base + "e" if base[0] in _VOWELS and base[1] not in _VOWELS else base
    if base.endswith(("at", "bl", "iz")):
        return base + "e"  # updated -> update, enabled -> enable
    last = base[-1]
    if last == base[-2] and last not in _VOWELS and last not in "lsz" and len(base) > 3:
        return base[:-1]  # running -> run, preferred -> prefer; billing stays bill
    if _measure(base) == 1 and _ends_cvc(base):
        return base + "e"  # liked -> like, coding -> code, filed -> file
    return base


def _is_consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _has_vowel(word: str) -> bool:
    return any(not _is_consonant(word, i) for i in range(len(word)))


def _measure(word: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``word``."""
    m = 0
    previous_vowel = False
    for i in range(len(word)):
        consonant = _is_consonant(word, i)
        if consonant and previous_vowel:
            m += 1
        previous_vowel = not consonant
    return m


def _ends_cvc(word: str) -> bool:
    """Consonant-vowel-consonant at the end, the last not w, x or y (hop, lik, cod)."""
    n = len(word)
    return (
        n >= 3
        and _is_consonant(word, n - 3)
        and not _is_consonant(word, n - 2)
        and _is_consonant(word, n - 1)
        and word[-1] not in "wxy"
    )


__all__ = ["MAX_TERM_CHARS", "STOP_WORDS", "doc_length", "index_terms", "stem", "terms"]
