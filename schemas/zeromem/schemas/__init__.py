"""The zeromem wire contract: commands, results, memory items and queries (msgpack)."""

from zeromem.schemas.codec import DecodeError, decode, decode_command, decode_result, encode
from zeromem.schemas.commands import (
    COMMAND_TYPES,
    WIRE_VERSION,
    Command,
    Delete,
    Expire,
    Feedback,
    Patch,
    Put,
)
from zeromem.schemas.keys import KNOWN_NAMESPACES, InvalidKeyError, MemoryKey, owner_of
from zeromem.schemas.memory import (
    CONTENT_MAX_CHARS,
    FeedbackCounts,
    FeedbackKind,
    MemoryItem,
    MemoryType,
)
from zeromem.schemas.queries import (
    Candidate,
    ErrorReply,
    GetReply,
    GetRequest,
    ListReply,
    ListRequest,
    RecalledMemory,
    RecallReply,
    RecallRequest,
    RecallScope,
)
from zeromem.schemas.results import Applied, Conflict, DeadLetter, Rejected, Result

__all__ = [
    "COMMAND_TYPES",
    "CONTENT_MAX_CHARS",
    "KNOWN_NAMESPACES",
    "WIRE_VERSION",
    "Applied",
    "Candidate",
    "Command",
    "Conflict",
    "DeadLetter",
    "DecodeError",
    "Delete",
    "ErrorReply",
    "Expire",
    "Feedback",
    "FeedbackCounts",
    "FeedbackKind",
    "GetReply",
    "GetRequest",
    "InvalidKeyError",
    "ListReply",
    "ListRequest",
    "MemoryItem",
    "MemoryKey",
    "MemoryType",
    "Patch",
    "Put",
    "RecallReply",
    "RecallRequest",
    "RecallScope",
    "RecalledMemory",
    "Rejected",
    "Result",
    "decode",
    "decode_command",
    "decode_result",
    "encode",
    "owner_of",
]
