"""Real NATS (JetStream) and Redis-compatible servers started on free local ports.

Used by ``zeromem up`` when no NATS_URL / REDIS_URL is configured and by the test
fixtures, so the tests exercise the same launcher code a newcomer runs.
"""

from zeromem.embedded.servers import (
    EmbeddedServer,
    NatsServer,
    RedisServer,
    ServerNotFoundError,
    free_port,
)
from zeromem.embedded.stack import (
    EmbeddedStack,
    StackInfo,
    StackLockedError,
    find_running_stack,
)

__all__ = [
    "EmbeddedServer",
    "EmbeddedStack",
    "NatsServer",
    "RedisServer",
    "ServerNotFoundError",
    "StackInfo",
    "StackLockedError",
    "find_running_stack",
    "free_port",
]
