"""Every Lua script zeromem runs, loaded one way.

Each script is a ``.lua`` file beside this module whose header documents its KEYS and
ARGV. A ``Script`` is called by its digest (EVALSHA) and sends its source only when the
server does not know it yet (after a restart or a SCRIPT FLUSH): recall's survey is a few
kilobytes that would otherwise travel with every recall. A script whose first line is
``#!lua flags=no-writes`` runs with EVALSHA_RO: Redis then checks its declared keys for
reading only, which is all the read services' Redis user may do (``auth.redis_acl``).

Keys are passed in KEYS. Where a script finds keys while it runs (a memory's hash from an
index member, an owner's index from an owner it walked to), its header says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError
from redis.typing import EncodableT

_NO_WRITES = "#!lua flags=no-writes"


def _source(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


class Script:
    """One script file (with ``library``, files of shared functions, put in front of its
    body, after its flags line)."""

    __slots__ = ("libraries", "name", "readonly", "sha", "source")

    def __init__(self, name: str, *, library: str | tuple[str, ...] = ()) -> None:
        source = _source(name)
        self.libraries = (library,) if isinstance(library, str) else library
        if self.libraries:
            flags, newline, body = (
                source.partition("\n") if source.startswith("#!") else ("", "", source)
            )
            shared = "".join(_source(lib) + "\n" for lib in self.libraries)
            source = flags + newline + shared + body
        self.name = name
        self.source = source
        self.readonly = source.startswith(_NO_WRITES)
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(
        self, redis: Redis, keys: Sequence[EncodableT] = (), args: Sequence[EncodableT] = ()
    ) -> Any:
        try:
            if self.readonly:
                return await redis.evalsha_ro(self.sha, len(keys), *keys, *args)
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            if self.readonly:
                return await redis.eval_ro(self.source, len(keys), *keys, *args)
            return await redis.eval(self.source, len(keys), *keys, *args)

    def queue(
        self, pipe: Pipeline, keys: Sequence[EncodableT] = (), args: Sequence[EncodableT] = ()
    ) -> None:
        """Queue a call in a pipeline, source and all (a pipeline cannot fall back on
        NOSCRIPT per command): for the small scripts that are pipelined."""
        if self.readonly:
            pipe.eval_ro(self.source, len(keys), *keys, *args)
        else:
            pipe.eval(self.source, len(keys), *keys, *args)


# The write path.
COMMIT = Script("commit.lua")
READ_ITEMS = Script("read_items.lua")
LEASE_RENEW = Script("lease_renew.lua")
LEASE_RELEASE = Script("lease_release.lua")
MEMBERS = Script("members.lua")
ARCHIVE_OWNERS = Script("archive_owners.lua")
# The read path.
RECALL_SURVEY = Script("recall_survey.lua", library=("recall_read.lua", "recall_expand.lua"))
RECALL_FETCH = Script("recall_fetch.lua", library="recall_read.lua")
# A recall over more owners than one call may cover (``Limits.recall_owners_per_call``).
RECALL_STAGE_ONE = Script("recall_stage_one.lua")
RECALL_NEIGHBOURS = Script("recall_neighbours.lua", library="recall_expand.lua")
RECALL_STAGE_TWO = Script("recall_stage_two.lua", library="recall_read.lua")
CACHE_TOKENS = Script("cache_tokens.lua")
OWNERS = Script("owners.lua")
SNAPSHOT_DUMP = Script("snapshot_dump.lua")
SNAPSHOT_RESTORE = Script("snapshot_restore.lua")
