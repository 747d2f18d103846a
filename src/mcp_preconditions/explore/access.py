"""The page's token: a random secret made per run and announced in the page's URL (as Jupyter does).
The page itself is answered only with it in the query (`/?token=...`), its JSON endpoints only with it
in a header the page sends (a header: another site's page cannot send one without the browser asking
first, and a token kept out of URLs is kept out of logs). Only its static files are public.
"""

from __future__ import annotations

import hmac
import secrets

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

HEADER = "x-explore-token"
REFUSED = ("this page needs the token of the URL that `mcp-preconditions explore` printed "
           "(http://HOST:PORT/?token=...)")


def new_token() -> str:
    """A token for one run: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


class TokenRequired:
    """Answers 403, before reading anything else of the request, when its token is not the run's."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    def _given(self, scope: Scope) -> str | None:
        """The token a request carries where its path needs one; None: this path needs none."""
        path = scope["path"]
        if path.startswith("/static/"):
            return None
        if path == "/":
            return QueryParams(scope.get("query_string", b"")).get("token", "")
        return Headers(scope=scope).get(HEADER, "")  # /api/* and any other path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = self._given(scope) if scope["type"] == "http" else None
        if given is not None and not hmac.compare_digest(given.encode(), self._token):
            refused: Response = (PlainTextResponse(REFUSED + "\n", status_code=403)
                                 if scope["path"] == "/" else JSONResponse({"error": REFUSED}, 403))
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)
