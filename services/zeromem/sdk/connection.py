"""The SDK's NATS connection: the first connect bounded in time and refused credentials
failing at once, the embedded stack's URL, and a JetStream context whose publish futures
fail on an error acknowledgement."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError

from zeromem.auth.authority import AuthError
from zeromem.sdk.errors import (
    ConnectError,
    NoStackError,
)
from zeromem.settings import Settings, nats_servers

log = logging.getLogger(__name__)


class ErrorAwareJetStream(JetStreamContext):
    """nats-py's JetStream context, except that an error acknowledgement of
    ``publish_async`` (a stream at its byte cap answers ``maximum bytes exceeded``)
    fails the publish's future. nats-py 2.x *raises* the error inside its reply callback
    instead (``APIError.from_error`` raises), so the future never completes and the
    publisher waited out its timeout, told only "no answer"."""

    async def _handle_async_reply(self, msg: Msg) -> None:
        try:
            await super()._handle_async_reply(msg)
        except APIError as exc:
            token = msg.subject[len(self._nc._inbox_prefix) + 22 + 2 :]  # as nats-py does
            future = self._publish_async_futures.get(token)
            if future is not None and not future.done():
                future.set_exception(exc)


def _refused(error: Exception) -> bool:
    text = str(error).lower()
    return "authorization violation" in text or "authentication" in text


# The first connection: how long to keep trying before saying the server cannot be
# reached. nats-py retries an initial connect for ever with max_reconnect_attempts=-1 (an
# example given a wrong URL printed 36,000 lines of tracebacks in five minutes); once
# connected, reconnects stay unbounded.
INITIAL_CONNECT_S = 10.0


async def connect_or_refused(
    url: str, initial_timeout: float = INITIAL_CONNECT_S, **options: Any
) -> NatsClient:
    """``nats.connect``, except that a credential the server refuses (revoked, expired,
    from another authority) fails at once instead of being retried for ever, and a server
    that cannot be reached fails after ``initial_timeout`` seconds; and once connected, a
    refusal (the credential revoked meanwhile) closes the connection, so the next
    operation fails instead of waiting on reconnects that cannot succeed."""
    refused: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
    holder: list[NatsClient] = []
    errors: list[Exception] = []

    async def on_error(error: Exception) -> None:
        # A permission violation is the server refusing something this client sent
        # (another agent's subject, say): say so rather than let a wait time out silently.
        if not holder and errors and str(errors[-1]) == str(error):
            return  # the same failure again while still connecting: said once is enough
        errors.append(error)
        log.warning("NATS: %s", error)
        if not _refused(error):
            return
        if not refused.done():
            refused.set_result(error)
        if holder and not holder[0].is_closed:
            asyncio.get_running_loop().create_task(holder[0].close())

    # a comma-separated URL names several nodes of a cluster (settings.bus.nats_servers)
    connecting = asyncio.ensure_future(
        nats.connect(nats_servers(url), error_cb=on_error, **options)
    )
    first: set[asyncio.Future[Any]] = {connecting, refused}
    await asyncio.wait(first, timeout=initial_timeout, return_when=asyncio.FIRST_COMPLETED)
    if not connecting.done():
        connecting.cancel()
        with contextlib.suppress(BaseException):
            await connecting
        if refused.done():
            raise AuthError(
                f"the NATS server refused this credential ({refused.result()}): "
                "revoked, expired, or not issued by this deployment"
            )
        raise ConnectError(url, initial_timeout, errors[-1] if errors else None)
    nc = connecting.result()
    holder.append(nc)
    return nc


def embedded_nats_url(settings: Settings) -> str:
    from zeromem.embedded import find_running_stack

    info = find_running_stack(settings.data_dir)
    if info is None:
        raise NoStackError(Path(settings.data_dir).resolve())
    return info.nats_url
