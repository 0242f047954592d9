"""The AsyncAPI 3 document of the wire contract (``schemas/asyncapi.yaml``), built from the
same names the services use (``zeromem.naming``) and pointing at the JSON Schema files,
so it cannot drift from the code: ``make schemas`` rewrites it, a test compares.

Channels are the NATS subjects with their tokens as parameters; every message names its
headers and its payload's schema; operations say who sends what and where the replies
go. The rules a client follows beyond the shapes (sharding, ids, dedupe, where results
arrive) are in ``schemas/README.md``.
"""

from __future__ import annotations

from typing import Any

import yaml

from zeromem import naming
from zeromem.schemas.commands import WIRE_VERSION

ASYNCAPI_FILE = "asyncapi.yaml"
SCHEMA_FORMAT = "application/schema+json;version=2020-12"
CONTENT_TYPE = "application/msgpack"
QUERY_KINDS = ("info", "get", "list", "recall", "stats", "owners", "archived")
AUDITED_READS = ("get", "list", "recall", "owners", "archived")  # what a read record names

_T, _A, _S = "{tenant}", "{agent}", "{shard}"


def _payload(filename: str) -> dict[str, Any]:
    return {"schemaFormat": SCHEMA_FORMAT, "schema": {"$ref": f"./json/{filename}"}}


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _header(description: str, **schema: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **schema}


HEADERS: dict[str, dict[str, Any]] = {
    naming.MSG_ID_HEADER: _header(
        "JetStream's dedupe id: a second message with the same id within the command "
        "stream's duplicate window (InfoReply.dedupe_window_s) is stored once. Set it on "
        "every command: `<tenant>.<agent>.<digest>`, the digest a keyed hash of the command "
        "id (see README: Dedupe).",
        maxLength=200,
    ),
    naming.REPLY_HEADER: _header(
        "Where the worker publishes the command's result (result.v1.json): a subject inside "
        "the publishing agent's inbox, `_INBOX.zm.<tenant>.<agent>.<anything>.<command id>`. "
        "Honoured only there; a refused (dead-lettered) command gets a `rejected` result "
        "there too.",
        pattern=r"^_INBOX\.zm\.[a-z0-9][a-z0-9_\-]{0,63}\.[a-z0-9][a-z0-9_\-]{0,63}\.[^ *>]+$",
    ),
    naming.BATCH_HEADER: _header(
        "Set when the payload is an array (command_batch.v1.json on a command subject, "
        "result_batch.v1.json on the change feed): the number of elements.",
        pattern=r"^[1-9][0-9]{0,5}$",
    ),
    naming.ERROR_HEADER: _header(
        "On a query's reply: the request was refused and the body is error_reply.v1.json "
        "(the code, also in the body). Absent on a normal reply.",
        enum=["bad_request", "rate_limited", "overloaded", "internal"],
    ),
    naming.DEAD_REASON_HEADER: _header(
        "On a dead letter: why the command was refused (one printable ASCII line)."
    ),
    "traceparent": _header(
        "Optional W3C trace context: the worker's apply and the read services' answer "
        "join the caller's trace."
    ),
}


def _headers(*names: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: HEADERS[name] for name in names},
    }
    if required:
        schema["required"] = list(required)
    return schema


def _message(
    name: str, title: str, summary: str, payload: str, headers: dict[str, Any] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "name": name,
        "title": title,
        "summary": summary,
        "contentType": CONTENT_TYPE,
        "payload": _payload(payload),
    }
    if headers is not None:
        message["headers"] = headers
    return message


_COMMAND_HEADERS = (naming.MSG_ID_HEADER, naming.REPLY_HEADER, "traceparent")

