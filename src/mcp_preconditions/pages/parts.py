"""What the credential pages share (credentials.py, connections.py): a plain
page, a redirect, the headers every answer carries, and the browser's flow binding (a random value
in a cookie that a `state` is bound to, so a stolen callback URL is refused in another browser).
"""

from __future__ import annotations

import html

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..credentials.pkce import random_id
from ..credentials.signin import SESSION_SECONDS
from .cookies import set_cookie

FLOW_COOKIE = "mcp_preconditions_flow"
SIGN_IN_CALLBACK = "/connect/callback"
# A link's id is a secret: pages with one send no referrer at all.
HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
           "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
           "X-Content-Type-Options": "nosniff"}


def page(status: int, title: str, text: str) -> HTMLResponse:
    body = (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"</head><body><h1>{html.escape(title)}</h1><p id=\"message\">{html.escape(text)}</p>"
            "</body></html>")
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=HEADERS)


def binding_of(request: Request) -> str:
    """This browser's flow binding: its cookie's, or a new one (`with_binding` sets it)."""
    return request.cookies.get(FLOW_COOKIE) or random_id()


def with_binding(response: Response, request: Request, binding: str) -> Response:
    if request.cookies.get(FLOW_COOKIE) != binding:
        set_cookie(response, request, FLOW_COOKIE, binding, SESSION_SECONDS)
    return response
