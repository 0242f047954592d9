"""Errors the SDK raises. Reads degrade (a default, or ``None`` for not found); only a
service that cannot be reached or a request the service refuses raises."""

from __future__ import annotations


class ZeromemError(Exception):
    pass


class ServiceUnavailableError(ZeromemError):
    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        super().__init__(f"no answer from the zeromem {what} service within {timeout:.1f}s")


class NoResponderError(ServiceUnavailableError):
    """NATS itself answered that no read service subscribes to the request's subject (none
    running, or one still resubscribing after a reconnect), again after a moment
    (``reads.NO_RESPONDER_RETRIES_S``, 0.75 s in all): soon, not after the timeout. Told
    apart from a service that received the request and did not answer, which the same
    message named before (both looked like "no answer within 5.0s")."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.timeout = 0.0
        ZeromemError.__init__(
            self, f"no zeromem {what} service is subscribed right now (NATS: no responders)"
        )


class NoStreamError(ServiceUnavailableError):
    """No stream took a command. Two causes give the same answer from the server, so the
    message names both: a JetStream cluster electing the stream's leader after losing a
    node (seconds; sending the same command again is safe, its id deduplicates), or a
    subject the command stream does not capture (a shard at or past the deployment's
    count: the client's shard count is wrong)."""

    def __init__(self, subject: str, shards: int) -> None:
        self.what = "JetStream"
        self.timeout = 0.0
        ZeromemError.__init__(
            self,
            f"no stream stores {subject} right now: a JetStream cluster may be electing the "
            "stream's leader (send the same command again), or the command stream does not "
            f"capture this shard (it takes shards 0..N-1 of the deployment's count; this "
            f"client uses {shards}; discover() asks the deployment)",
        )


class CommandRefusedError(ZeromemError):
    """The command stream refused to store a command; nothing was stored. The usual
    cause is a command log at its byte cap (``maximum bytes exceeded``): the log refuses
    new commands rather than dropping old ones (rebuild replays it), until an operator
    raises ``ZEROMEM_STREAM_MAX_BYTES``."""

    def __init__(self, subject: str, description: str) -> None:
        self.subject = subject
        self.description = description
        full = "maximum bytes" in description or "maximum messages" in description
        super().__init__(
            f"the command stream refused {subject}: {description}; nothing was stored"
            + (
                " (the command log is full: it refuses new commands rather than drop old "
                "ones; an operator raises ZEROMEM_STREAM_MAX_BYTES)"
                if full
                else ""
            )
        )


class NoStackError(ZeromemError):
    """No URL was given and no stack of ``zeromem up`` runs in the data directory."""

    def __init__(self, data_dir: object) -> None:
        super().__init__(
            f"no NATS URL given and no zeromem stack found in {data_dir}: run `zeromem up` "
            "(or `make run`) in this directory, or set ZEROMEM_NATS_URL"
        )


class ConnectError(ZeromemError):
    """The NATS server could not be reached when connecting."""

    def __init__(self, url: str, timeout: float, last: Exception | None) -> None:
        self.url = url
        super().__init__(
            f"cannot connect to NATS at {url} within {timeout:.0f}s"
            + (f" ({last})" if last else "")
        )


class RequestRejectedError(ZeromemError):
    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"{code}: {message}")


class WaitTimeoutError(ZeromemError):
    def __init__(self, command_id: str, timeout: float) -> None:
        self.command_id = command_id
        super().__init__(
            f"command {command_id} was stored but no result arrived within {timeout:.1f}s "
            "(are workers running?); it will still be applied"
        )
