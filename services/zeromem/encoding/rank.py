"""Stage 3: salient tokens ranked (tier, then first position) and the guaranteed prefix.

The order defined here is the survival guarantee's: the longest prefix that fits a budget
is what the encoder promises to keep.
"""

from __future__ import annotations

from collections.abc import Iterable

from zeromem.encoding.scan import Occurrence


def rank(occurrences: Iterable[Occurrence]) -> tuple[list[str], dict[str, int]]:
    """Deduplicate tokens and order them by (tier, first position); also first positions."""
    first: dict[str, tuple[int, int]] = {}
    for start, _end, token, tier in occurrences:
        seen = first.get(token)
        if seen is None:
            first[token] = (tier, start)
        elif tier < seen[0]:
            first[token] = (tier, seen[1])
    ranked = sorted(first, key=first.__getitem__)
    return ranked, {token: position for token, (_tier, position) in first.items()}


def prefix_fit(tokens: list[str], budget: int) -> list[str]:
    """The longest prefix of ``tokens`` whose space-joined length fits in ``budget``."""
    used = -1
    for i, token in enumerate(tokens):
        used += len(token) + 1
        if used > budget:
            return tokens[:i]
    return list(tokens)
