"""Command ids: 26-character, time-ordered, collision-resistant (ULID layout).

Time order matters because an appended memory (a key with no name) takes its command id as
its name, so an owner's appended memories list in the order they were written. Within one
millisecond the random part counts up (monotonic ULIDs), so a process's ids never go back.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> two digits
_SHIFTS = range(120, -1, -10)
_RANDOM_BITS = 80

_lock = threading.Lock()
_last_ms = -1
_last_random = 0


def new_command_id() -> str:
    global _last_ms, _last_random
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms <= _last_ms:
            now_ms = _last_ms  # a clock step back must not reorder ids either
            _last_random = (_last_random + 1) % (1 << _RANDOM_BITS)
        else:
            _last_ms, _last_random = now_ms, int.from_bytes(os.urandom(10), "big") >> 1
        value = now_ms << _RANDOM_BITS | _last_random
    # 26 base32 digits carry 130 bits (two leading zero bits), read as 13 pairs of digits
    # of 10 bits each from a table: several times faster than base64.b32encode here.
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def stable_command_id(at_ms: int, seed: bytes) -> str:
    """A command id in the same layout, made from a time (milliseconds) and a seed instead
    of the clock and chance: the same seed always gives the same id, so re-sending the
    same command (an import run again, or resumed) is recognised as a duplicate."""
    digest = hashlib.blake2b(seed, digest_size=10).digest()
    value = (max(0, at_ms) & ((1 << 48) - 1)) << _RANDOM_BITS | int.from_bytes(digest, "big")
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])