MESSAGES: dict[str, dict[str, Any]] = {
    "command": _message(
        "command",
        "A command",
        "One command (put, patch, delete, expire, feedback, touch, forget, archive, "
        "restore), tagged by `op`.",
        "command.v1.json",
        _headers(*_COMMAND_HEADERS, required=(naming.MSG_ID_HEADER,)),
    ),
    "commandBatch": _message(
        "commandBatch",
        "Several commands in one message",
        "A msgpack array of commands for one shard, each applied (or refused) on its own, "
        "in order.",
        "command_batch.v1.json",
        _headers(
            naming.BATCH_HEADER,
            *_COMMAND_HEADERS,
            required=(naming.BATCH_HEADER, naming.MSG_ID_HEADER),
        ),
    ),
    "result": _message(
        "result",
        "A command's result",
        "applied, conflict or rejected, tagged by `status`.",
        "result.v1.json",
    ),
    "resultBatch": _message(
        "resultBatch",
        "Several results of one owner",
        "A change-feed message with several results of one owner, in apply order.",
        "result_batch.v1.json",
        _headers(naming.BATCH_HEADER, required=(naming.BATCH_HEADER,)),
    ),
    "errorReply": _message(
        "errorReply",
        "A refused request",
        "Any query's reply when the request is refused; the header Zm-Error names the code.",
        "error_reply.v1.json",
        _headers(naming.ERROR_HEADER, required=(naming.ERROR_HEADER,)),
    ),
    "deadLetter": _message(
        "deadLetter",
        "A refused command, kept",
        "What the workers keep of a command they refused (operators read these).",
        "dead_letter.v1.json",
        _headers(naming.DEAD_REASON_HEADER, naming.MSG_ID_HEADER),
    ),
    "throttle": _message(
        "throttle",
        "Over a write quota: wait",
        "A worker refusing an agent's commands over its tenant's rate quota tells the agent "
        "the quota's rate and when the refused message would have passed (at most one per "
        "agent and shard every 0.2 s). Advice: a client that waits accordingly has its "
        "writes applied late instead of refused; the SDK does.",
        "throttle.v1.json",
    ),
    "auditBatch": _message(
        "auditBatch",
        "Audit records",
        "A worker's batch of writes (or refusals), or a read service's record of a read.",
        "audit_batch.v1.json",
        _headers(naming.MSG_ID_HEADER),
    ),
}
for _kind in QUERY_KINDS:
    MESSAGES[f"{_kind}Request"] = _message(
        f"{_kind}Request",
        f"A {_kind} request",
        f"Sent as a NATS request on zm.q.<tenant>.<agent>.{_kind}.",
        f"{_kind}_request.v1.json",
        _headers("traceparent"),
    )
    MESSAGES[f"{_kind}Reply"] = _message(
        f"{_kind}Reply",
        f"A {_kind} reply",
        "The answer, on the request's reply subject (no Zm-Error header).",
        f"{_kind}_reply.v1.json",
    )

PARAMETERS: dict[str, dict[str, Any]] = {
    "tenant": {
        "description": "The tenant: `[a-z0-9][a-z0-9_-]{0,63}`, the credential's `tenant` tag.",
        "examples": ["acme"],
    },
    "agent": {
        "description": "The agent: the tenant's grammar, the credential's `agent` tag. The "
        "server refuses any other agent's subjects.",
        "examples": ["planner"],
    },
    "shard": {
        "description": "The owner's shard: crc32(UTF-8 of `tenant` NUL `owner`) mod the shard "
        "count (InfoReply.shards), in decimal. The command stream captures 0 to shards-1 only.",
        "examples": ["3"],
    },
    "namespace": {
        "description": "The owner's namespace (`user` of `user:u1`).",
        "examples": ["user"],
    },
    "owner_id": {"description": "The owner's id (`u1` of `user:u1`).", "examples": ["u1"]},
    "kind": {"description": "The read a record is about.", "enum": list(AUDITED_READS)},
}


def _channel(
    address: str | None, description: str, messages: tuple[str, ...], *params: str
) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "address": address,
        "description": description,
        "messages": {name: _ref("messages", name) for name in messages},
    }
    if params:
        channel["parameters"] = {name: _ref("parameters", name) for name in params}
    return channel


def _channels() -> dict[str, Any]:
    chg = naming.change_subject(_T, _S, "{namespace}", "{owner_id}")  # type: ignore[arg-type]  # "{shard}": a placeholder
    channels: dict[str, Any] = {
        "commands": _channel(
            naming.command_subject(_T, _S, _A),  # type: ignore[arg-type]  # "{shard}": a placeholder
            f"Commands of one agent, captured by the stream {naming.COMMAND_STREAM}. "
            "Publish with JetStream (the ack says the command is stored).",
            ("command", "commandBatch"),
            "tenant",
            "shard",
            "agent",
        ),
        "imports": _channel(
            naming.import_subject(_T, _S, _A),  # type: ignore[arg-type]  # "{shard}": a placeholder
            "As commands, for credentials allowed to import: a put may carry older "
            "created_at/updated_at.",
            ("command", "commandBatch"),
            "tenant",
            "shard",
            "agent",
        ),
        "commandResults": _channel(
            None,
            "The subject a command named in Zm-Reply (inside "
            f"{naming.agent_inbox_prefix(_T, _A)}.>): one result per command.",
            ("result",),
        ),
        "changes": _channel(
            chg,
            f"The change feed, retained by the stream {naming.CHANGE_STREAM}: every "
            "applied, conflicting or rejected command of the owner. Read through a pull "
            "consumer whose filter lies within zm.chg.<tenant>.>; resume from a stream "
            "sequence.",
            ("result", "resultBatch"),
            "tenant",
            "shard",
            "namespace",
            "owner_id",
        ),
        "deadLetters": _channel(
            naming.dead_letter_subject(_T, _S),  # type: ignore[arg-type]  # "{shard}": a placeholder
            f"Refused commands, in the stream {naming.DEAD_LETTER_STREAM} (operators only).",
            ("deadLetter",),
            "tenant",
            "shard",
        ),
        "throttle": _channel(
            naming.throttle_subject(_T, _A),
            "Throttle notices to one agent (core NATS, in its inbox: subscribe to receive).",
            ("throttle",),
            "tenant",
            "agent",
        ),
        "auditWrites": _channel(
            naming.audit_write_subject(_T, _S),  # type: ignore[arg-type]  # "{shard}": a placeholder
            f"The workers' audit records, in the stream {naming.AUDIT_STREAM} (auditors).",
            ("auditBatch",),
            "tenant",
            "shard",
        ),
        "auditReads": _channel(
            naming.audit_read_subject(_T, "{kind}"),
            f"The read services' audit records, in the stream {naming.AUDIT_STREAM}.",
            ("auditBatch",),
            "tenant",
            "kind",
        ),
    }
    for kind in QUERY_KINDS:
        channels[f"{kind}Query"] = _channel(
            naming.query_subject(_T, _A, kind),
            f"Request-reply: a {kind} request, answered by the read services.",
            (f"{kind}Request",),
            "tenant",
            "agent",
        )
        channels[f"{kind}Replies"] = _channel(
            None,
            f"The {kind} request's NATS reply subject (an inbox within "
            f"{naming.agent_inbox_prefix(_T, _A)}.>).",
            (f"{kind}Reply", "errorReply"),
        )
    return channels


