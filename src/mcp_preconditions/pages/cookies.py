"""The cookies of the gateway's pages (SPEC §14): HttpOnly, SameSite=Lax, Path=/, no Domain. When
the gateway's public URL is https (`--public-url`, or the listener's own), every one is `Secure` and
named with the `__Host-` prefix, which a browser keeps only from this very host over https: a
sibling host (`evil.example.com` beside `gw.example.com`) can neither set nor overwrite it. Over
plain http (loopback, tests) a browser refuses both, so cookies keep their plain names, not Secure.

The pages write and read their cookies by plain names (`set_cookie`, `request.cookies`); the rule
is applied once, around every page the gateway serves (`HostCookies`): on an https gateway it names
and secures each `Set-Cookie` on the way out, and on the way in passes the pages only `__Host-`
cookies (under their plain names), so a cookie tossed in without the prefix is never read.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HOST_PREFIX = "__Host-"
_DROPPED = ("domain", "path", "secure")  # set by the rule itself, never by a page


def set_cookie(response: Response, request: Request, name: str, value: str, seconds: float) -> None:
    """A page's cookie, by its plain name, for `seconds` (HostCookies secures it on https)."""
    response.set_cookie(name, value, max_age=int(seconds), path="/", httponly=True, samesite="lax",
                        secure=request.url.scheme == "https")


def secured(header: str) -> str:
    """A `Set-Cookie` value by the https rule: the `__Host-` prefix, `Path=/`, `Secure`, no
    `Domain`."""
    pair, *attributes = (part.strip() for part in header.split(";"))
    kept = [a for a in attributes if a and a.split("=", 1)[0].strip().lower() not in _DROPPED]
    return "; ".join([HOST_PREFIX + pair.removeprefix(HOST_PREFIX), *kept, "Path=/", "Secure"])


def host_cookies_only(header: str) -> str:
    """A `Cookie` header with only its `__Host-` cookies, under their plain names."""
    pairs = (part.strip() for part in header.split(";"))
    return "; ".join(p.removeprefix(HOST_PREFIX) for p in pairs if p.startswith(HOST_PREFIX))


class HostCookies:
    """ASGI middleware applying the rule of this module to `app` (every page of a gateway) when
    `secure` (the public URL is https); otherwise `app` as it is."""

    def __init__(self, app: ASGIApp, secure: bool) -> None:
        self.app = app
        self.secure = secure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.secure or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookies = "; ".join(v.decode("latin-1") for k, v in scope["headers"] if k == b"cookie")
        headers = [(k, v) for k, v in scope["headers"] if k != b"cookie"]
        kept = host_cookies_only(cookies)
        if kept:
            headers.append((b"cookie", kept.encode("latin-1")))

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [
                    (k, secured(v.decode("latin-1")).encode("latin-1") if k.lower() == b"set-cookie"
                     else v) for k, v in message.get("headers", [])]}
            await send(message)

        await self.app({**scope, "headers": headers}, receive, sending)
