"""What went wrong, as the worker must treat it: the infrastructure is down, or a message
cannot be processed.

- An **outage** (Redis or NATS unreachable, a timeout waiting on either, a server that
  refuses writes for now) is nobody's message's fault: the batch is retried in place, as
  long as the outage lasts, and nothing is lost or reordered.
- Anything else is a **message fault**: a bug or an input no check foresaw. Retrying will
  not fix it, so it is retried a bounded number of times (``Limits.message_attempts``) and
  then dead-lettered, and the shard goes on. Within one command's own stages it is caught
  at once (``CommandFailed``): that command alone is rejected and dead-lettered.

``classify`` is the one place that decides; everything the worker retries goes through it.
"""

from __future__ import annotations

import asyncio
from enum import Enum

import nats.errors
import nats.js.errors
from redis import exceptions as redis_errors


class Fault(Enum):
    OUTAGE = "outage"
    MESSAGE = "message"


class StaleRoundsError(RuntimeError):
    """A command decided again and again on a state that kept changing under it. Other
    writers race a command a round or two at most (the reaper): an endless race is a
    decision that can never match what Redis holds, i.e. a fault of the message."""


class CommandFailed(Exception):
    """One command failed at ``stage`` (decide, encode, audit, ...): it is rejected and
    dead-lettered; the others go on."""

    def __init__(self, stage: str, cause: BaseException) -> None:
        self.stage = stage
        self.cause = cause
        super().__init__(self.reason)

    @property
    def reason(self) -> str:
        return f"internal: {self.stage} failed: {describe(self.cause)}"


def describe(exc: BaseException, limit: int = 300) -> str:
    """``ExceptionClass: message``, cut to ``limit`` characters."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Redis replies that mean "not now" rather than "not this": the server is loading, out of
# memory, read-only (a replica, or a failover), busy with a script, or its cluster is down.
_REDIS_NOT_NOW = (
    "LOADING",
    "OOM",
    "READONLY",
    "BUSY",
    "MISCONF",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "NOREPLICAS",
)
_REDIS_OUTAGES = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,
    redis_errors.OutOfMemoryError,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
)
_NATS_MESSAGE_FAULTS = (
    nats.errors.MaxPayloadError,
    nats.errors.BadHeaderError,
    nats.errors.BadSubjectError,
)


def classify(exc: BaseException) -> Fault:
    if isinstance(exc, _REDIS_OUTAGES):
        return Fault.OUTAGE
    if isinstance(exc, redis_errors.ResponseError):
        first = str(exc).split(" ", 1)[0].upper()
        return Fault.OUTAGE if first in _REDIS_NOT_NOW else Fault.MESSAGE
    if isinstance(exc, redis_errors.RedisError):
        return Fault.MESSAGE  # DataError, InvalidResponse: what was sent, not the server
    if isinstance(exc, _NATS_MESSAGE_FAULTS):
        return Fault.MESSAGE
    if isinstance(exc, nats.js.errors.APIError):
        # A stream refusing this message (too large for it) is the message; anything else
        # from JetStream (unavailable, no responders, a stream missing during a restart)
        # is the server's state.
        if exc.code == 400 and "size" in (exc.description or ""):
            return Fault.MESSAGE
        return Fault.OUTAGE
    if isinstance(exc, (nats.errors.Error, nats.js.errors.Error)):
        return Fault.OUTAGE  # connection closed, reconnecting, stalled acks, no responders
    if isinstance(exc, (OSError, TimeoutError, asyncio.TimeoutError)):
        return Fault.OUTAGE  # sockets; and every bounded wait on a server's answer
    return Fault.MESSAGE
