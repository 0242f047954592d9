"""Redis with zeromem's ACL users keeps what scripts and transactions wrote across a restart.

Redis and Valkey replay their append-only file as the ``default`` user and re-check its
permissions on every EXEC they replay; a script's effects are written to the file as a
MULTI/EXEC. With ``default`` switched off, every commit was silently dropped at restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, ResponseError

from zeromem.auth.authority import REDIS_ROLES, Authority
from zeromem.auth.redis_acl import acl_file, url_with_user
from zeromem.embedded.servers import RedisServer

_WRITE = "redis.call('HSET', KEYS[1], 'v', ARGV[1]); redis.call('SET', KEYS[2], ARGV[1])"


async def test_script_and_transaction_writes_survive_a_restart(
    tmp_path: Path, authority: Authority
) -> None:
    acl = acl_file({role: authority.redis_password(role) for role in REDIS_ROLES})
    server = RedisServer(tmp_path / "redis", acl=acl).start()
    try:
        url = url_with_user(server.url, "worker", authority.redis_password("worker"))
        worker = Redis.from_url(url)
        await worker.eval(_WRITE, 2, "zm:t:m:user:u1:k", "zm:t:c:cmd1", "7")
        async with worker.pipeline(transaction=True) as pipe:
            pipe.set("zm:t:m:user:u1:other", "in a transaction")
            pipe.incr("zm:t:counter")
            await pipe.execute()
        await worker.aclose()
        server.stop()  # SIGTERM: Redis flushes its append-only file
        server.start()
        admin = Redis.from_url(
            url_with_user(server.url, "admin", authority.redis_password("admin"))
        )
        assert await admin.hget("zm:t:m:user:u1:k", "v") == b"7"
        assert await admin.get("zm:t:c:cmd1") == b"7"
        assert await admin.get("zm:t:m:user:u1:other") == b"in a transaction"
        assert await admin.get("zm:t:counter") == b"1"
        await admin.aclose()
        # ...while nobody can use the default user: no password, an empty one, a guess.
        for url in (server.url, url_with_user(server.url, "admin", "")):
            anonymous = Redis.from_url(url.replace("zm-admin", "default"))
            with pytest.raises((AuthenticationError, ResponseError)):
                await anonymous.get("zm:t:counter")
            await anonymous.aclose()
    finally:
        server.stop()
