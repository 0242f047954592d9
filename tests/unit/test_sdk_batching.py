"""The SDK's coalescing of fire-and-forget writes (zeromem.sdk.batching), against a
recording stand-in for the connection: what goes out, in which order, in which shape."""

from __future__ import annotations

import asyncio

from zeromem import naming
from zeromem.schemas import Put, decode_command, encode, split_batch
from zeromem.sdk.batching import CommandBatcher


class RecordingAcks:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, dict[str, str], int]] = []

    async def ready(self) -> None:
        await asyncio.sleep(0)  # may yield, as the real one does under back-pressure

    async def send(
        self, subject: str, payload: bytes, headers: dict[str, str], commands: int = 1
    ) -> None:
        self.sent.append((subject, payload, headers, commands))


def put(i: int, owner: str = "task:t1") -> tuple[str, bytes]:
    command = Put(id=f"c{i:04d}", tenant="acme", agent="a", ts=1.0, key=f"{owner}:k", value=i)
    return command.id, encode(command)


def values(payload: bytes, headers: dict[str, str]) -> list[int]:
    parts = split_batch(payload) if naming.BATCH_HEADER in headers else [payload]
    return [decode_command(p).value for p in parts]  # type: ignore[union-attr]


async def test_back_to_back_writes_share_one_message_sent_at_the_next_loop_turn() -> None:
    acks = RecordingAcks()
    batcher = CommandBatcher(acks)  # type: ignore[arg-type]
    for i in range(5):
        await batcher.add("zm.cmd.acme.1", *put(i))
    await batcher.add("zm.cmd.acme.2", *put(5, "task:t2"))
    assert acks.sent == []  # nothing yet: the agent has not yielded
    for _ in range(10):  # a few turns of the loop: the flush task, and its yields
        await asyncio.sleep(0)
    assert [(s, values(p, h), n) for s, p, h, n in acks.sent] == [
        ("zm.cmd.acme.1", [0, 1, 2, 3, 4], 5),
        ("zm.cmd.acme.2", [5], 1),
    ]
    first, single = acks.sent[0][2], acks.sent[1][2]
    assert first == {naming.MSG_ID_HEADER: "c0000+5", naming.BATCH_HEADER: "5"}
    assert single == {naming.MSG_ID_HEADER: "c0005"}  # alone: a plain command message


async def test_a_full_batch_goes_at_once_and_order_is_kept() -> None:
    acks = RecordingAcks()
    batcher = CommandBatcher(acks, max_commands=4)  # type: ignore[arg-type]
    for i in range(10):
        await batcher.add("zm.cmd.acme.1", *put(i))
    await batcher.send_all()
    assert [values(p, h) for _, p, h, _ in acks.sent] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_size_limit_closes_a_batch() -> None:
    acks = RecordingAcks()
    batcher = CommandBatcher(acks, max_bytes=200)  # type: ignore[arg-type]
    for i in range(6):
        await batcher.add("zm.cmd.acme.1", *put(i))
    await batcher.send_all()
    assert sum(len(values(p, h)) for _, p, h, _ in acks.sent) == 6
    assert len(acks.sent) > 1 and all(len(p) < 200 + 120 for _, p, _, _ in acks.sent)


async def test_sending_one_subject_leaves_the_others_buffered() -> None:
    acks = RecordingAcks()
    batcher = CommandBatcher(acks)  # type: ignore[arg-type]
    await batcher.add("zm.cmd.acme.1", *put(0))
    await batcher.add("zm.cmd.acme.2", *put(1, "task:t2"))
    await batcher.send("zm.cmd.acme.1")  # what a write that waits does first
    assert [s for s, *_ in acks.sent] == ["zm.cmd.acme.1"]
    await batcher.send_all()
    assert [s for s, *_ in acks.sent] == ["zm.cmd.acme.1", "zm.cmd.acme.2"]


async def test_a_failed_send_is_counted_not_raised_in_the_background() -> None:
    class Broken(RecordingAcks):
        async def send(self, *args: object, **kwargs: object) -> None:
            raise ConnectionError("closed")

    batcher = CommandBatcher(Broken())  # type: ignore[arg-type]
    for i in range(3):
        await batcher.add("zm.cmd.acme.1", *put(i))
    for _ in range(10):  # a few turns of the loop: the flush task, and its yields
        await asyncio.sleep(0)
    assert batcher.unsent == 3


def test_a_read_waits_only_on_shards_where_its_newest_write_has_no_result_yet() -> None:
    """A write whose result came back is applied, and so is every earlier write of the
    client on that shard (a worker applies a tenant's commands there in order): the read
    does not wait on the shard's position, which another tenant's backlog may hold back."""
    from zeromem.sdk.acks import AckCounter

    acks = AckCounter(None, "_INBOX.x")  # type: ignore[arg-type]
    acks.note_position(3, 10)
    acks.note_position(5, 20)
    acks.note_applied(3, 10)
    assert acks.unapplied(3) is None and acks.unapplied(5) == 20 and acks.unapplied(7) is None
    acks.note_position(3, 12)  # a later fire-and-forget write, not applied yet
    assert acks.unapplied(3) == 12


async def test_a_shard_is_unsettled_from_a_send_there_until_its_acknowledgement() -> None:
    """What a read waits on (``ReadMethods._own_writes``): only the shards with a write
    still unacknowledged; the others it neither waits on nor gathers."""
    from nats.aio.msg import Msg

    from zeromem.sdk.acks import AckCounter

    class Connection:
        async def publish(self, *args: object, **kwargs: object) -> None:
            pass

    acks = AckCounter(Connection(), "_INBOX.x")  # type: ignore[arg-type]
    assert not acks.unsettled(3)
    await acks.send(naming.command_subject("acme", 3, "a"), b"{}", {})
    assert acks.unsettled(3) and not acks.unsettled(5)
    ack = Msg(None, subject=f"{acks.subject}.3.1", data=b'{"stream":"c","seq":7}')  # type: ignore[arg-type]
    await acks._on_ack(ack)
    assert not acks.unsettled(3) and acks.positions == {3: 7}
    await asyncio.wait_for(acks.settled(3), 1)  # nothing left to wait for
