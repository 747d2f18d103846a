"""The explorer's web app (starlette): the page, its static files, and the JSON endpoints the page
calls with fetch. Every request body is bounded and checked before use; bad input is a JSON message
the page shows, and an unexpected failure is one line, never a traceback in a response.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..client import FilterMode
from ..errors import BadRequest, PreconditionsError
from ..files import MAX_FILE_BYTES_ENV, max_file_bytes, parse_json
from ..policy.load import key_path
from .access import HEADER, TokenRequired
from .client_view import LEARNED, NOTHING, client_view
from .history import Filter, history_of_files, history_of_upload, too_large
from .render import render
from .views import Context, try_call, who_can
from .workbench import OVERRIDABLE, Workbench

log = logging.getLogger("mcp_preconditions.explore")
REQUEST_BYTES = 4 * 1024 * 1024
JSON, BYTES = "application/json", "application/octet-stream"
_MEDIA_TYPES = {JSON: "the request must be JSON (Content-Type: application/json)",
                BYTES: "a log must be sent as bytes (Content-Type: application/octet-stream)"}
# No script, style or request leaves this origin; nothing is framed; the page's data is not cached.
_HEADERS = [(b"content-security-policy", b"default-src 'self'; img-src 'self' data:; "
             b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
            (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
            (b"cache-control", b"no-store")]


class _Request(BaseModel):
    """What every view is asked with: the policy as edited, the caller, the what-if values."""

    model_config = ConfigDict(extra="forbid")
    policy: str
    preset: str | None = None
    claims: str | None = None
    what_if: dict[str, bool] = Field(default_factory=dict)

    @field_validator("what_if")
    @classmethod
    def _overridable(cls, value: dict[str, bool]) -> dict[str, bool]:
        for requirement in value:
            if not requirement.startswith(OVERRIDABLE):
                raise ValueError(f"{requirement!r}: only state: and feature: values can be set")
        return value


_Asked = TypeVar("_Asked", bound=_Request)


class _CallRequest(_Request):
    tool: str
    arguments: str = ""


class _ClientRequest(_Request):
    knowledge: str | None = None
    knowledge_preset: str | None = None
    mode: FilterMode = FilterMode.HIDE


def request_bound(bench: Workbench) -> int:
    """The bound of a JSON request from the page: it holds the policy (JSON-escaped, at most 6
    bytes a byte), a caller and arguments, so 4 MiB, or 8 times the policy file when that is more;
    never more than the input size bound, which bounds a log."""
    return min(max_file_bytes(), max(REQUEST_BYTES, 8 * len(bench.inputs.policy_text.encode())))


def _too_large(name: str, size: int, bound: int) -> str:
    if bound >= max_file_bytes():
        return too_large(name, size)
    return (f"{name}: {size} bytes, larger than {bound} bytes, the bound of a request from this page "
            "(8 times the policy file, at least 4 MiB)")


async def _body(request: Request, media_type: str, bound: int, name: str = "the request") -> bytes:
    """The request body, if it is `media_type` (a cross-site form cannot send JSON or bytes
    without the browser asking first), refused past `bound` without reading it all."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != media_type:
        raise BadRequest(415, _MEDIA_TYPES[media_type])
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > bound:
        raise BadRequest(413, _too_large(name, int(declared), bound))
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > bound:
            raise BadRequest(413, _too_large(name, len(data), bound))
    return bytes(data)


async def _asked(request: Request, model: type[_Asked], bound: int) -> _Asked:
    body = await _body(request, JSON, bound)  # (its BadRequest is a PreconditionsError: not below)
    try:
        raw = parse_json(body, "request")
    except PreconditionsError as exc:
        raise BadRequest(400, str(exc)) from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = (f"{key_path(e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
                    for e in exc.errors(include_url=False))
        raise BadRequest(400, "request: " + "; ".join(problems)) from None


