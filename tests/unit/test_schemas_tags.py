"""The ``op`` and ``status`` names the code reads from the tags are the wire's."""

from typing import get_args

import msgspec
import pytest

from zeromem.schemas import (
    COMMAND_TYPES,
    Applied,
    AuditEntry,
    Conflict,
    Delete,
    Op,
    Rejected,
    Result,
    ResultStatus,
    decode,
    encode,
    op_of,
    status_of,
)


def test_every_command_tag_is_an_op() -> None:
    assert {cls.__struct_config__.tag for cls in COMMAND_TYPES} == set(get_args(Op))


def test_every_result_tag_is_a_status() -> None:
    tags = {cls.__struct_config__.tag for cls in get_args(Result)}
    assert tags == set(get_args(ResultStatus))


def test_op_of_reads_the_wire_name() -> None:
    command = Delete(id="c1", tenant="t1", agent="a", ts=1.0, key="user:u1:note")
    assert op_of(command) == "delete"
    assert msgspec.msgpack.decode(encode(command))["op"] == op_of(command)


@pytest.mark.parametrize("cls", [Applied, Conflict, Rejected])
def test_status_of_reads_the_wire_name(cls: type) -> None:
    result = cls(command_id="c1", tenant="t1", key="user:1:note:1", op="put")
    assert msgspec.msgpack.decode(encode(result))["status"] == status_of(result)


def test_an_audit_entry_refuses_an_unknown_status() -> None:
    raw = msgspec.msgpack.encode({"kind": "write", "at": 1.0, "tenant": "t1", "status": "lost"})
    with pytest.raises(msgspec.ValidationError):
        decode(raw, AuditEntry)
