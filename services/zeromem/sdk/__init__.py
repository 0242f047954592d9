"""The agent SDK: publish memory commands, read memories, recall within a budget."""

from zeromem.sdk.client import MemoryClient, Receipt, Wait
from zeromem.sdk.errors import (
    CommandRefusedError,
    ConnectError,
    NoResponderError,
    NoStackError,
    RequestRejectedError,
    ServiceUnavailableError,
    WaitTimeoutError,
    ZeromemError,
)
from zeromem.sdk.sync import SyncMemoryClient

__all__ = [
    "CommandRefusedError",
    "ConnectError",
    "MemoryClient",
    "NoResponderError",
    "NoStackError",
    "Receipt",
    "RequestRejectedError",
    "ServiceUnavailableError",
    "SyncMemoryClient",
    "Wait",
    "WaitTimeoutError",
    "ZeromemError",
]
