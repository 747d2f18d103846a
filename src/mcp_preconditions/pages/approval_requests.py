"""What the approval pages read and answer besides the pages themselves: a request's body (bounded),
the decision it carries, whether a script or a browser sent it, and what a refused step answers
(its status, code and message; a backend that is down is a 503; anything unexpected one logged line
with its type only).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request

from ..approvals.lifecycle import Decision
from ..errors import BackendError, FlowError, PageRefused

log = logging.getLogger("mcp_preconditions.approvals")

MAX_BODY_BYTES = 1024  # `{"decision": "approve"}`, or the page's form with its CSRF token
SIGN_IN_CALLBACK = "/approvals/callback"


UNKNOWN = PageRefused(404, "not_found", "Unknown or expired approval request.")
REFUSALS = {"unknown": UNKNOWN, "decided": PageRefused(409, "already_decided", "This request was "
             "decided already."), "own": PageRefused(403, "forbidden", "Nobody approves their own call.")}


async def read_body(request: Request) -> bytes:
    """The request's body, at most MAX_BODY_BYTES (413 past it, before reading the rest)."""
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
        raise PageRefused(413, "too_large", f"The body is larger than {MAX_BODY_BYTES} bytes.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise PageRefused(413, "too_large", f"The body is larger than {MAX_BODY_BYTES} bytes.")
    return body


def decision_of(value: Any) -> Decision:
    if value == "approve" or value == "refuse":
        return "approve" if value == "approve" else "refuse"
    raise PageRefused(400, "invalid_request", 'The decision must be "approve" or "refuse".')


def json_decision(body: bytes) -> Decision:
    try:
        data = json.loads(body)
    except ValueError:
        raise PageRefused(400, "invalid_request", 'The body must be JSON: {"decision": "approve" | '
                      '"refuse"}.') from None
    if not isinstance(data, dict) or set(data) != {"decision"}:
        raise PageRefused(400, "invalid_request", 'The body must be {"decision": "approve" | '
                      '"refuse"} and nothing else.')
    return decision_of(data["decision"])


def scripted(request: Request) -> bool:
    """A script presents a bearer token (or sends JSON, which a page's form never does); a browser,
    the approver's cookie."""
    return "authorization" in request.headers or \
        request.headers.get("content-type", "").startswith("application/json")


def _route(request: Request) -> str:
    path = request.url.path
    return "/approvals/ID" if path.startswith("/approvals/") and path != SIGN_IN_CALLBACK else path


def refusal_of(request: Request, exc: Exception) -> PageRefused:
    """What a failed step answers: its own refusal, a sign-in's page, a 503 for a backend that is
    down, else a 500 logged in one line with the exception's type only (a message may hold a code
    or a state)."""
    if isinstance(exc, PageRefused):
        return exc
    if isinstance(exc, FlowError):
        return PageRefused(exc.status, "refused", str(exc))
    if isinstance(exc, BackendError):
        log.warning("approval page %s: a backend failed: %s", _route(request), type(exc).__name__)
        return PageRefused(503, "temporarily_unavailable", "A service the gateway needs is "
                       "unavailable; try again.")
    log.error("approval page %s failed: %s", _route(request), type(exc).__name__)
    return PageRefused(500, "server_error", "The gateway could not complete this step.")
