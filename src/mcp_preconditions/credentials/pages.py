"""The gateway's pages for connected accounts, as an ASGI app of their own (starlette) that the
gateway mounts on its HTTP listener (or a stdio gateway's `--pages-listen`):

    GET    /connect/ID          a connect link: sign in (with [auth.sign_in]), then the server's
                                authorization server; 403 for anyone but its caller, 410 when used
    GET    /connect/callback    the sign-in's redirect
    GET    /oauth/callback      the authorization server's redirect: the account is connected
    GET    /connections         the bearer's own connections (JSON)
    DELETE /connections/KEY     remove one of them: 200, or 404 when there is none

No token, code, verifier or secret is logged or shown; pages are plain text in HTML, never cached,
never framed, and send no referrer (a link's id is a secret).
"""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..auth.base import Authenticator
from ..auth.header import credentials_from_authorization_header
from ..errors import CredentialBackendError, FlowError
from .caller import Caller, caller_of
from .connect import ConnectFlow
from .pkce import random_id
from .signin import SESSION_COOKIE, SESSION_SECONDS, SignIn

log = logging.getLogger("mcp_preconditions.credentials")

PATHS = ("/connect/", "/oauth/callback", "/connections")  # what the gateway routes to this app
FLOW_COOKIE = "mcp_preconditions_flow"
SIGN_IN_CALLBACK = "/connect/callback"
_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff"}


def page(status: int, title: str, text: str) -> HTMLResponse:
    body = (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"</head><body><h1>{html.escape(title)}</h1><p id=\"message\">{html.escape(text)}</p>"
            "</body></html>")
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


def _cookie(response: Response, request: Request, name: str, value: str, seconds: float) -> None:
    response.set_cookie(name, value, max_age=int(seconds), path="/", httponly=True, samesite="lax",
                        secure=request.url.scheme == "https")


def _route(request: Request) -> str:
    """The page a request is for, without its secrets (a link's id, a query's code and state)."""
    path = request.url.path
    return "/connect/ID" if path.startswith("/connect/") and path != SIGN_IN_CALLBACK else path


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=_HEADERS)


class CredentialPages:
    """The pages of one gateway: its connect flow, its authenticator (for the bearer-token
    endpoints) and, when `[auth.sign_in]` is set, its sign-in."""

    def __init__(self, flow: ConnectFlow, authenticator: Authenticator,
                 sign_in: SignIn | None = None) -> None:
        self.flow = flow
        self.authenticator = authenticator
        self.sign_in = sign_in

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route(SIGN_IN_CALLBACK, self._guarded(self.signed_in), methods=["GET"]),
            Route("/connect/{link_id}", self._guarded(self.connect), methods=["GET"]),
            Route("/oauth/callback", self._guarded(self.callback), methods=["GET"]),
            Route("/connections", self.connections, methods=["GET"]),
            Route("/connections/{server}", self.disconnect, methods=["DELETE"]),
        ])

    @staticmethod
    def _guarded(handler: Callable[[Request], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
        """A browser page: a refused step is its page; anything unexpected is one logged line."""
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except FlowError as exc:
                return page(exc.status, "Not connected", str(exc))
            except CredentialBackendError as exc:
                log.warning("connect page %s failed: %s", _route(request), exc)
                return page(502, "Not connected", "A service the gateway needs is unavailable; "
                                                  "try again.")
            except Exception as exc:  # one line, its type only: a message may hold a code or state
                log.error("connect page %s failed: %s", _route(request), type(exc).__name__)
                return page(500, "Not connected", "The gateway could not complete this step.")
        return run

    # -- browser pages ------------------------------------------------------------------------------
    async def connect(self, request: Request) -> Response:
        link_id = request.path_params["link_id"]
        link = await self.flow.peek(link_id)
        binding = request.cookies.get(FLOW_COOKIE) or random_id()
        if self.sign_in is not None:
            person = self.sign_in.person_of(request.cookies.get(SESSION_COOKIE))
            if person is None:
                url = await self.sign_in.begin(f"/connect/{link_id}", self._url(SIGN_IN_CALLBACK),
                                               binding)
                return self._with_binding(_redirect(url), request, binding)
            if person != link.caller:
                raise FlowError(403, "This connect link was made for someone else.")
        url = await self.flow.authorize(link, binding)  # before the link is used: a failure keeps it
        await self.flow.use(link_id)  # single use: a second opener gets 410
        return self._with_binding(_redirect(url), request, binding)

    async def signed_in(self, request: Request) -> Response:
        if self.sign_in is None:
            raise FlowError(404, "This gateway signs nobody in.")
        person, return_to = await self.sign_in.finish(request.query_params,
                                                      request.cookies.get(FLOW_COOKIE))
        response = _redirect(return_to)
        _cookie(response, request, SESSION_COOKIE, self.sign_in.session(person), SESSION_SECONDS)
        return response

    async def callback(self, request: Request) -> Response:
        person = None
        if self.sign_in is not None:
            person = self.sign_in.person_of(request.cookies.get(SESSION_COOKIE))
        server, _ = await self.flow.callback(request.query_params, request.cookies.get(FLOW_COOKIE),
                                             person, self.sign_in is not None)
        return page(200, "Connected", f"Your account is connected for '{server}'. You can close "
                                      "this page and call the tool again.")

    def _with_binding(self, response: Response, request: Request, binding: str) -> Response:
        if request.cookies.get(FLOW_COOKIE) != binding:
            _cookie(response, request, FLOW_COOKIE, binding, SESSION_SECONDS)
        return response

    def _url(self, path: str) -> str:
        return self.flow.base_url + path

    # -- bearer-token endpoints ---------------------------------------------------------------------
    async def _caller(self, request: Request) -> Caller | Response:
        identity = await self.authenticator.authenticate(
            credentials_from_authorization_header(request.headers.get("authorization")))
        caller = caller_of(identity.principal)
        if caller is not None:
            return caller
        if identity.error:
            return JSONResponse({"error": "temporarily_unavailable"}, 503, headers=_HEADERS)
        return JSONResponse({"error": "invalid_token"}, 401,
                            headers={**_HEADERS, "WWW-Authenticate": 'Bearer error="invalid_token"'})

    async def connections(self, request: Request) -> Response:
        caller = await self._caller(request)
        if isinstance(caller, Response):
            return caller
        try:
            found = [connection.listing(server) for server, accounts in self.flow.accounts.items()
                     if (connection := await accounts.load(caller)) is not None]
        except CredentialBackendError as exc:
            log.warning("listing connections failed: %s", exc)
            return JSONResponse({"error": "temporarily_unavailable"}, 503, headers=_HEADERS)
        return JSONResponse({"connections": found}, headers=_HEADERS)

    async def disconnect(self, request: Request) -> Response:
        caller = await self._caller(request)
        if isinstance(caller, Response):
            return caller
        accounts = self.flow.accounts.get(request.path_params["server"])
        try:
            removed = accounts is not None and await accounts.remove(caller)
        except CredentialBackendError as exc:
            log.warning("removing a connection failed: %s", exc)
            return JSONResponse({"error": "temporarily_unavailable"}, 503, headers=_HEADERS)
        if not removed:
            return JSONResponse({"error": "not_found"}, 404, headers=_HEADERS)
        assert accounts is not None
        return JSONResponse({"removed": accounts.server}, headers=_HEADERS)

