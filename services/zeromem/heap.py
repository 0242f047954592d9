"""The garbage collector's settings for a long-running service.

CPython's cycle collector runs a young-generation pass every 700 container allocations.
A worker allocates a few dozen containers per command (the decoded command, its value,
the memory, the results, the audit entry), so with the defaults a batch of a thousand
commands set off dozens of passes mid-batch; each one promoted the batch's live objects
to older generations, whose passes then walked them again, along with everything the
process imported. Measured with ``bench/write_cost.py``, that was a fifth to a third of a
worker's CPU.

So, once a service has started: what it built at start-up (modules, the tokenizer, the
settings) is moved out of the collector's sight for good (``gc.freeze``), and a young
pass waits for many more allocations. Nearly everything a batch allocates is freed by
reference counting as soon as the batch is done; only reference cycles wait for a pass.
"""

from __future__ import annotations

import gc

# Young-generation pass every 50,000 container allocations (default 700); the middle and
# old generations keep their default ratios of passes.
THRESHOLDS = (50_000, 10, 10)


def settle_after_start() -> None:
    """Call once, after the service has imported and built what it keeps for its life."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
