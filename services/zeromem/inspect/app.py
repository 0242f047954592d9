"""The inspector's ASGI application: ``create_app(settings, inspect)``.

Every page has a JSON twin under ``/api`` built from the same data (the tests compare
them, and scripts can use them with ``Authorization: Bearer``). Every route but ``/login``
and ``/healthz`` needs a viewer; a tenant route checks the viewer may see the tenant,
and then reads through that viewer's own credential (``connections``), so the server
would refuse it anyway. No route writes to zeromem: the page only reads (``POST`` exists
for logging in and out, which set or clear a cookie).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from zeromem.auth.authority import AuthError
from zeromem.inspect import live, memories, operations, playground, savings
from zeromem.inspect.access import COOKIE, Access, Viewer, token_of
from zeromem.inspect.connections import Connections
from zeromem.inspect.filters import FILTERS
from zeromem.lifecycle.redact import Redactor
from zeromem.schemas.keys import TENANT_REGEX
from zeromem.sdk.errors import RequestRejectedError, ServiceUnavailableError
from zeromem.settings import InspectSettings, Settings

HERE = Path(__file__).parent
# The page's own scripts and styles only; data for the charts travels in a JSON block.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self' "
    "'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",  # a /login?token= link never leaks onward
    "cache-control": "no-store",
}

Handler = Callable[[Request, Viewer], Awaitable[dict[str, Any]]]


class Inspector:
    """What the routes share: settings, who is who, connections, the masker."""

    def __init__(self, settings: Settings, inspect: InspectSettings, access: Access) -> None:
        self.settings = settings
        self.inspect = inspect
        self.access = access
        self.connections = Connections(settings, inspect)
        self.redactor = Redactor(settings.lifecycle.sensitive_pattern)
        self.masker = memories.Masker(self.redactor)
        self.streams = live.StreamSlots(inspect.max_streams)
        self.no_audit: set[str] = set()  # creds files that may not read the audit trail
        env = Environment(
            loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
        )
        env.filters.update(FILTERS)
        self.templates = Jinja2Templates(env=env)

    async def client(self, request: Request, viewer: Viewer) -> Any:
        tenant = request.path_params["tenant"]
        if not TENANT_REGEX.match(tenant):
            raise ValueError(f"not a tenant: {tenant!r}")
        return await self.connections.client(viewer, tenant)


# --- the routes' data ----------------------------------------------------------------------


def _page(request: Request, inspector: Inspector) -> tuple[str, str, int]:
    q = request.query_params
    return q.get("prefix", ""), q.get("cursor", ""), inspector.inspect.page_size


async def memories_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    client = await inspector.client(request, viewer)
    prefix, cursor, size = _page(request, inspector)
    page = await memories.memories_page(client, inspector.masker, prefix, cursor, size)
    owners_cursor = request.query_params.get("owners_cursor", "")
    owners = await memories.owners_page(client, prefix, owners_cursor, size)
    return {"prefix": prefix, "cursor": cursor, **page, "owners": owners}


async def owners_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    client = await inspector.client(request, viewer)
    prefix, _, size = _page(request, inspector)
    cursor = request.query_params.get("owners_cursor", "")
    return {"prefix": prefix, "owners": await memories.owners_page(client, prefix, cursor, size)}


async def archived_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    client = await inspector.client(request, viewer)
    owner = request.query_params.get("owner", "")
    _, cursor, size = _page(request, inspector)
    page = await memories.archived_page(client, inspector.masker, owner, cursor, size)
    return {"owner": owner, "cursor": cursor, **page}


async def memory_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    client = await inspector.client(request, viewer)
    key = request.query_params.get("key", "")
    found = await memories.memory(client, inspector.masker, key)
    if found is None:
        raise LookupError(f"no memory at {key!r} (never written, deleted or expired)")
    return {"key": key, "item": found}


async def history_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    client = await inspector.client(request, viewer)
    key = request.query_params.get("key", "")
    if viewer.creds in inspector.no_audit:
        found = memories.History(
            error="this credential may not read the audit trail "
            "(an inspector token issued with --audit may)"
        )
    else:
        current = await memories.memory(client, inspector.masker, key)
        found = await memories.history(client, key, current, inspector.inspect.history_scan_limit)
        if found.error:
            inspector.no_audit.add(viewer.creds)
    return {
        "key": key,
        "history": {
            "entries": found.entries,
            "complete": found.complete,
            "note": found.note,
            "error": found.error,
        },
    }


async def recall_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    client = await inspector.client(request, viewer)
    form = playground.RecallForm.parse(request.query_params)
    out: dict[str, Any] = {
        "form": form.values,
        "types": playground.TYPES,
        "chosen_types": form.types,
        "strategies": [*playground.STRATEGIES, "custom"],
    }
    if form.ready:
        reply = await playground.run_recall(client, form)
        sensitive = await playground.flagged_sensitive(client, reply)
        out["explain"] = playground.explain_view(reply, form.budget, inspector.masker, sensitive)
    return out


async def savings_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    client = await inspector.client(request, viewer)
    period = request.query_params.get("period", "24h")
    if period not in savings.PERIODS:
        raise ValueError(f"unknown period {period!r}; one of {', '.join(savings.PERIODS)}")
    return {"savings": await savings.savings(client, period), "periods": list(savings.PERIODS)}


async def live_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    viewer.check(request.path_params["tenant"])
    return {"scope": request.query_params.get("scope", "")}


async def tenants_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    if not viewer.operator:
        return {"tenants": [viewer.tenant], "next_cursor": ""}
    redis = inspector.connections.redis(viewer)
    if redis is None:
        return {"tenants": [], "next_cursor": "", "note": "no Redis configured for this process"}
    cursor = request.query_params.get("cursor", "")
    return await operations.tenants_page(redis, cursor, inspector.inspect.page_size)


async def shards_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    nc = await inspector.connections.admin(viewer)
    return await operations.shards(
        nc, inspector.connections.redis(viewer), inspector.settings.shards
    )


async def ops_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    inspector: Inspector = request.app.state.inspector
    nc = await inspector.connections.admin(viewer)
    tenant = request.query_params.get("tenant", "")
    dead = await operations.dead_letters(
        nc,
        inspector.redactor,
        tenant,
        inspector.inspect.dead_letters_shown,
        inspector.inspect.dead_letter_window,
    )
    return {"tenant": tenant, "dead": dead, **await shards_view(request, viewer)}


# --- responses -----------------------------------------------------------------------------


def _status_of(exc: Exception) -> int:
    if isinstance(exc, PermissionError):  # Forbidden, or a credential the server refused
        return 403
    if isinstance(exc, AuthError):
        return 401
    if isinstance(exc, LookupError):
        return 404
    if isinstance(exc, live.StreamLimit):
        return 429
    if isinstance(exc, ServiceUnavailableError | TimeoutError):  # nats' is one too
        return 503
    if isinstance(exc, RequestRejectedError | ValueError):
        return 400
    raise exc


def _html(name: str, fragment: str | None, handler: Handler, tab: str) -> Callable[..., Any]:
    async def endpoint(request: Request) -> Response:
        inspector: Inspector = request.app.state.inspector
        viewer = inspector.access.viewer_of(request)
        if viewer is None:
            return RedirectResponse("/login", status_code=303)
        partial = fragment is not None and request.headers.get("hx-request") == "true"
        base = {
            "viewer": viewer,
            "tenant": request.path_params.get("tenant", viewer.tenant),
            "tab": tab,
            "params": request.query_params,
        }
        try:
            data = await handler(request, viewer)
        except Exception as exc:
            status = _status_of(exc)
            return inspector.templates.TemplateResponse(
                request,
                "_error.html" if partial else "error.html",
                {**base, "status": status, "error": str(exc)},
                status_code=status,
                headers=SECURITY_HEADERS,
            )
        return inspector.templates.TemplateResponse(
            request,
            fragment if partial and fragment else name,
            {**base, **data},
            headers=SECURITY_HEADERS,
        )

    return endpoint


def _api(handler: Handler) -> Callable[..., Any]:
    async def endpoint(request: Request) -> Response:
        inspector: Inspector = request.app.state.inspector
        viewer = inspector.access.viewer_of(request)
        if viewer is None:
            return JSONResponse(
                {"error": "a bearer token is needed"},
                status_code=401,
                headers={"www-authenticate": "Bearer"},
            )
        try:
            data = await handler(request, viewer)
        except Exception as exc:
            return JSONResponse({"error": str(exc)}, status_code=_status_of(exc))
        return Response(
            msgspec.json.encode(data),
            media_type="application/json",
            headers={"cache-control": "no-store"},
        )

    return endpoint


def _events(
    opener: Callable[[Request, Viewer, int | None], Awaitable[AsyncIterator[Any]]],
) -> Callable[..., Any]:
    """A server-sent event stream; ``Last-Event-ID`` (a reconnect) says where to resume."""

    async def endpoint(request: Request) -> Response:
        inspector: Inspector = request.app.state.inspector
        viewer = inspector.access.viewer_of(request)
        if viewer is None:
            return JSONResponse({"error": "a bearer token is needed"}, status_code=401)
        last = request.headers.get("last-event-id", "")
        after = int(last) if last.isdigit() else None
        try:
            inspector.streams.take()
        except live.StreamLimit as exc:
            return JSONResponse({"error": str(exc)}, status_code=429)
        try:
            events = await opener(request, viewer, after)
        except Exception as exc:
            inspector.streams.give_back()
            return JSONResponse({"error": str(exc)}, status_code=_status_of(exc))

        async def guarded() -> AsyncIterator[Any]:
            try:
                async for event in events:
                    yield event
            finally:  # the browser went away: its consumer is deleted now, not at GC
                inspector.streams.give_back()
                await events.aclose()  # type: ignore[attr-defined]

        return EventSourceResponse(
            guarded(), ping=inspector.inspect.stream_ping_s, headers={"cache-control": "no-store"}
        )

    return endpoint


async def _change_stream(request: Request, viewer: Viewer, after: int | None) -> AsyncIterator[Any]:
    inspector: Inspector = request.app.state.inspector
    client = await inspector.client(request, viewer)
    scope = request.query_params.get("scope", "")
    if not scope:
        raise ValueError(
            "name a scope to watch: an owner (user:u1), a key prefix "
            "(task:t42:*) or a namespace (task:*)"
        )
    return await live.change_events(client, scope, inspector.masker, after)


async def _tenant_dead_stream(
    request: Request, viewer: Viewer, after: int | None
) -> AsyncIterator[Any]:
    inspector: Inspector = request.app.state.inspector
    tenant = request.path_params["tenant"]
    viewer.check(tenant)
    if viewer.operator:
        nc = await inspector.connections.admin(viewer)
        return await live.dead_letter_events(nc, inspector.redactor, tenant, after)
    client = await inspector.client(request, viewer)
    return await live.audited_dead_letter_events(client, after)


async def _ops_dead_stream(
    request: Request, viewer: Viewer, after: int | None
) -> AsyncIterator[Any]:
    inspector: Inspector = request.app.state.inspector
    nc = await inspector.connections.admin(viewer)
    tenant = request.query_params.get("tenant", "")
    return await live.dead_letter_events(nc, inspector.redactor, tenant, after)


# --- logging in and out --------------------------------------------------------------------


async def login(request: Request) -> Response:
    inspector: Inspector = request.app.state.inspector
    if request.method == "POST":
        token = str((await request.form()).get("token", "")).strip()
    else:
        token = request.query_params.get("token", "")
    if token:
        viewer = inspector.access.viewer(token)
        if viewer is not None:
            response = RedirectResponse("/", status_code=303, headers=SECURITY_HEADERS)
            response.set_cookie(
                COOKIE,
                token,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            return response
    status = 401 if token else 200
    return inspector.templates.TemplateResponse(
        request,
        "login.html",
        {"viewer": None, "failed": bool(token)},
        status_code=status,
        headers=SECURITY_HEADERS,
    )


async def logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


async def home(request: Request) -> Response:
    inspector: Inspector = request.app.state.inspector
    viewer = inspector.access.viewer(token_of(request))
    if viewer is None:
        return RedirectResponse("/login", status_code=303)
    return RedirectResponse(
        "/tenants" if viewer.operator else f"/t/{viewer.tenant}/memories", status_code=303
    )


async def healthz(request: Request) -> Response:
    return HTMLResponse("ok")


# (path, template, fragment for htmx, handler, tab)
PAGES: list[tuple[str, str, str | None, Handler, str]] = [
    ("/tenants", "tenants.html", None, tenants_view, "tenants"),
    ("/t/{tenant}/memories", "memories.html", "_memories.html", memories_view, "memories"),
    ("/t/{tenant}/owners", "_owners.html", "_owners.html", owners_view, "memories"),
    ("/t/{tenant}/archived", "archived.html", "_archived.html", archived_view, "memories"),
    ("/t/{tenant}/memory", "memory.html", None, memory_view, "memories"),
    ("/t/{tenant}/history", "_history.html", "_history.html", history_view, "memories"),
    ("/t/{tenant}/recall", "recall.html", "_explain.html", recall_view, "recall"),
    ("/t/{tenant}/live", "live.html", None, live_view, "live"),
    ("/t/{tenant}/savings", "savings.html", None, savings_view, "savings"),
    ("/ops", "ops.html", None, ops_view, "ops"),
    ("/ops/shards", "_shards.html", "_shards.html", shards_view, "ops"),
]


def routes() -> list[Any]:
    out: list[Any] = [
        Route("/", home),
        Route("/healthz", healthz),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/t/{tenant}/live/changes", _events(_change_stream)),
        Route("/t/{tenant}/live/dead", _events(_tenant_dead_stream)),
        Route("/ops/live/dead", _events(_ops_dead_stream)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    for path, template, fragment, handler, tab in PAGES:
        out.append(Route(path, _html(template, fragment, handler, tab)))
        out.append(Route("/api" + path, _api(handler)))
    return out


def create_app(
    settings: Settings, inspect: InspectSettings | None = None, access: Access | None = None
) -> Starlette:
    """The inspector for the deployment ``settings`` points at (its NATS URL; its Redis URL
    and user for the operator views). ``access`` defaults to the token file of
    ``inspect.tokens_file``, else ``inspect-tokens.json`` of the local authority."""
    inspect = inspect or settings.inspect
    if access is None:
        from zeromem.inspect.access import TOKENS_FILE

        access = Access(
            Path(inspect.tokens_file)
            if inspect.tokens_file
            else settings.authority_dir / TOKENS_FILE
        )
    inspector = Inspector(settings, inspect, access)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await inspector.connections.close()

    app = Starlette(routes=routes(), lifespan=lifespan)
    app.state.inspector = inspector
    return app