def _operations() -> dict[str, Any]:
    def channel(name: str) -> dict[str, str]:
        return {"$ref": f"#/channels/{name}"}

    def messages(channel_name: str, *names: str) -> list[dict[str, str]]:
        return [{"$ref": f"#/channels/{channel_name}/messages/{n}"} for n in names]

    operations: dict[str, Any] = {
        "sendCommand": {
            "action": "send",
            "channel": channel("commands"),
            "summary": "An agent publishes a command (or a batch).",
            "messages": messages("commands", "command", "commandBatch"),
            "reply": {
                "address": {
                    "location": f"$message.header#/{naming.REPLY_HEADER}",
                    "description": "Only when the header is set.",
                },
                "channel": channel("commandResults"),
                "messages": messages("commandResults", "result"),
            },
        },
        "importCommand": {
            "action": "send",
            "channel": channel("imports"),
            "messages": messages("imports", "command", "commandBatch"),
        },
        "receiveChanges": {
            "action": "receive",
            "channel": channel("changes"),
            "summary": "Follow (and resume) the change feed of a tenant or an owner.",
            "messages": messages("changes", "result", "resultBatch"),
        },
        "receiveDeadLetters": {
            "action": "receive",
            "channel": channel("deadLetters"),
            "messages": messages("deadLetters", "deadLetter"),
        },
        "receiveThrottle": {
            "action": "receive",
            "channel": channel("throttle"),
            "summary": "An agent learns it is over its tenant's write quota on a shard.",
            "messages": messages("throttle", "throttle"),
        },
        "receiveAuditWrites": {
            "action": "receive",
            "channel": channel("auditWrites"),
            "messages": messages("auditWrites", "auditBatch"),
        },
        "receiveAuditReads": {
            "action": "receive",
            "channel": channel("auditReads"),
            "messages": messages("auditReads", "auditBatch"),
        },
    }
    for kind in QUERY_KINDS:
        operations[f"{kind}"] = {
            "action": "send",
            "channel": channel(f"{kind}Query"),
            "messages": messages(f"{kind}Query", f"{kind}Request"),
            "reply": {
                "channel": channel(f"{kind}Replies"),
                "messages": messages(f"{kind}Replies", f"{kind}Reply", "errorReply"),
            },
        }
    return operations


def document() -> dict[str, Any]:
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "zeromem wire contract",
            "version": str(WIRE_VERSION),
            "description": (
                "Agents publish msgpack commands to NATS JetStream; sharded workers apply "
                "them to Redis; reads are NATS request-reply. Payload schemas: ./json "
                "(JSON Schema 2020-12, of the msgpack-decoded value). The rules a client "
                "follows (shard hash, ids, `ts`, dedupe, where results arrive, "
                "credentials): README.md beside this file."
            ),
        },
        "defaultContentType": CONTENT_TYPE,
        "servers": {
            "nats": {
                "host": "127.0.0.1:4222",
                "protocol": "nats",
                "description": "`zeromem up` prints its address; NATS in operator (JWT) mode.",
                "security": [_ref("securitySchemes", "agentCredential")],
            }
        },
        "channels": _channels(),
        "operations": _operations(),
        "components": {
            "messages": MESSAGES,
            "parameters": PARAMETERS,
            "securitySchemes": {
                "agentCredential": {
                    "type": "asymmetricEncryption",
                    "description": (
                        "A NATS creds file from `zeromem auth issue TENANT AGENT` (a user "
                        "JWT with tags tenant:<tenant> and agent:<agent>, and the nkey seed "
                        "that signs the server's nonce), or its bearer form (`--token`: "
                        "the JWT alone). The connection's inbox prefix must be "
                        f"{naming.agent_inbox_prefix(_T, _A)}."
                    ),
                }
            },
        },
    }


def render_asyncapi() -> str:
    header = "# Generated by `make schemas` from zeromem.schemas.asyncapi: do not edit.\n"
    body: str = yaml.safe_dump(document(), sort_keys=False, width=100, allow_unicode=True)
    return header + body
