"""The pure core of recall: no I/O, no Redis, no NATS.

- ``text``: the term analyser, shared by the workers (indexing at write time) and recall
  (analysing the query), so both sides always agree on what a term is.
- ``tokens``: exact, offline token counts (tiktoken with bundled ranks).
- ``ranking``: BM25 relevance x time decay x feedback weight, and request strategies.
- ``packing``: greedy fitting of ranked memories (and their references) into a token
  budget, and the context block that gets injected into a prompt.
- ``card``: the compact record of a memory that the workers write for recall to read.

Submodules are imported explicitly; this package imports nothing so that loading one
piece (say the analyser in a worker) never pays for tiktoken.
"""
