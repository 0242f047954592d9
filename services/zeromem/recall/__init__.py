"""Recall: the read service that picks memories for a query and packs them into a budget.

- ``ranking``: the score of every candidate (BM25 relevance x time decay x feedback
  weight x a strategy's boost), from ``factors`` (the maths, the knobs, the data types),
  ordered lazily by ``ordering``; ``strategies``: what a request's strategy (a tagged
  union of the wire contract) does to a recall;
- ``packing``: greedy fitting of ranked memories (and their references) into a token
  budget, and the context block that gets injected into a prompt;
- ``dates``: the date range a query names;
  (all these are pure: no I/O)
- ``retrieve``: candidates read from the indexes the workers keep (Redis);
- ``archived``: candidates from the archive tier (``include_archived``);
- ``service``: one recall, from request to reply (``zeromem.query`` answers it over NATS).

The analyser, token counting, recall cards and the usage ledger are shared with the write
path and live in ``zeromem.store``. Submodules are imported explicitly; this package
imports nothing, so that loading one piece never pays for tiktoken.
"""
