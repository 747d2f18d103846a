"""`/connections` in a browser (SPEC §15), for a person whose client cannot open a connect link:

    GET  /connections           (Accept: text/html, no bearer token) a visitor not signed in is
                                offered a sign-in, and nothing is stored for them; a signed-in
                                person sees every `kind = "oauth"` server, with Connect on those
                                they have not connected and Disconnect on those they have
    GET  /connections/sign-in   starts the sign-in (`[auth.sign_in]`), back to /connections
    POST /connections           the page's forms: `server`, `do` (connect | disconnect), `csrf`

Connect goes on to a connect link made for the signed-in person (the same single-use flow as a
denial's link); Disconnect removes the person's own connection. Both forms carry a token bound to
the person's cookie and are refused from another origin. A person reaches only their own
connections: every read and write is keyed by the signed-in person, never by the form.
"""

from __future__ import annotations

import html
import logging
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..credentials.accounts import Connection
from ..credentials.caller import Caller
from ..credentials.connect import ConnectFlow
from ..credentials.signin import SESSION_COOKIE, SignIn
from ..errors import FlowError
from .parts import HEADERS, SIGN_IN_CALLBACK, binding_of, redirect, with_binding

log = logging.getLogger("mcp_preconditions.credentials")

PATH = "/connections"
SIGN_IN_PATH = "/connections/sign-in"
FORM = "connections"  # what the page's form tokens are for
MAX_BODY_BYTES = 1024
# The form posts to this page: `same-origin` (under `no-referrer` a browser posts with
# `Origin: null`, which the listener's DNS-rebinding check refuses); no link id is on it. No
# `form-action`: Connect's answer redirects on to the authorization server, which it would block.
_HEADERS = {**HEADERS, "Referrer-Policy": "same-origin",
            "Content-Security-Policy": "default-src 'none'; base-uri 'none'; frame-ancestors 'none'"}


def wants_page(request: Request) -> bool:
    """A browser asking for the page (no bearer token; `Accept: text/html`), not a script."""
    return "authorization" not in request.headers and \
        "text/html" in request.headers.get("accept", "")


class ConnectionsPage:
    """The browser's `/connections` of one gateway: its connect flow, signing people in."""

    def __init__(self, flow: ConnectFlow, sign_in: SignIn) -> None:
        self.flow = flow
        self.sign_in = sign_in

    def _person(self, request: Request) -> tuple[Caller, str] | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        person = self.sign_in.person_of(cookie)
        return (person, cookie) if person is not None and cookie else None

    async def show(self, request: Request) -> Response:
        who = self._person(request)
        if who is None:  # nothing stored until the visitor starts a sign-in
            return _document(200, "<p id=\"message\">Sign in to see and manage the accounts you "
                                  f"connected.</p><p><a id=\"sign-in\" href=\"{SIGN_IN_PATH}\">Sign in"
                                  "</a></p>")
        person, cookie = who
        rows = [(server, await accounts.load(person)) for server, accounts in self.flow.accounts.items()]
        token = self.sign_in.form_token(cookie, FORM)
        items = "".join(_row(server, connection, token) for server, connection in rows)
        signed = f"{html.escape(person.subject)} ({html.escape(person.issuer)})"
        return _document(200, f"<p id=\"who\">Signed in as {signed}</p>"
                              f"<table id=\"connections\">{items}</table>")

    async def start(self, request: Request) -> Response:
        if self._person(request) is not None:
            return redirect(PATH)
        binding = binding_of(request)
        url = await self.sign_in.begin(PATH, self.flow.base_url + SIGN_IN_CALLBACK, binding)
        return with_binding(redirect(url), request, binding)

    async def act(self, request: Request) -> Response:
        who = self._person(request)
        if who is None:
            raise FlowError(403, "Sign in first: open /connections again.")
        person, cookie = who
        form = parse_qs((await _body(request)).decode("utf-8", "replace"), max_num_fields=4)
        field = {name: (values or [""])[0] for name, values in form.items()}
        if not self._same_origin(request) or \
                not self.sign_in.form_token_ok(cookie, FORM, field.get("csrf", "")):
            raise FlowError(403, "This form was not sent from its page: open /connections again.")
        server = field.get("server", "")
        accounts = self.flow.accounts.get(server)
        if accounts is None:
            raise FlowError(404, "No server by that name has connected accounts.")
        action = field.get("do")
        if action == "connect":
            return redirect(await self.flow.link(person, server))
        if action != "disconnect":
            raise FlowError(400, 'The form must say connect or disconnect.')
        if not await accounts.remove(person):
            raise FlowError(404, f"You have no connection for '{server}'.")
        log.info("credential for server %s: a connection was removed by its owner", server)
        return redirect(PATH)

    def _same_origin(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None:  # not a browser's form (a browser sends Origin with every POST)
            return True
        own = urlsplit(self.flow.base_url)
        return origin == f"{own.scheme}://{own.netloc}"


def _row(server: str, connection: Connection | None, token: str) -> str:
    name = html.escape(server)
    if connection is None:
        state, action, label = "not connected", "connect", "Connect"
    else:
        state, action, label = f"connected since {_when(connection.connected_at)}", "disconnect", \
            "Disconnect"
    return (f"<tr data-server=\"{name}\"><td>{name}</td><td class=\"state\">{state}</td><td>"
            f"<form method=\"post\" action=\"{PATH}\"><input type=\"hidden\" name=\"server\" "
            f"value=\"{name}\"><input type=\"hidden\" name=\"csrf\" value=\"{html.escape(token)}\">"
            f"<button type=\"submit\" name=\"do\" value=\"{action}\">{label}</button></form>"
            "</td></tr>")


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _document(status: int, body: str) -> HTMLResponse:
    return HTMLResponse("<!doctype html><html><head><meta charset=\"utf-8\"><title>Connected accounts"
                        f"</title></head><body><h1>Connected accounts</h1>{body}</body></html>",
                        status_code=status, headers=_HEADERS)


async def _body(request: Request) -> bytes:
    """The form, at most MAX_BODY_BYTES (413 past it, before reading the rest)."""
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
        raise FlowError(413, f"The form is larger than {MAX_BODY_BYTES} bytes.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise FlowError(413, f"The form is larger than {MAX_BODY_BYTES} bytes.")
    return body
