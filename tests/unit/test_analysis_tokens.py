"""The worker's token count by pieces (``worker.analysis.content_tokens``) equals
tiktoken's count of the whole text, on the benchmark's texts and on generated ASCII that
stresses the cl100k expression's edges (blanks, line ends, digits, contractions, every
ASCII character), and falls back to tiktoken for any other text."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from zeromem.store.text import doc_length, index_terms, source_text
from zeromem.store.tokens import count_tokens
from zeromem.worker import analysis
from zeromem.worker.analysis import content_tokens

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
from workloads import appends, take


def _generated(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pieces = [
        " ", "  ", "\n", "\r\n", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "'s", "'S", "'ll",
        "'VE", "'re", "'d", "'", "a", "Zq", "word", "0", "12", "1234567", "..", "?!", "-",
        "_", "$", "%", "\x00", "\x7f", "~", "\\", "v2.1", "http://x.y/z?q=1",
    ]  # fmt: skip
    every_ascii = [chr(c) for c in range(128)]
    return [
        "".join(rng.choice(pieces if rng.random() < 0.8 else every_ascii) for _ in range(k))
        for k in (rng.randint(0, 40) for _ in range(n))
    ]


def test_counts_equal_tiktoken() -> None:
    specs = take(appends(3000, 50), 3000)
    texts = [s.content for s in specs] + [s.value["text"] for s in specs]
    texts += _generated(6000, 5)
    texts += ["", " ", "\n", "   \n", "a   ", "a \n b", "x\r", "it's   \n\n  fine  "]
    wrong = [t for t in texts if content_tokens(t) != count_tokens(t)]
    assert wrong == []


@pytest.mark.parametrize("text", ["中文回答 ok", "café au lait", "ｔ４２", "naïve\u2019s"])
def test_other_text_is_counted_by_tiktoken(text: str) -> None:
    assert content_tokens(text) == count_tokens(text)


def test_another_expression_is_counted_by_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "CL100K_PATTERN", "something else")
    monkeypatch.setattr(analysis, "_ASCII_PIECES", lambda text: pytest.fail("not used"))
    assert content_tokens("plain ascii words") == count_tokens("plain ascii words")


@pytest.mark.parametrize(
    ("content", "tags", "value"),
    [
        ("Mara: I finally booked the trip", ("travel",), None),
        ("booked the trip", ("travel", "project-1"), {"text": "Mara: booked the trip, long"}),
        ("booked the trip", ("ｓpeaker",), None),
        ("plain words, plain words", (), None),
    ],
)
def test_length_is_doc_length(content: str, tags: tuple[str, ...], value: object) -> None:
    analysis._analyse.cache_clear()
    text = source_text(value)
    analysed = analysis._analyse(content, None, tags, text, False)
    assert analysed.length == doc_length(index_terms(content, None, tags, text=text))
