"""Query expansion from a small static word-embedding model shipped inside a package.

A question rarely uses the words of the memory that answers it ("footrace" for
"marathon", "employer" for "company", "tune" for "song"). Each query word is therefore
looked up in a word-embedding space, and its nearest English words become extra query
terms, each weighing ``expansion_weight`` x its cosine similarity (the original words
weigh 1). Everything else stays lexical: the expanded terms go through the same postings,
BM25 and survey script as the words typed, so no memory is embedded and the write path
and the index are untouched.

The model: WordLlama's ``l2_supercat_256`` token embeddings (32,000 tokens x 256 values,
16 MB), with its tokenizer, both files inside the ``wordllama`` wheel from PyPI. They are
opened from the installed package directory with ``safetensors`` and ``tokenizers``;
nothing is ever fetched from a model hub (WordLlama's own loader would try one; it is not
used). A word's vector is the mean of its tokens' vectors. The words a query may expand
to are the tokenizer's whole-word entries (lowercase, alphabetic, three letters or more:
about 10,000 common English words).

Cost: loading takes about a second, once per process (``shared_expander``); a word's
neighbours cost one 10,000 x 256 product (well under a millisecond) the first time and a
dictionary look-up after (``lru_cache``), so a recall's added time is the postings of the
extra terms. Measured choices are on ``RankingConfig`` (``expansion_*``).
"""

from __future__ import annotations

import os
import re
import threading
from functools import lru_cache
from importlib import util as importlib_util
from pathlib import Path
from typing import TYPE_CHECKING

from zeromem.store.text import STOP_WORDS, stem

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]

MODEL_PACKAGE = "wordllama"
WEIGHTS_FILE = "weights/l2_supercat_256.safetensors"
TOKENIZER_FILE = "tokenizers/l2_supercat_tokenizer_config.json"
TENSOR = "embedding.weight"
WORD_MARK = "\u2581"  # how the tokenizer marks a token that starts a word
MIN_WORD_CHARS = 3  # shorter words (and vocabulary entries) are neither expanded nor used
CACHED_WORDS = 1 << 16  # query words whose neighbours stay cached
NEIGHBOURS_SCANNED = 32  # nearest entries looked at per word (several share a stem)

# A query word worth expanding: lowercase letters only. A capitalised word is most often a
# name ("Ruth"), whose neighbours are other names: never expanded.
_PLAIN_WORD = re.compile(r"(?<![\w'\u2019])[a-z]+(?![\w'\u2019])")


class ExpansionUnavailable(RuntimeError):
    """The model package is not installed (``pip install wordllama``), or its files are
    not where this version expects them."""


class Expander:
    """Nearest-word look-ups in one embedding space (see the module docstring)."""

    def __init__(self, package_dir: Path) -> None:
        # One BLAS thread, unless the environment says otherwise (it only counts before
        # numpy's first import; nothing in a read process imports it earlier). A word's
        # product is small (8,864 x 256): with OpenBLAS's thread pool, 12 new words took
        # 0.5-47.5 ms each on the 2-core machine at load average 9, with one thread
        # 0.7-15.8 ms.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        weights_path = package_dir / WEIGHTS_FILE
        tokenizer_path = package_dir / TOKENIZER_FILE
        for path in (weights_path, tokenizer_path):
            if not path.is_file():
                raise ExpansionUnavailable(
                    f"query expansion: {path} is missing from the installed "
                    f"{MODEL_PACKAGE} package (expected version 0.4)"
                )
        self._np = np
        self._embedding: Matrix = load_file(str(weights_path))[TENSOR].astype(np.float32)
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        vocabulary = self._tokenizer.get_vocab()
        words = sorted(
            token[1:]
            for token in vocabulary
            if token.startswith(WORD_MARK)
            and len(token) > MIN_WORD_CHARS
            and token[1:].isascii()
            and token[1:].isalpha()
            and token[1:].islower()
            and token[1:] not in STOP_WORDS
        )
        self.words = words
        self._stems = [stem(word) for word in words]
        # Each of these words is one token of its own (what ``vector`` would find, without
        # encoding 8,864 words at start: 0.3 s instead of 2 s).
        rows = self._embedding[[vocabulary[WORD_MARK + word] for word in words]]
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        norms[norms == 0.0] = 1.0
        self._vectors: Matrix = rows / norms
        self.neighbours = lru_cache(maxsize=CACHED_WORDS)(self._neighbours)

    def vector(self, word: str) -> Matrix:
        """The unit vector of ``word``: the mean of its tokens' vectors."""
        ids = self._tokenizer.encode(word, add_special_tokens=False).ids
        mean: Matrix = self._embedding[ids].mean(axis=0)
        norm = float(self._np.linalg.norm(mean))
        unit: Matrix = mean / norm if norm > 0.0 else mean
        return unit

    def _neighbours(
        self, word: str, limit: int, min_similarity: float
    ) -> tuple[tuple[str, float], ...]:
        """Up to ``limit`` (term, similarity) pairs: the stems of the vocabulary words
        nearest ``word`` at ``min_similarity`` or more, best first, without ``word``'s own
        stem and each stem once."""
        np = self._np
        similarity = self._vectors @ self.vector(word)
        scan = min(NEIGHBOURS_SCANNED, len(similarity) - 1)
        nearest = np.argpartition(-similarity, scan)[:scan]
        nearest = nearest[np.argsort(-similarity[nearest], kind="stable")]
        own = stem(word)
        out: dict[str, float] = {}
        for i in nearest.tolist():
            value = float(similarity[i])
            if value < min_similarity:
                break
            term = self._stems[i]
            if term != own and term not in out:
                out[term] = round(value, 4)
                if len(out) >= limit:
                    break
        return tuple(out.items())

    def expand(
        self, query: str, limit: int, min_similarity: float, weight: float
    ) -> dict[str, float]:
        """Extra terms for ``query`` and the factor each weighs (``weight`` x similarity;
        a term reached from two words keeps the larger). Terms the query already has are
        left out by the caller."""
        out: dict[str, float] = {}
        for word in dict.fromkeys(_PLAIN_WORD.findall(query)):
            if len(word) < MIN_WORD_CHARS or word in STOP_WORDS:
                continue
            for term, similarity in self.neighbours(word, limit, min_similarity):
                factor = weight * similarity
                if factor > out.get(term, 0.0):
                    out[term] = factor
        return out


_LOCK = threading.Lock()
_SHARED: list[Expander] = []


def shared_expander() -> Expander:
    """The process's expander, loaded on first use (about a second). Raises
    ``ExpansionUnavailable`` when the model package is not installed."""
    if _SHARED:
        return _SHARED[0]
    with _LOCK:
        if not _SHARED:
            spec = importlib_util.find_spec(MODEL_PACKAGE)
            if spec is None or spec.origin is None:
                raise ExpansionUnavailable(
                    f"query expansion needs the {MODEL_PACKAGE} package "
                    f"(pip install {MODEL_PACKAGE}), or expansion_weight=0"
                )
            _SHARED.append(Expander(Path(spec.origin).parent))
    return _SHARED[0]
