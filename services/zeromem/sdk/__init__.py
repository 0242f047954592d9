"""The agent SDK: publish memory commands, read memories, recall within a budget."""

from zeromem.sdk.client import MemoryClient, Receipt, Wait
from zeromem.sdk.errors import (
    RequestRejectedError,
    ServiceUnavailableError,
    WaitTimeoutError,
    ZeromemError,
)
from zeromem.sdk.sync import SyncMemoryClient

__all__ = [
    "MemoryClient",
    "Receipt",
    "RequestRejectedError",
    "ServiceUnavailableError",
    "SyncMemoryClient",
    "Wait",
    "WaitTimeoutError",
    "ZeromemError",
]
