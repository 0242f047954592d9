"""Deterministic, model-free encoder: long text in, at most 200 characters of memory content out.

Why this exists
---------------
A memory's ``content`` is what ranking and keyword recall look at and what gets injected into
prompts, so it must be short (``CONTENT_MAX_CHARS``) yet keep what a later query will name:
ids, numbers, dates, amounts, names, and the request or decision itself. Writing it must cost
no tokens, so the default encoder is extractive and purely lexical: no model, no network, no
randomness, and nothing that depends on hash or set ordering. The same input always gives
the same output, in any process.

How the default encoder works
-----------------------------
1. Whitespace is normalised (every run of whitespace becomes one space). If the result fits
   in ``CONTENT_MAX_CHARS`` it *is* the content: nothing is dropped, so nothing is lost.
2. Otherwise the text is *prepared*: a text that parses as a JSON object or array is
   flattened into ``key: value`` lines (a log line that is a JSON object into
   ``key: value; key: value``); other text keeps its lines, each whitespace-normalised. The
   lines are cut into units: sentences (English and Chinese punctuation), and pieces longer
   than ``MAX_UNIT_CHARS`` into clauses, then word runs, then hard pieces.
3. Salient tokens are extracted from the prepared text (see below) and every unit is scored
   by information density: cue words of requests, decisions and problems ("decided", "must",
   "please", "prefer", "error", "需要", "决定", "喜欢"), questions, salient tokens,
   capitalised names and CJK characters, divided by the unit's length. Fields under
   informative keys (``id``, ``status``, ``total``...) weigh more and noise keys (``url``,
   ``etag``, ``avatar``...) less, so the fields a query would name win the room.
4. The guaranteed tokens are reserved first; units are then taken greedily by score while
   body plus the tail of still-uncovered guaranteed tokens fits, and put back in their
   original order. Room left over takes further salient tokens.
5. Layout: ``<units>… | <tail tokens>``. The ``…`` appears exactly when part of the prepared
   text was left out; the tail (tokens in order of appearance) only when it is needed. With
   no room for any unit the content is ``<tail tokens> …``.

Salient tokens and the survival guarantee
-----------------------------------------
:func:`salient_tokens` lists the tokens of the *prepared* text (the whitespace-normalised
input when that fits in ``CONTENT_MAX_CHARS``, else the form of step 2), deduplicated, in
priority order: by tier, then by first position. Every class contains an ASCII digit, an
``@`` or a ``://``, which is what lets the scanner skip plain words quickly.

* tier 0, ids: for URLs with a scheme (``https://``, ``http://``, ``ftp://``) the host, the
  last path segment if it has no digit (``invoice.pdf``), and the tokens inside path and
  query (``v1``/``v2`` API versions there are skipped); e-mail addresses; UUIDs; words mixing
  ASCII letters and digits (``t42``, ``u10086``, ``INV-2024-0042``, ``v1.2.3``, ``a3f9c2e``;
  ``-``, ``_`` and ``.`` may join the parts); ``#123`` references; dotted numbers (IPs,
  versions) and dash-joined digit groups (phones);
* tier 1, dates, times and amounts: ``2024-03-05``, ``2024-03-05T12:30:00Z``, ``3/5/2024``,
  ``March 5, 2024``, ``5 March 2024``, ``2024年3月5日``, ``3月5日``, ``12:30``, ``3pm``,
  ``3点``, ``$1,299.00``, ``US$5``, ``USD 12.50``, ``12.5 EUR``, ``300元``, ``45%``,
  ``35ms``, ``2GB``, ``5个``;
* tier 2, bare numbers with at least 3 digits; tier 3, other bare numbers.

Ordinals (``1st``) and tokens longer than ``MAX_TOKEN_CHARS`` (blobs) are not salient.

**Guarantee.** Let the *guaranteed tokens* be the longest prefix of :func:`salient_tokens`
whose members, joined by single spaces, fit in ``TOKEN_BUDGET`` (150) characters
(:func:`guaranteed_tokens`). Every guaranteed token occurs in the content as a whole token:
not touched by an ASCII letter or digit on a side where the token itself starts or ends with
one (:func:`contains_token`). So: if all salient tokens joined by spaces fit in 150 chars,
all of them survive; otherwise ids survive first, then dates/times/amounts, then long
numbers, then short ones, each class in order of first appearance. Content that is the whole
normalised input (step 1) keeps every token. Keeping ``TOKEN_BUDGET`` under
``CONTENT_MAX_CHARS`` leaves at least 46 characters for the text itself (a sentence, or the
best one cut short when none fits whole).

Other guarantees: ``len(content) <= CONTENT_MAX_CHARS``; non-empty for input with a
non-whitespace character; never raises on a ``str``; never cuts inside a surrogate pair, next
to a zero-width joiner or before a combining mark or variation selector; cuts inside a run
of ASCII letters and digits only when that run takes more than two thirds of the room (a
blob); CJK text without punctuation may be cut between characters.

Speed: every regex pass starts with a fixed character or class so the engine skips plain
text in C; the token scanner stops as soon as the guaranteed tokens are settled (once the
ids seen so far overflow the budget nothing later can be guaranteed; units beyond that point
are scored on cue words and names only); per-hit work is mapped with ``map``/``Counter``
rather than Python loops. About 0.15-0.2 ms per 1 KB and 0.4-0.8 ms per 10 KB on a
developer machine; ``bench/encoder_micro.py`` measures it.

Where each stage lives
----------------------
This module is the public API (:class:`Encoder`, :class:`ExtractiveEncoder`,
:func:`encode_value`, the token functions); the stages are modules of their own, each
importing only those before it: ``prepare`` (step 2: JSON flattening, units), ``scan`` (the
salient token classes and the early stop), ``rank`` (their order and the guaranteed prefix),
``compose`` (steps 3 to 5: scoring, selection, layout); ``text`` holds the character classes,
whole-token matching and safe cuts they share, ``values`` the flattening of JSON-like values
for :func:`encode_value`.
"""

