"""``zeromem auth``: the operator's credential commands.

    zeromem auth tenant create acme          record a tenant
    zeromem auth issue acme planner          a creds file for agent planner of acme
    zeromem auth issue acme planner --token  a bearer token instead (one string)
    zeromem auth list [--tenant acme]        what was issued, and its status
    zeromem auth revoke --tenant acme --agent planner   (or --user UKEY, or a whole tenant)
    zeromem auth mcp-token acme claude       a bearer token for `zeromem mcp --transport http`
    zeromem auth inspect-token acme ops --audit   a bearer token for `zeromem inspect`
    zeromem auth export DIR                  server config, service creds, Redis ACL (a cluster)

They work on the authority of ``zeromem up`` in this directory (``{data_dir}/auth``, or
``ZEROMEM_AUTH_DIR``). A revocation is pushed to the running servers at once: every
connection of a revoked credential is closed, and it cannot connect again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zeromem.auth.authority import AuthError, Authority
from zeromem.cli.common import settings_of
from zeromem.settings import nats_servers


def _authority(args: argparse.Namespace, create: bool = False) -> Authority:
    settings = settings_of(args)
    if create:
        return Authority.load_or_create(settings.authority_dir)
    return Authority.load(settings.authority_dir)


def cmd_init(args: argparse.Namespace) -> int:
    authority = _authority(args, create=True)
    print(f"authority in {authority.directory}")
    return 0


def cmd_tenant(args: argparse.Namespace) -> int:
    authority = _authority(args)
    if args.action == "create":
        for tenant in args.tenant:
            made = authority.create_tenant(tenant)
            print(f"{'created' if made else 'exists: '} {tenant}")
        return 0
    for tenant in authority.tenants():
        issued = [i for i in authority.issued(tenant) if i.status == "valid"]
        print(f"{tenant}  {len(issued)} valid credential(s)")
    return 0


def cmd_issue(args: argparse.Namespace) -> int:
    authority = _authority(args)
    if args.create_tenant:
        authority.create_tenant(args.tenant)
    credential = authority.issue_agent(
        args.tenant, args.agent, audit=args.audit, bearer=args.token, expires_in=args.expires_in
    )
    if args.out == "-":
        sys.stdout.write(credential.text())
    else:
        suffix = ".token" if args.token else ".creds"
        out = (
            Path(args.out)
            if args.out
            else (authority.directory / "issued" / args.tenant / f"{args.agent}{suffix}")
        )
        credential.write(out)
        if args.json:
            print(
                json.dumps(
                    {
                        "tenant": args.tenant,
                        "agent": args.agent,
                        "kind": "token" if args.token else "creds",
                        "path": str(out),
                        "user": credential.public_key,
                    }
                )
            )
            return 0
        print(
            f"issued {'token' if args.token else 'creds'} for agent {args.agent!r} of tenant "
            f"{args.tenant!r}: {out}"
        )
        print(f"  user key (to revoke it): {credential.public_key}")
        variable = "ZEROMEM_TOKEN=$(cat ...)" if args.token else f"ZEROMEM_CREDS={out}"
        print(f"  the agent connects with: {variable}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    authority = _authority(args)
    rows = authority.issued(args.tenant)
    if args.json:
        print(json.dumps([{**asdict(r), "status": r.status} for r in rows]))
        return 0
    for r in rows:
        kind = ("auditor" if r.audit else "agent") + (" token" if r.bearer else "")
        when = datetime.fromtimestamp(r.issued_at, UTC).strftime("%Y-%m-%d %H:%M")
        print(f"{r.status:8} {r.tenant:20} {r.agent:20} {kind:14} {when}  {r.user}")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    authority = _authority(args)
    revoked = authority.revoke(user=args.user, tenant=args.tenant, agent=args.agent)
    if not revoked:
        print("nothing to revoke (no valid credential matched)", file=sys.stderr)
        return 4
    for r in revoked:
        print(f"revoked {r.tenant}/{r.agent} {r.user}")
    pushed = asyncio.run(_push(args, authority))
    print(pushed)
    return 0


async def _push(args: argparse.Namespace, authority: Authority) -> str:
    """Push the account (with its revocations) to the running stack, if there is one."""
    import nats

    from zeromem.auth.authority import push_account
    from zeromem.auth.credentials import load_credential, nats_options
    from zeromem.embedded import find_running_stack

    settings = settings_of(args)
    url = settings.bus.nats_url
    if not url:
        info = find_running_stack(settings.data_dir)
        if info is None:
            return "no running stack: the servers load the revocation when they start"
        url = info.nats_url

    async def connect(creds: Path) -> Any:
        return await nats.connect(
            nats_servers(url),
            allow_reconnect=False,
            connect_timeout=5,
            **nats_options(settings, load_credential(creds)),
        )

    await push_account(authority, connect)
    return f"pushed to {url}: connections of revoked credentials are closed"


def cmd_mcp_token(args: argparse.Namespace) -> int:
    from zeromem.auth.mcp_tokens import McpTokens

    authority = _authority(args)
    authority.create_tenant(args.tenant)
    creds = authority.issue_agent(args.tenant, args.agent).write(
        authority.directory / "issued" / args.tenant / f"{args.agent}-mcp.creds"
    )
    tokens = McpTokens(Path(args.file) if args.file else authority.directory / "mcp-tokens.json")
    token = tokens.add(args.tenant, args.agent, creds)
    print(
        f"bearer token for `zeromem mcp --transport http` as {args.tenant}/{args.agent} "
        "(shown once; clients send `Authorization: Bearer <token>`):"
    )
    print(token)
    return 0


def cmd_inspect_token(args: argparse.Namespace) -> int:
    """A bearer token for the inspector: a tenant's agent (its own credential, so the
    NATS server holds the page to that tenant) or, with --operator, the admin identity."""
    from zeromem.auth.mcp_tokens import McpTokens
    from zeromem.inspect.access import TOKENS_FILE

    authority = _authority(args)
    tokens = McpTokens(Path(args.file) if args.file else authority.directory / TOKENS_FILE)
    if args.operator:
        token = tokens.add("", "", authority.service_creds_path("admin"))
        who = "the operator (every tenant, dead letters, shards)"
    elif args.tenant and args.agent:
        authority.create_tenant(args.tenant)
        creds = authority.issue_agent(args.tenant, args.agent, audit=args.audit).write(
            authority.directory / "issued" / args.tenant / f"{args.agent}-inspect.creds"
        )
        token = tokens.add(args.tenant, args.agent, creds)
        who = f"{args.tenant}/{args.agent}" + (" (may read the audit trail)" if args.audit else "")
    else:
        print("name a TENANT and an AGENT, or --operator", file=sys.stderr)
        return 2
    print(
        f"inspector token for {who} (shown once; log in at the inspector's /login, or send "
        "`Authorization: Bearer <token>`):"
    )
    print(token)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """What a cluster needs: nats-server.conf (operator mode), one creds file per service
    role, and the Redis ACL file, into DIR (mount them as secrets)."""
    from zeromem.auth.authority import REDIS_ROLES, SERVICE_ROLES
    from zeromem.auth.redis_acl import acl_file

    authority = _authority(args, create=True)
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "nats-server.conf").write_text(
        authority.nats_config(
            host="0.0.0.0",
            port=4222,
            store_dir=Path("/data/jetstream"),
            resolver_dir=Path("/data/accounts"),
            server_name="zeromem",
        )
    )
    for role in (*SERVICE_ROLES, "system"):
        authority.service_credential(role).write(out / f"{role}.creds")
    acl = out / "users.acl"
    acl.write_text(acl_file({r: authority.redis_password(r) for r in REDIS_ROLES}))
    acl.chmod(0o600)
    passwords = out / "redis-passwords.env"
    passwords.write_text(
        "".join(
            f"ZEROMEM_REDIS_PASSWORD_{r.upper()}={authority.redis_password(r)}\n"
            for r in REDIS_ROLES
        )
    )
    passwords.chmod(0o600)
    print(
        f"wrote nats-server.conf, {', '.join(f'{r}.creds' for r in (*SERVICE_ROLES, 'system'))}, "
        f"users.acl and redis-passwords.env to {out}"
    )
    return 0


def add_auth_parser(sub: Any) -> None:
    auth = sub.add_parser(
        "auth",
        help="issue and revoke credentials (tenants, agents)",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = auth.add_subparsers(dest="auth_command", required=True, metavar="ACTION")

    init = commands.add_parser("init", help="create the authority (zeromem up does it too)")
    init.set_defaults(func=_guarded(cmd_init))

    tenant = commands.add_parser("tenant", help="create or list tenants")
    tenant.add_argument("action", choices=["create", "list"])
    tenant.add_argument("tenant", nargs="*")
    tenant.set_defaults(func=_guarded(cmd_tenant))

    issue = commands.add_parser("issue", help="a credential for one agent of one tenant")
    issue.add_argument("tenant")
    issue.add_argument("agent")
    issue.add_argument(
        "--token",
        action="store_true",
        help="a bearer token (one string, no key to prove) instead of creds",
    )
    issue.add_argument(
        "--audit", action="store_true", help="may also read its tenant's audit trail"
    )
    issue.add_argument("--expires-in", type=float, help="seconds until it expires")
    issue.add_argument("--out", help="file to write ('-': print it); default under the authority")
    issue.add_argument("--create-tenant", action="store_true", help="create the tenant if new")
    issue.add_argument("--json", action="store_true", help="print JSON (the file's path, its key)")
    issue.set_defaults(func=_guarded(cmd_issue))

    listing = commands.add_parser("list", help="credentials issued, with their status")
    listing.add_argument("--tenant")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=_guarded(cmd_list))

    revoke = commands.add_parser("revoke", help="revoke credentials, at once on running servers")
    revoke.add_argument("--user", help="the credential's user key (U...)")
    revoke.add_argument("--tenant", help="every credential of this tenant...")
    revoke.add_argument("--agent", help="...or of this agent of it")
    revoke.set_defaults(func=_guarded(cmd_revoke))

    mcp = commands.add_parser("mcp-token", help="a bearer token for the MCP server over HTTP")
    mcp.add_argument("tenant")
    mcp.add_argument("agent")
    mcp.add_argument("--file", help="token file (default: mcp-tokens.json in the authority)")
    mcp.set_defaults(func=_guarded(cmd_mcp_token))

    inspect = commands.add_parser("inspect-token", help="a bearer token for `zeromem inspect`")
    inspect.add_argument("tenant", nargs="?")
    inspect.add_argument("agent", nargs="?")
    inspect.add_argument(
        "--audit",
        action="store_true",
        help="may read its tenant's audit trail (history, dead letters)",
    )
    inspect.add_argument(
        "--operator", action="store_true", help="the operator: every tenant and the operator views"
    )
    inspect.add_argument("--file", help="token file (default: the authority's inspect-tokens.json)")
    inspect.set_defaults(func=_guarded(cmd_inspect_token))

    export = commands.add_parser("export", help="server config, service creds, Redis ACL")
    export.add_argument("dir")
    export.set_defaults(func=_guarded(cmd_export))


def _guarded(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(command(args))
        except AuthError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return run
