"""What a command is estimated to cost Redis in the commit script, to bound one call.

Redis runs a script to its end serving no other client, so a commit call over a batch of
``Settings.batch_size`` appends (~175 µs of Redis CPU each, measured with
bench/write_cost.py: 512 appends ≈ 90 ms) delayed every other tenant's command by as
much. The applier cuts a round into calls of at most ``Limits.commit_cost`` units.

A unit is one index write, about: a fixed part per command (the memory's hash, its
statistics, the time and type indexes, the idempotency record) and one posting per
distinct content word, tag and reference. bench/write_cost.py's appends (10 to 40
words, tags, some references: ~35 units) cost ~175 µs of Redis CPU each, ~5 µs a unit,
so the default bound of 4096 units is a call of ~20 ms (640, ~3 ms, cost every write a
fifth more CPU in round trips: see ``Limits.commit_cost``).
"""

from __future__ import annotations

from zeromem.schemas import Command, Patch, Put

# The index writes of a command that indexes nothing new (a delete's or an expiry's hash, stats,
# index removals and idempotency record).
BASE = 9
# Words assumed for a content the worker derives from the value (not known before the
# command is decided), and for the content a delete or a patch removes from the postings.
UNKNOWN_WORDS = 16
_INDEXING = (Put, Patch)


def commit_cost(command: Command) -> int:
    """The estimated units of ``command`` (see the module's header)."""
    if isinstance(command, _INDEXING):
        content = command.content
        # Words, repeats included: a little above the distinct words (which stop words
        # exceed already), at a fifth of the cost of a set of them (3.8 -> 0.7 µs a command:
        # every command is costed, by the applier and the fair turns).
        words = content.count(" ") + 1 if content is not None else UNKNOWN_WORDS
        tags = len(command.tags or ())
        references = len(command.references or ())
        return BASE + words + tags + references
    return BASE + UNKNOWN_WORDS
