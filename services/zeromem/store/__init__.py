"""The storage layer: everything both paths need to know about Redis.

The write path (``worker``, ``lifecycle``) and the read path (``recall``, ``query``)
import from here and never from each other:

- ``keys``: every Redis key and hash field name;
- ``scripts``: every Lua script (``*.lua`` beside it), loaded one way, keys in KEYS;
- ``items``: a memory's hash decoded (``KeyState``);
- ``card``: the recall card the workers write beside each memory;
- ``postings``: the scores of recall's inverted index;
- ``text``: the term analyser (indexing at write time, the query at recall time);
- ``tokens``: exact, offline token counts;
- ``usage``: recall's token-usage ledger;
- ``replies``: Redis replies narrowed to bytes.

Submodules are imported explicitly; this package imports nothing, so that loading one
piece (say the analyser in a worker) never pays for tiktoken.
"""
