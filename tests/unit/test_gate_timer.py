"""The read gate's redispatch timer on the event loop the services run (uvloop)."""

from __future__ import annotations

import asyncio

import uvloop

from zeromem.limits import Limits
from zeromem.query.gate import TenantGate


def test_a_redispatch_due_at_once_on_uvloop() -> None:
    """uvloop's call_at returns a plain Handle, without ``when()``, for a moment already
    past; the gate once asked it for ``when()`` and every read behind it failed."""

    async def main() -> dict[str, object]:
        gate = TenantGate(Limits())
        gate._redispatch_in(-1.0)  # already due: uvloop hands back a Handle
        gate._redispatch_in(0.5)  # a later one: the due one stays
        gate._redispatch_in(0.0)
        state = gate.state()
        await asyncio.sleep(0.01)  # the due dispatch runs
        return state

    state = uvloop.run(main())
    assert state["redispatch_in_s"] is not None
