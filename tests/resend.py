"""Sending a command again as a new message, as a client would once JetStream's duplicate
window (``Settings.bus.dedupe_window_s``) is past: what only the worker's stored result of
the command id can recognise."""

from __future__ import annotations

from zeromem import naming
from zeromem.ids import new_command_id
from zeromem.schemas import Command, Result, decode_result, encode
from zeromem.schemas.keys import owner_of
from zeromem.sdk import MemoryClient


async def send_as_new_message(client: MemoryClient, command: Command) -> Result:
    """``command`` published again under another JetStream message id; its result."""
    owner = owner_of(command.key)
    subject = naming.command_subject(
        command.tenant, naming.shard_for(command.tenant, owner, client.shards), command.agent
    )
    inbox = client.nc.new_inbox()
    sub = await client.nc.subscribe(inbox)
    try:
        await client.js.publish(
            subject,
            encode(command),
            headers={naming.MSG_ID_HEADER: new_command_id(), naming.REPLY_HEADER: inbox},
        )
        return decode_result((await sub.next_msg(timeout=10)).data)
    finally:
        await sub.unsubscribe()