from __future__ import annotations

from typing import Any, Final, Protocol, runtime_checkable

from zeromem.encoding.compose import ELLIPSIS, TAIL_SEPARATOR, compose
from zeromem.encoding.prepare import MAX_UNIT_CHARS, prepare
from zeromem.encoding.rank import prefix_fit, rank
from zeromem.encoding.scan import MAX_TOKEN_CHARS, extract
from zeromem.encoding.text import contains_token, safe_cut
from zeromem.encoding.values import scalar_text, value_pairs
from zeromem.schemas.memory import CONTENT_MAX_CHARS

__all__ = [
    "CONTENT_MAX_CHARS",
    "ELLIPSIS",
    "MAX_TOKEN_CHARS",
    "MAX_UNIT_CHARS",
    "TAIL_SEPARATOR",
    "TOKEN_BUDGET",
    "Encoder",
    "ExtractiveEncoder",
    "contains_token",
    "default_encoder",
    "encode_value",
    "guaranteed_tokens",
    "salient_tokens",
]

TOKEN_BUDGET: Final = 150
"""Chars (tokens plus one space between each) reserved for guaranteed salient tokens."""


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns text into memory content of at most ``CONTENT_MAX_CHARS`` chars.

    The default is :class:`ExtractiveEncoder`; a team can put a local model behind this
    interface. ``hint`` is free-form context about what the text is or what matters (a memory
    key, a type such as ``"tool_result"``, a topic); an encoder may ignore it.
    """

    def encode(self, text: str, *, hint: str | None = None) -> str: ...


class ExtractiveEncoder:
    """The default encoder: extractive, lexical, deterministic (see the module docstring).

    Stateless, so instances are interchangeable and safe to share between threads. ``hint``
    words (2+ characters, case-insensitive) raise the score of units containing them; the
    hint never changes which tokens are guaranteed.
    """

    __slots__ = ()

    def encode(self, text: str, *, hint: str | None = None) -> str:
        if not isinstance(text, str):
            raise TypeError(f"encode() takes str, not {type(text).__name__}")
        if len(text) <= CONTENT_MAX_CHARS:
            return " ".join(text.split())
        doc = prepare(text)
        if doc is None:
            return " ".join(text.split())  # long only by whitespace
        occurrences = extract(doc.text, TOKEN_BUDGET)
        ranked, positions = rank(occurrences)
        required = prefix_fit(ranked, TOKEN_BUDGET)
        return compose(doc, occurrences, ranked, positions, required, hint)

    def __repr__(self) -> str:
        return "ExtractiveEncoder()"


_DEFAULT_ENCODER: Final = ExtractiveEncoder()


def default_encoder() -> Encoder:
    """The shared default encoder (an :class:`ExtractiveEncoder`; it holds no state)."""
    return _DEFAULT_ENCODER


def salient_tokens(text: str) -> list[str]:
    """All salient tokens of ``text`` in priority order (tier, then first position).

    Computed on the same prepared form the encoder works from, so it is the exact basis of
    the survival guarantee.
    """
    doc = prepare(text) if len(text) > CONTENT_MAX_CHARS else None
    prepared = doc.text if doc is not None else " ".join(text.split())
    return rank(extract(prepared, None))[0]


def guaranteed_tokens(text: str) -> list[str]:
    """The tokens :class:`ExtractiveEncoder` guarantees to keep for ``text``: the longest
    prefix of :func:`salient_tokens` that fits in :data:`TOKEN_BUDGET` joined by spaces."""
    return prefix_fit(salient_tokens(text), TOKEN_BUDGET)


def encode_value(value: Any, *, encoder: Encoder | None = None, hint: str | None = None) -> str:
    """Memory content for a JSON-like value (what a write without explicit content stores).

    * ``None``, booleans and numbers: their JSON-ish spelling (``null``, ``true``, ``42``,
      ``1.5``); other scalars: ``str(value)`` (``bytes`` decoded as UTF-8);
    * strings and scalars: whitespace-normalised when that fits, else through ``encoder``;
    * dicts, lists, tuples, sets: ``key=value`` pairs (nested keys dotted, list positions
      dropped, lists of scalars comma-joined, keys in input order, sets sorted by ``repr``)
      joined by ``"; "`` when that fits; else the pairs go to ``encoder`` one per line, so
      the default encoder keeps the most informative fields and the ids and numbers.

    The result never exceeds ``CONTENT_MAX_CHARS`` characters: an over-long answer from a
    custom encoder is cut (ending with ``…``).
    """
    enc = encoder if encoder is not None else _DEFAULT_ENCODER
    if isinstance(value, dict | list | tuple | set | frozenset):
        pairs = value_pairs(value)
        compact = "; ".join(pairs)
        if len(compact) <= CONTENT_MAX_CHARS:
            return compact
        return _bounded(enc.encode("\n".join(pairs), hint=hint))
    text = scalar_text(value)
    flat = " ".join(text.split())
    if len(flat) <= CONTENT_MAX_CHARS:
        return flat
    return _bounded(enc.encode(text, hint=hint))


def _bounded(content: str) -> str:
    """Enforce the content limit on an encoder's answer."""
    if not isinstance(content, str):
        raise TypeError(f"encoder returned {type(content).__name__}, not str")
    if len(content) <= CONTENT_MAX_CHARS:
        return content
    cut = safe_cut(content, CONTENT_MAX_CHARS - 1)
    return content[:cut].rstrip() + ELLIPSIS
