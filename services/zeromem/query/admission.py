"""Admitting a read request: the decoded request, or the reason it is refused.

Everything a request could do to cost the service (or another tenant) dearly is checked
here, before any work: its tenant is the subject's, its reader is a bounded id, every
number is finite, and each ``zeromem.limits`` bound on recall (owners, query length,
scope filters) and stats (range) holds; a recall's strategy is typed and checked as it is
decoded (``zeromem.schemas.strategies``). A refusal is a ``bad_request`` reply naming the
limit, never a traceback in the service's log.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

import msgspec

from zeromem import naming
from zeromem.limits import Limits, refusal
from zeromem.schemas import (
    ArchivedRequest,
    GetRequest,
    ListRequest,
    OwnersRequest,
    RecallRequest,
    StatsRequest,
    decode,
)
from zeromem.schemas.strategies import EMPTY_STRATEGY_ERROR, explain_strategy_error
from zeromem.shape import agent_refusal, finite_refusal

T = TypeVar("T")


class Refused(ValueError):
    """A request that cannot be served as asked (code ``bad_request``)."""


def tenant_of_query_subject(subject: str) -> str:
    return subject.split(".")[2]


def reader_from_subject(request: T, subject: str) -> T | str:
    """``request`` with its reader set from the query subject, or why it is refused (a
    tenant or a reader in the payload that the subject does not name). The subject's are
    what the server let this caller use, so the reader recorded with the read is the
    subject's agent."""
    try:
        tenant, agent, _ = naming.parse_query_subject(subject)
    except ValueError as exc:
        return str(exc)
    if request.tenant != tenant:  # type: ignore[attr-defined]
        return "tenant does not match the subject"
    reader = request.reader  # type: ignore[attr-defined]
    if reader and reader != agent:
        return f"reader {reader!r} does not match the subject's agent {agent!r}"
    return request if reader else msgspec.structs.replace(request, reader=agent)  # type: ignore[type-var]


def admit_request(subject: str, data: bytes, type_: type[T], limits: Limits) -> T:
    """``data`` as a ``type_`` request on ``subject``; raises ``Refused`` with the reason."""
    try:
        request: Any = _decode(data, type_)
    except msgspec.DecodeError as exc:
        raise Refused(explain_strategy_error(str(exc))) from None
    except RecursionError:
        raise Refused(refusal("nesting_depth", "request nested too deeply to decode")) from None
    # The reader is bounded before it is compared: the subject's agent is what the server
    # let through, the payload's anything.
    if request.reader:
        reason = agent_refusal(request.reader, limits.agent_chars, "reader")
        if reason is not None:
            raise Refused(reason)
    checked = reader_from_subject(request, subject)
    if isinstance(checked, str):
        raise Refused(checked)
    request = checked
    if request.reader:
        reason = agent_refusal(request.reader, limits.agent_chars, "reader")
        if reason is not None:
            raise Refused(reason)
    check = _CHECKS.get(type(request))
    if check is not None:
        reason = check(request, limits)
        if reason is not None:
            raise Refused(reason)
    return request  # type: ignore[no-any-return]


def _decode(data: bytes, type_: type[T]) -> T:
    try:
        return decode(data, type_)
    except msgspec.ValidationError as exc:
        if type_ is not RecallRequest or str(exc) != EMPTY_STRATEGY_ERROR:
            raise
    # The empty map the first clients sent for the default strategy, which the tagged
    # union cannot decode: decoded again without it (only such a request pays for this).
    fields = msgspec.msgpack.decode(data)
    if not isinstance(fields, dict) or fields.get("strategy") != {}:
        raise msgspec.ValidationError(EMPTY_STRATEGY_ERROR)
    del fields["strategy"]
    return decode(msgspec.msgpack.encode(fields), type_)


def stats_window(
    request: StatsRequest, limits: Limits, now: float | None = None
) -> tuple[float, float]:
    """The (since, until) a stats request reads: ``until`` 0 (or later than now) is now,
    ``since`` 0 is as far back as the limit allows. Raises ``Refused`` over
    ``Limits.stats_range_s``."""
    now = time.time() if now is None else now
    until = min(request.until or now, now)
    since = request.since or max(0.0, until - limits.stats_range_s)
    if since > until:
        raise Refused(f"since ({since}) is after until ({until})")
    if until - since > limits.stats_range_s:
        raise Refused(
            refusal(
                "stats_range_s",
                f"a range of {(until - since) / 86400:.1f} days, "
                f"limit {limits.stats_range_s / 86400:g}",
            )
        )
    return since, until


def _keyish(what: str, value: str, limits: Limits) -> str | None:
    if len(value) > limits.key_chars:
        return refusal("key_chars", f"{what} is {len(value)} characters, limit {limits.key_chars}")
    return None


def _get(request: GetRequest, limits: Limits) -> str | None:
    return _keyish("key", request.key, limits)


def _list(request: ListRequest, limits: Limits) -> str | None:
    return _keyish("prefix", request.prefix, limits) or _keyish("cursor", request.cursor, limits)


def _recall(request: RecallRequest, limits: Limits) -> str | None:
    scope = request.scope
    if len(scope.owners) > limits.recall_owners:
        return refusal("recall_owners", f"{len(scope.owners)} owners, limit {limits.recall_owners}")
    if len(request.query) > limits.query_chars:
        return refusal(
            "query_chars", f"query is {len(request.query)} characters, limit {limits.query_chars}"
        )
    filters = max(len(scope.tags), len(scope.types))
    if filters > limits.scope_filters:
        return refusal(
            "scope_filters", f"{filters} tags or types in scope, limit {limits.scope_filters}"
        )
    if len(request.encoding) > 64:
        return refusal("key_chars", "encoding name over 64 characters")
    for owner in scope.owners:
        reason = _keyish("owner", owner, limits)
        if reason is not None:
            return reason
    return _keyish("prefix", scope.prefix, limits) or finite_refusal(
        "scope since or until", scope.since, scope.until
    )


def _stats(request: StatsRequest, limits: Limits) -> str | None:
    reason = finite_refusal("since or until", request.since, request.until)
    if reason is None and (request.since < 0 or request.until < 0):
        reason = "since and until are epoch seconds (0: open)"
    return reason


def _owners(request: OwnersRequest, limits: Limits) -> str | None:
    return _keyish("prefix", request.prefix, limits) or _keyish("cursor", request.cursor, limits)


def _archived(request: ArchivedRequest, limits: Limits) -> str | None:
    return (
        _keyish("key", request.key, limits)
        or _keyish("cursor", request.cursor, limits)
        or _keyish("owner", request.owner, limits)
    )


_CHECKS: dict[type, Any] = {
    GetRequest: _get,
    ListRequest: _list,
    RecallRequest: _recall,
    StatsRequest: _stats,
    OwnersRequest: _owners,
    ArchivedRequest: _archived,
}
