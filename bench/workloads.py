"""What the write benchmarks publish: the append workload agents have, and the rewrite one.

Append (what agents mostly write, and what the benchmarks lead with): every put is a new
key with content nobody wrote before, so the worker analyses it and the commit script
indexes every term, tag and type. Content is 10-40 words drawn from a Zipf-like
vocabulary (a few hundred common English words at the head, a long tail of generated
words), trimmed to the 200-character content limit at a word boundary; the value holds the
whole text with a little metadata; 0-3 tags; mixed memory types; about one put in five
references earlier memories of the same owner and about one in seven has a TTL.

Rewrite (the fast path, shown beside the append figures, never instead of them): the same
keys again and again with identical content, which the worker recognises as "same index
shape" and applies with one version bump and no indexing.

Everything is drawn from a seeded generator, so every run publishes the same commands.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from zeromem.schemas import CONTENT_MAX_CHARS, MemoryType, Put

# The head of the distribution: common words, so the short frequent terms real text is
# full of dominate the postings, as they do in conversation.
_COMMON_TEXT = (
    "the of and to a in is it you that he was for on are with as i his they be at one have "
    "this from or had by not but what some we can out other were all there when up use your "
    "how said an each she which do their time if will way about many then them write would "
    "like so these her long make thing see him two has look more day could go come did number "
    "sound no most people my over know water than call first who may down side been now find "
    "any new work part take get place made live where after back little only round man year "
    "came show every good me give our under name very through just form sentence great think "
    "say help low line differ turn cause much mean before move right boy old too same tell "
    "does set three want air well also play small end put home read hand port large spell add "
    "even land here must big high such follow act why ask men change went light kind off need "
    "house picture try us again animal point mother world near build self earth father head "
    "stand own page should country found answer school grow study still learn plant cover "
    "food sun four between state keep eye never last let thought city tree cross farm hard "
    "start might story saw far sea draw left late run while press close night real life few "
    "north meeting friday monday invoice deploy customer ticket refund order shipment "
    "password account dashboard report budget release schedule deadline review contract "
    "payment"
)
_COMMON = _COMMON_TEXT.split()

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "er")]
_TAGS = [f"{t}" for t in ("billing", "travel", "support", "infra", "sales", "legal", "hr")] + [
    f"project-{i}" for i in range(24)
]
_TYPES = list(MemoryType)
_NAMESPACES = ("user", "task", "session")


def _tail_word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))


@dataclass
class Vocabulary:
    """Words ranked by frequency, drawn with probability proportional to 1 / rank**s."""

    words: list[str]
    exponent: float = 1.07
    _cumulative: list[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        total = 0.0
        self._cumulative = []
        for rank in range(1, len(self.words) + 1):
            total += 1.0 / rank**self.exponent
            self._cumulative.append(total)

    def draw(self, rng: random.Random) -> str:
        point = rng.random() * self._cumulative[-1]
        return self.words[bisect.bisect_left(self._cumulative, point)]


def vocabulary(size: int = 20_000, seed: int = 7) -> Vocabulary:
    rng = random.Random(seed)
    tail: dict[str, None] = {}
    while len(tail) < size - len(_COMMON):
        word = _tail_word(rng)
        if word not in _COMMON:
            tail[word] = None
    return Vocabulary(_COMMON + list(tail))


@dataclass(frozen=True)
class PutSpec:
    """One put's arguments, as ``MemoryClient.put`` takes them."""

    key: str
    value: Any
    content: str
    type: str
    tags: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    ttl: float | None = None

    def kwargs(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "type": self.type,
            "tags": self.tags,
            "references": self.references,
            "ttl": self.ttl,
        }


def _sentence(rng: random.Random, words: Vocabulary) -> tuple[str, str]:
    """(content, full text): 10-40 words; the content is the text cut to the limit."""
    text = " ".join(words.draw(rng) for _ in range(rng.randint(10, 40)))
    text = text[0].upper() + text[1:] + "."
    if len(text) <= CONTENT_MAX_CHARS:
        return text, text
    cut = text.rfind(" ", 0, CONTENT_MAX_CHARS)
    return text[:cut], text


def appends(n: int, owners: int, seed: int = 11) -> Iterator[PutSpec]:
    """``n`` puts of new memories spread round-robin over ``owners`` owners."""
    rng = random.Random(seed)
    words = vocabulary()
    written: dict[int, list[str]] = {}
    for i in range(n):
        owner = i % owners
        namespace = _NAMESPACES[owner % len(_NAMESPACES)]
        key = f"{namespace}:o{owner}:m{i}"
        content, text = _sentence(rng, words)
        earlier = written.setdefault(owner, [])
        references: tuple[str, ...] = ()
        if earlier and rng.random() < 0.2:
            references = tuple(rng.sample(earlier, min(len(earlier), rng.randint(1, 2))))
        earlier.append(key)
        if len(earlier) > 50:  # references point at recent memories
            del earlier[0]
        yield PutSpec(
            key=key,
            value={"text": text, "turn": i, "speaker": f"agent-{owner % 7}"},
            content=content,
            type=rng.choice(_TYPES).value,
            tags=tuple(rng.sample(_TAGS, rng.randint(0, 3))),
            references=references,
            ttl=float(rng.randint(3600, 86_400)) if rng.random() < 0.15 else None,
        )


REWRITE_CONTENT = "moved the meeting to Friday 10:00"


def rewrites(n: int, owners: int) -> Iterator[PutSpec]:
    """``n`` puts of the same ``owners`` keys with identical content (the fast path)."""
    for i in range(n):
        yield PutSpec(
            key=f"user:o{i % owners}:turn",
            value={"turn": i // owners, "note": "user asked to move the meeting to Friday 10:00"},
            content=REWRITE_CONTENT,
            type="message",
        )


def take(specs: Iterator[PutSpec], n: int) -> list[PutSpec]:
    return list(itertools.islice(specs, n))


def as_put(spec: PutSpec, i: int, id_prefix: str, tenant: str = "append") -> Put:
    """The ``i``-th spec as the put a client would send: a fixed id (``id_prefix`` padded
    to 26 characters) and time, so runs of a bench decide the same commands."""
    return Put(
        id=f"{id_prefix}{i:0{26 - len(id_prefix)}d}",
        tenant=tenant,
        agent="bench",
        ts=1_764_600_000.0 + i * 0.001,
        key=spec.key,
        value=spec.value,
        content=spec.content,
        type=MemoryType(spec.type),
        tags=spec.tags,
        references=spec.references,
        ttl_s=spec.ttl,
    )
