"""Child processes that die with their parent, whatever kills it.

``zeromem up`` stops its children in order on Ctrl-C or SIGTERM; but SIGKILL leaves it no
chance, and closing its terminal (SIGHUP) used to kill it before it could: NATS, Redis,
the read services and the workers kept running, holding the data directory. On Linux the
kernel delivers a signal to a child when its parent dies (``prctl(PR_SET_PDEATHSIG)``,
set in the child between fork and exec, kept across exec); each child gets SIGTERM, so
Redis still writes its append-only file and a worker still hands its shards back.

The death signal follows the *thread* that forked the child: a child started from a
thread that later ends would be killed with it. So it is armed only for children started
from the main thread; elsewhere (and off Linux) children run in their own session, as
before, and ``up`` stops them itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that arms the death signal, or None where it cannot be armed."""
    if _LIBC is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()
    prctl = _LIBC.prctl

    def arm() -> None:  # in the child, between fork and exec: no allocation-heavy work
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm
