"""A recall's Redis calls while tenants share a read service: one at a time
(``Limits.recall_calls_at_once_shared``), ``recall_calls_at_once`` otherwise; and the
gate's view of sharing that decides it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from zeromem.limits import Limits
from zeromem.query.gate import TenantGate
from zeromem.recall import service as recall_service
from zeromem.recall.service import RecallService
from zeromem.schemas import RecallRequest, RecallScope


class _Stop(Exception):
    """Raised by the stand-in for the retrieval: what it was asked is all the test needs."""


def _calls_at_once(shared: bool, monkeypatch: pytest.MonkeyPatch) -> int:
    asked: dict[str, Any] = {}

    async def gather(*args: object, **kwargs: Any) -> None:
        asked.update(kwargs)
        raise _Stop

    monkeypatch.setattr(recall_service, "gather", gather)
    service = RecallService(None, limits=Limits(recall_calls_at_once=4))  # type: ignore[arg-type]
    service.shared = lambda: shared
    request = RecallRequest(tenant="t", query="deploy", scope=RecallScope(owners=("user:u1",)))
    with pytest.raises(_Stop):
        asyncio.run(service.answer(request))
    return int(asked["calls_at_once"])


def test_a_recall_sends_its_calls_one_at_a_time_while_tenants_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _calls_at_once(False, monkeypatch) == 4
    assert _calls_at_once(True, monkeypatch) == Limits().recall_calls_at_once_shared == 1


def test_the_gate_shares_once_a_second_tenant_is_active() -> None:
    gate = TenantGate(Limits())
    assert not gate.shared()
    assert gate.admit("a") is None
    assert not gate.shared()
    assert gate.admit("b") is None
    assert gate.shared()