async def _context(bench: Workbench, asked: _Request) -> Context:
    """The policy compiled and the caller read, in a worker thread: compiling builds a Guard, and the
    server goes on answering meanwhile."""
    return await run_in_threadpool(Context.of, bench, asked.policy, asked.preset, asked.claims,
                                   asked.what_if)


def _page_config(bench: Workbench, token: str) -> dict[str, Any]:
    inputs = bench.inputs
    return {
        "token": token, "token_header": HEADER,
        "policy_path": inputs.policy_path, "policy_text": inputs.policy_text,
        "tools_label": inputs.tools_label,
        "tools": [{"name": t["name"], "description": t.get("description"),
                   "inputSchema": t.get("inputSchema")} for t in inputs.tools],
        # Lists, not objects: their order is the command line's (JSON objects' keys get sorted).
        "presets": [{"name": n, "claims": c} for n, c in inputs.presets.items()],
        "knowledge": [{"name": n} for n in (NOTHING, LEARNED, *inputs.knowledge)],
        "knowledge_default": next(iter(inputs.knowledge), NOTHING),
        "logs": list(inputs.logs), "modes": [m.value for m in FilterMode],
        "max_bytes": max_file_bytes(), "max_bytes_env": MAX_FILE_BYTES_ENV}


def build_app(bench: Workbench, token: str, allowed_hosts: Sequence[str] = ("*",)) -> ASGIApp:
    """The explorer's ASGI app over one workbench; `token`: the run's secret, which every request
    but the static files' must carry (access.py); `allowed_hosts`: the Host headers answered (a page
    on loopback answers only loopback names, so a rebinding DNS name cannot read it)."""

    bound = request_bound(bench)

    async def index(request: Request) -> Response:
        return HTMLResponse(render("index.html", config=_page_config(bench, token)))

    async def decisions(request: Request) -> Response:
        return JSONResponse(await who_can(await _context(bench, await _asked(request, _Request, bound))))

    async def call(request: Request) -> Response:
        asked = await _asked(request, _CallRequest, bound)
        return JSONResponse(await try_call(await _context(bench, asked), asked.tool, asked.arguments))

    async def client(request: Request) -> Response:
        asked = await _asked(request, _ClientRequest, bound)
        return JSONResponse(await client_view(await _context(bench, asked), asked.knowledge_preset,
                                              asked.knowledge, asked.mode))

    async def logs(request: Request) -> Response:
        query = request.query_params
        chosen = Filter(query.get("replica") or None, query.get("revision") or None)
        if request.method == "GET":
            return JSONResponse(await run_in_threadpool(history_of_files, bench.inputs.logs, chosen))
        name = query.get("name", "")
        data = await _body(request, BYTES, max_file_bytes(), name or "the log")
        return JSONResponse(await run_in_threadpool(history_of_upload, name, data, chosen))

    routes = [Route("/", index), Route("/api/decisions", decisions, methods=["POST"]),
              Route("/api/call", call, methods=["POST"]), Route("/api/client", client, methods=["POST"]),
              Route("/api/history", logs, methods=["GET", "POST"]),
              Mount("/static", StaticFiles(packages=[("mcp_preconditions.explore", "static")]))]
    return _Secured(Starlette(
        routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)),
                                   Middleware(TokenRequired, token=token)],
        exception_handlers={BadRequest: _bad_request, PreconditionsError: _bad_input,
                            Exception: _failed}))


async def _bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadRequest)
    return JSONResponse({"error": str(exc)}, status_code=exc.status)


async def _bad_input(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PreconditionsError)
    return JSONResponse({"error": "; ".join(exc.lines())}, status_code=400)


async def _failed(request: Request, exc: Exception) -> Response:
    """A bug, not bad input: the details go to the terminal that runs explore, the page gets one line."""
    log.error("explore: %s %s failed", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": f"the explorer failed ({type(exc).__name__}); the terminal running "
                                  "it has the details"}, status_code=500)


class _Secured:
    """Adds the page's security headers to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            await send(message)
        await self.app(scope, receive, with_headers)

