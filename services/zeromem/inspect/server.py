"""``zeromem inspect``: serve the inspector (uvicorn) for the stack this directory runs, or
the servers the environment names.

On the operator's own machine (the local authority readable, as ``zeromem up`` leaves it)
it prints a link that logs the operator in for as long as this process runs: whoever can
read the authority could issue any credential anyway, which is the same reasoning the CLI
uses to mint itself an agent credential. Elsewhere, viewers log in with tokens from
``zeromem auth inspect-token``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from zeromem.inspect.access import TOKENS_FILE, Access, Viewer
from zeromem.settings import InspectSettings, Settings


def operator_link(settings: Settings, inspect: InspectSettings, access: Access) -> str | None:
    """A login link for the operator (None without a local authority)."""
    from zeromem.auth.credentials import local_authority

    authority = local_authority(settings)
    if authority is None:
        return None
    admin = authority.service_creds_path("admin")
    token = access.session_token(Viewer("", "", str(admin), operator=True))
    host = "127.0.0.1" if inspect.host in ("0.0.0.0", "::") else inspect.host
    return f"http://{host}:{inspect.port}/login?token={token}"


def with_reader_redis(settings: Settings) -> Settings:
    """The operator views read Redis as the read services do (read-only user): take that
    user from the local authority when the environment names none."""
    from zeromem.auth.credentials import local_authority
    from zeromem.embedded.stack import settings_for_role

    if (
        not settings.store.redis_url
        or settings.store.redis_username
        or "@" in settings.store.redis_url
    ):
        return settings
    authority = local_authority(settings)
    if authority is None:
        return settings
    reader = settings_for_role(settings, authority, "reader")
    return settings.with_(store={"redis_url": reader.store.redis_url})


def run_inspect(settings: Settings, inspect: InspectSettings, *, link: bool = True) -> int:
    import uvicorn

    from zeromem.inspect.app import create_app

    settings = with_reader_redis(settings)
    path = Path(inspect.tokens_file or settings.authority_dir / TOKENS_FILE)
    access = Access(path)
    url = f"http://{inspect.host}:{inspect.port}/"
    print(f"zeromem inspector on {url} (read-only; tokens: {path})", flush=True)
    login = operator_link(settings, inspect, access) if link else None
    if login:
        print(f"  operator login (valid while this process runs): {login}", flush=True)
    elif link:
        print("  log in with a token from `zeromem auth inspect-token`", flush=True)
    app = create_app(settings, inspect, access)
    try:
        uvicorn.run(
            app,
            host=inspect.host,
            port=inspect.port,
            log_level="warning",
            timeout_graceful_shutdown=2,
        )
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"cannot serve on {inspect.host}:{inspect.port}: {exc}", file=sys.stderr)
        return 2
    return 0
