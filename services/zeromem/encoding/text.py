"""Character classes, whole-token matching and safe cut positions, shared by the stages.

The encoder's stages (``prepare``, ``scan``, ``compose``) and its public checks agree on what
an ASCII word character is and where text may be cut; this module is that agreement.
"""

from __future__ import annotations

import unicodedata
from typing import Final


def word_list(text: str) -> tuple[str, ...]:
    """The whitespace-separated words of a word list written as text."""
    return tuple(text.split())


LETTERS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
ALNUM: Final = LETTERS | frozenset("0123456789")
UPPER: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def contains_token(content: str, token: str) -> bool:
    """Whether ``token`` occurs in ``content`` as a whole token.

    An occurrence counts unless an ASCII letter or digit touches it on a side where the token
    itself starts or ends with one: ``t42`` is in ``"order t42."`` but not in ``"t420"``.
    """
    i = content.find(token)
    if i < 0 or not token:
        return i >= 0
    n = len(token)
    check_left = token[0] in ALNUM
    check_right = token[-1] in ALNUM
    end = len(content)
    while i >= 0:
        if (not check_left or i == 0 or content[i - 1] not in ALNUM) and (
            not check_right or i + n == end or content[i + n] not in ALNUM
        ):
            return True
        i = content.find(token, i + 1)
    return False


def safe_cut(text: str, limit: int, floor: int = 0) -> int:
    """A cut position in ``(floor, limit]`` that tears no character sequence apart and, if
    it can, no ASCII word (a word is only cut when it is longer than a third of the room)."""
    cut = limit
    while cut > floor + 1 and _attaches(text, cut):
        cut -= 1
    if 0 < cut < len(text) and is_ascii_alnum(text[cut]) and is_ascii_alnum(text[cut - 1]):
        i = cut - 1
        while i > floor and is_ascii_alnum(text[i - 1]):
            i -= 1
        if i - floor >= (limit - floor) // 3:
            cut = i
    return max(cut, floor + 1)


def _attaches(text: str, i: int) -> bool:
    """True if cutting before ``text[i]`` would tear a character sequence apart."""
    if i <= 0 or i >= len(text):
        return False
    prev, char = text[i - 1], text[i]
    if "\ud800" <= prev <= "\udbff" and "\udc00" <= char <= "\udfff":
        return True  # a surrogate pair (only in strings built from lone surrogates)
    if prev == "\u200d" or char == "\u200d" or "\ufe00" <= char <= "\ufe0f":
        return True  # zero-width joiner, variation selector
    return char > "\u02ff" and unicodedata.combining(char) != 0


def is_ascii_alnum(char: str) -> bool:
    return char.isascii() and char.isalnum()
