"""Command ids: 26-character, time-ordered, collision-resistant (ULID layout).

Time order matters because an appended memory (a key with no name) takes its command id as
its name, so an owner's appended memories list in the order they were written.
"""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32


def new_command_id() -> str:
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))
