"""What each identity may publish and subscribe to, as NATS permissions.

Agents get theirs from a permission template on a scoped signing key: the account JWT
holds the template once, every agent credential carries only two tags (``tenant:<t>`` and
``agent:<a>``), and the server fills the template in at connection time. A credential
signed by that key can hold nothing else (the server refuses scoped users that carry
permissions of their own), so a bug in the issuing code cannot widen an agent's rights,
and a template with a tag missing matches nothing.

Every subject here comes from ``naming``; the templates pass template expressions where
the tenant and agent tokens go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zeromem import naming

TENANT_TAG = "tenant"
AGENT_TAG = "agent"
ROLE_TAG = "role"

_T = "{{tag(%s)}}" % TENANT_TAG  # noqa: UP031  (braces are literal here)
_A = "{{tag(%s)}}" % AGENT_TAG  # noqa: UP031


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    # May answer requests it received (publish to their reply subjects, once each).
    responses: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def claims(self) -> dict[str, Any]:
        """The permission part of a user JWT (or of a scoped key's template)."""
        out: dict[str, Any] = {
            "pub": {"allow": list(self.publish)} if self.publish else {},
            "sub": {"allow": list(self.subscribe)} if self.subscribe else {},
            "subs": -1,
            "data": -1,
            "payload": -1,
        }
        if self.responses:
            out["resp"] = {"max": 1, "ttl": 0}
        out.update(self.extra)
        return out


def agent_permissions(tenant: str = _T, agent: str = _A, *, audit: bool = False) -> Permissions:
    """An agent: its own commands and queries, its tenant's change feed (through a pull
    consumer whose filter the create subject names), replies on its own inbox, and with
    ``audit`` its tenant's audit trail the same way. Nothing else: no audit or dead-letter
    subject, no core subscription outside its inbox, no other JetStream API."""
    publish = [
        naming.command_subject(tenant, "*", agent),  # type: ignore[arg-type]
        naming.query_subject(tenant, agent, "*"),
        naming.consumer_create_subject(
            naming.CHANGE_STREAM, "*", naming.change_tenant_subject(tenant)
        ),
        naming.pull_request_subject(naming.CHANGE_STREAM, "*"),
        # Fetch from and delete a consumer by name: names are random (22 characters,
        # nobody may list them), so an agent reaches only those it created.
        naming.consumer_delete_subject(naming.CHANGE_STREAM, "*"),
    ]
    if audit:
        publish += [
            naming.consumer_create_subject(
                naming.AUDIT_STREAM, "*", naming.audit_tenant_subject(tenant)
            ),
            naming.pull_request_subject(naming.AUDIT_STREAM, "*"),
            naming.consumer_delete_subject(naming.AUDIT_STREAM, "*"),
        ]
    return Permissions(tuple(publish), (naming.agent_inbox_prefix(tenant, agent) + ".>",))


def _js_api(*parts: str) -> str:
    return ".".join((naming.JS_API_PREFIX, *parts))


def worker_permissions() -> Permissions:
    """A worker: reads its shards' commands, publishes results, change feed, audit
    records of writes and dead letters, answers a waiting agent in that agent's inbox,
    publishes the archiver's commands, and manages the command stream's consumers."""
    commands = naming.COMMAND_STREAM
    publish = (
        naming.COMMAND_SUBJECTS,
        naming.CHANGE_SUBJECTS,
        naming.audit_write_subject("*", "*"),  # type: ignore[arg-type]
        naming.DEAD_LETTER_SUBJECTS,
        naming.agent_inbox_prefix("*", "*") + ".>",
        _js_api("INFO"),
        _js_api("STREAM", "INFO", "*"),
        _js_api("STREAM", "CREATE", "*"),
        _js_api("STREAM", "UPDATE", "*"),
        _js_api("CONSUMER", "CREATE", commands, ">"),
        _js_api("CONSUMER", "DURABLE", "CREATE", commands, "*"),
        _js_api("CONSUMER", "DELETE", commands, "*"),
        _js_api("CONSUMER", "INFO", commands, "*"),
        _js_api("CONSUMER", "LIST", commands),
        naming.pull_request_subject(commands, "*"),
        f"{naming.JS_ACK_PREFIX}.{commands}.>",
    )
    return Permissions(publish, (naming.service_inbox_prefix("worker") + ".>",))


def reader_permissions() -> Permissions:
    """The read services: answer queries (replies only to the requests they received),
    publish the audit records of reads and the touch commands of sliding expiry."""
    publish = (
        naming.audit_read_subject("*", "*"),
        naming.COMMAND_SUBJECTS,
    )
    subscribe = (
        naming.query_subject_all("*"),
        naming.service_inbox_prefix("reader") + ".>",
    )
    return Permissions(publish, subscribe, responses=True)


def admin_permissions() -> Permissions:
    """The operator's own tools (``zeromem up`` provisioning the streams, ``rebuild``,
    the tests' observers): everything in the application account."""
    return Permissions((">",), (">",))


SERVICE_PERMISSIONS = {
    "worker": worker_permissions,
    "reader": reader_permissions,
    "admin": admin_permissions,
}
