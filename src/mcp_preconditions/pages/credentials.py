"""The gateway's pages for connected accounts, as an ASGI app of their own (starlette) that the
gateway mounts on its HTTP listener (or a stdio gateway's `--pages-listen`):

    GET    /connect/ID          a connect link: sign in (`[auth.sign_in]`, required), then the
                                server's authorization server; 403 for anyone but its caller, 410
                                when used
    GET    /connect/callback    the sign-in's redirect
    GET    /oauth/callback      the authorization server's redirect: the account is connected
    GET    /connections         the bearer's own connections (JSON); in a browser, the signed-in
                                person's, with Connect and Disconnect (connections.py)
    GET    /connections/sign-in, POST /connections: that page's sign-in and forms
    DELETE /connections/KEY     remove one of the bearer's: 200, or 404 when there is none
    GET    /client-metadata.json  the gateway's Client ID Metadata Document
                                (credentials/registration.py): its URL is its client_id where an
                                authorization server takes one

No token, code, verifier or secret is logged or shown; pages are plain text in HTML, never cached,
never framed, and send no referrer (a link's id is a secret). A refused step is logged at WARNING
with its reason (SPEC §15: the operator sees why). Cookies follow cookies.py's rule.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..auth.base import Authenticator
from ..auth.header import credentials_from_authorization_header
from ..credentials.caller import Caller, caller_of
from ..credentials.connect import ConnectFlow
from ..credentials.registration import CLIENT_METADATA_PATH, client_metadata
from ..credentials.signin import SESSION_COOKIE, SESSION_SECONDS, SignIn
from ..errors import CredentialBackendError, FlowError
from .connections import PATH, SIGN_IN_PATH, ConnectionsPage, wants_page
from .cookies import set_cookie
from .parts import FLOW_COOKIE, HEADERS, SIGN_IN_CALLBACK, binding_of, page, redirect, with_binding

log = logging.getLogger("mcp_preconditions.credentials")

PATHS = ("/connect/", "/oauth/callback", PATH, CLIENT_METADATA_PATH)  # what the gateway routes here
_NOSNIFF = {"X-Content-Type-Options": "nosniff"}
__all__ = ["PATHS", "CredentialPages"]


def _route(request: Request) -> str:
    """The page a request is for, without its secrets (a link's id, a query's code and state)."""
    path = request.url.path
    return "/connect/ID" if path.startswith("/connect/") and path != SIGN_IN_CALLBACK else path


class CredentialPages:
    """The pages of one gateway: its connect flow, its authenticator (for the bearer-token
    endpoints) and its sign-in (`[auth.sign_in]`: a connect link is completed only by its caller,
    signed in)."""

    def __init__(self, flow: ConnectFlow, authenticator: Authenticator, sign_in: SignIn) -> None:
        self.flow = flow
        self.authenticator = authenticator
        self.sign_in = sign_in
        self.browser = ConnectionsPage(flow, sign_in)

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route(SIGN_IN_CALLBACK, self._guarded(self.signed_in), methods=["GET"]),
            Route("/connect/{link_id}", self._guarded(self.connect), methods=["GET"]),
            Route("/oauth/callback", self._guarded(self.callback), methods=["GET"]),
            Route(PATH, self.connections, methods=["GET"]),
            Route(PATH, self._guarded(self.browser.act), methods=["POST"]),
            Route(SIGN_IN_PATH, self._guarded(self.browser.start), methods=["GET"]),
            Route(PATH + "/{server}", self.disconnect, methods=["DELETE"]),
            Route(CLIENT_METADATA_PATH, self.client_metadata, methods=["GET"]),
        ])

    @staticmethod
    def _guarded(handler: Callable[[Request], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
        """A browser page: a refused step is its page, logged with its reason; anything unexpected
        is one logged line."""
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except FlowError as exc:
                log.warning("connect page %s refused (%d): %s", _route(request), exc.status, exc)
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
        binding = binding_of(request)
        person = self.sign_in.person_of(request.cookies.get(SESSION_COOKIE))
        if person is None:
            url = await self.sign_in.begin(f"/connect/{link_id}",
                                           self.flow.base_url + SIGN_IN_CALLBACK, binding)
            return with_binding(redirect(url), request, binding)
        if person != link.caller:
            raise FlowError(403, "This connect link was made for someone else.")
        url = await self.flow.authorize(link, binding)  # before the link is used: a failure keeps it
        await self.flow.use(link_id)  # single use: a second opener gets 410
        return with_binding(redirect(url), request, binding)

    async def signed_in(self, request: Request) -> Response:
        person, return_to = await self.sign_in.finish(request.query_params,
                                                      request.cookies.get(FLOW_COOKIE))
        response = redirect(return_to)
        set_cookie(response, request, SESSION_COOKIE, self.sign_in.session(person), SESSION_SECONDS)
        return response

    async def callback(self, request: Request) -> Response:
        person = self.sign_in.person_of(request.cookies.get(SESSION_COOKIE))
        server, _ = await self.flow.callback(request.query_params, request.cookies.get(FLOW_COOKIE),
                                             person)
        return page(200, "Connected", f"Your account is connected for '{server}'. You can close "
                                      "this page and call the tool again.")

    async def client_metadata(self, request: Request) -> Response:
        """Public, the same for everyone: what an authorization server reads of the gateway."""
        return JSONResponse(client_metadata(self.flow.base_url),
                            headers={"Cache-Control": "max-age=3600", **_NOSNIFF})

    # -- bearer-token endpoints (and the browser's listing) -----------------------------------------
    async def _caller(self, request: Request) -> Caller | Response:
        identity = await self.authenticator.authenticate(
            credentials_from_authorization_header(request.headers.get("authorization")))
        caller = caller_of(identity.principal)
        if caller is not None:
            return caller
        if identity.principal is not None:  # verified, but names no subject: nobody's connections
            return JSONResponse({"error": "forbidden", "message": "the token names no subject (no "
                                 "'sub' claim)"}, 403, headers=HEADERS)
        if identity.error:
            return JSONResponse({"error": "temporarily_unavailable"}, 503, headers=HEADERS)
        return JSONResponse({"error": "invalid_token"}, 401,
                            headers={**HEADERS, "WWW-Authenticate": 'Bearer error="invalid_token"'})

    async def connections(self, request: Request) -> Response:
        if wants_page(request):
            return await self._guarded(self.browser.show)(request)
        caller = await self._caller(request)
        if isinstance(caller, Response):
            return caller
        try:
            found = [connection.listing(server) for server, accounts in self.flow.accounts.items()
                     if (connection := await accounts.load(caller)) is not None]
        except CredentialBackendError as exc:
            log.warning("listing connections failed: %s", exc)
            return JSONResponse({"error": "temporarily_unavailable"}, 503, headers=HEADERS)
        return JSONResponse({"connections": found}, headers=HEADERS)

    async def disconnect(self, request: Request) -> Response:
        caller = await self._caller(request)
        if isinstance(caller, Response):
            return caller
        accounts = self.flow.accounts.get(request.path_params["server"])
        try:
            removed = accounts is not None and await accounts.remove(caller)
        except CredentialBackendError as exc:
            log.warning("removing a connection failed: %s", exc)
            return JSONResponse({"error": "temporarily_unavailable"}, 503, headers=HEADERS)
        if not removed:
            return JSONResponse({"error": "not_found"}, 404, headers=HEADERS)
        assert accounts is not None
        return JSONResponse({"removed": accounts.server}, headers=HEADERS)
