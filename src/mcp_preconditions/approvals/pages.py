"""The approver pages (SPEC §15), an ASGI app (starlette) the gateway mounts beside the credential
pages on its HTTP listener (or a stdio gateway's `--pages-listen`):

    GET  /approvals            the requests waiting that this approver may decide (HTML; JSON for a
                               bearer token)
    GET  /approvals/callback   the sign-in's redirect (`[auth.sign_in]`, credentials/signin.py)
    GET  /approvals/ID         one request: tool, arguments, caller, approval, expiry, and buttons
    POST /approvals/ID         the page's form (a signed-in approver, CSRF token), or a script's
                               `{"decision": "approve" | "refuse"}` with a bearer token: 200 taken,
                               400 malformed, 401 no token, 403 not an approver (or the caller),
                               404 unknown or expired, 409 decided already, 503 a backend is down

An approver meets every requirement of the approval's `approvers`, judged by the guard in force
(approvers.judge_approver): a bearer token as the guard verifies it, a signed-in person by the
claims of the ID token the sign-in returned. Nobody sees a request they may not decide; no token,
code or cookie is logged; pages are never cached or framed and send no referrer to other sites.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from urllib.parse import parse_qs, urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..auth.base import Authenticator
from ..auth.header import credentials_from_authorization_header
from ..credentials.pages import FLOW_COOKIE, _cookie, page
from ..credentials.pkce import random_id
from ..credentials.signin import SESSION_SECONDS, SignIn
from ..errors import BackendError, FlowError
from ..principal import Identity
from . import page_views as views
from .approvers import Evaluate, judge_approver
from .binding import Party
from .lifecycle import ApprovalRequest, Decision, State
from .page_session import APPROVER_COOKIE, ApproverSessions
from .plan import CompiledApproval
from .record import Event, events_of
from .resolver import NAMESPACE, ApprovalResolver
from .store import ApprovalStore, Changed

if TYPE_CHECKING:
    from ..snapshot import Snapshot

log = logging.getLogger("mcp_preconditions.approvals")

PATHS = ("/approvals",)  # what the gateway routes to this app: the path and everything under it
SIGN_IN_CALLBACK = "/approvals/callback"
MAX_BODY_BYTES = 1024  # `{"decision": "approve"}`, or the page's form with its CSRF token
LISTED = 100  # requests read per store for a listing
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what store.new_id makes (anything else is unknown)
# `same-origin`, not `no-referrer`: under no-referrer a browser posts the page's form with
# `Origin: null`, which the listener's DNS-rebinding check (and ours) refuses. The page links nowhere
# else, so no other site learns a request's ID.
_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "same-origin",
            "Content-Security-Policy": views.CSP, "X-Content-Type-Options": "nosniff"}


class Approving(NamedTuple):
    """What the policy in force says about approvals: read anew for each request, so a reload is
    followed (a removed approval's requests are unknown; changed approvers apply at once)."""

    approvals: Mapping[str, CompiledApproval]
    evaluate: Evaluate
    confidential: Collection[str]
    counted: Callable[[Iterable[Event]], None]  # the results a decision made: approvals_total


class _HasSnapshot(Protocol):
    @property
    def snapshot(self) -> Snapshot: ...


def approving_of(guard: _HasSnapshot) -> Callable[[], Approving]:
    """The approvals of `guard`'s current snapshot (none when its policy defines none)."""
    def current() -> Approving:
        snap = guard.snapshot
        resolver = snap.registry.get(NAMESPACE)
        if not isinstance(resolver, ApprovalResolver):  # (a registry always has one)
            return Approving({}, snap.evaluate_one, snap.confidential, lambda events: None)
        return Approving(resolver.approvals, snap.evaluate_one, snap.confidential, resolver.count)
    return current


class Refused(Exception):
    """A step the pages refuse: its HTTP status, the JSON error code, and what a person is told."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status, self.code = status, code
        super().__init__(message)


_UNKNOWN = Refused(404, "not_found", "Unknown or expired approval request.")
_REFUSALS = {"unknown": _UNKNOWN, "decided": Refused(409, "already_decided", "This request was "
             "decided already."), "own": Refused(403, "forbidden", "Nobody approves their own call.")}


class ApprovalPages:
    """The approver pages of one gateway. `current`: the approvals in force (`approving_of`);
    `authenticator`: the guard's, for bearer tokens; `sign_in` and `key` (the key sealing the
    approver's cookie, and the CSRF tokens): people in browsers, when `[auth.sign_in]` is set;
    `base_url`: where browsers reach the gateway."""

    def __init__(self, current: Callable[[], Approving], authenticator: Authenticator,
                 base_url: str, sign_in: SignIn | None = None, key: bytes | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.current = current
        self.authenticator = authenticator
        self.base_url = base_url.rstrip("/")
        self.sign_in = sign_in if key is not None else None
        self.sessions = ApproverSessions(key, clock) if key is not None else None

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/approvals", self._guarded(self.listing), methods=["GET"]),
            Route(SIGN_IN_CALLBACK, self._guarded(self.signed_in), methods=["GET"]),
            Route("/approvals/{request_id}", self._guarded(self.show), methods=["GET"]),
            Route("/approvals/{request_id}", self._guarded(self.decide), methods=["POST"]),
        ])

    @staticmethod
    def _guarded(handler: Callable[[Request], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
        """A refused step is its page (or JSON for a script); a backend that is down is a 503;
        anything unexpected is one logged line with its type only (a message may hold a code)."""
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                refused = _refusal(request, exc)
            if _scripted(request):
                headers = {**_HEADERS, "WWW-Authenticate": 'Bearer error="invalid_token"'} \
                    if refused.status == 401 else _HEADERS
                return JSONResponse({"error": refused.code, "message": str(refused)},
                                    refused.status, headers=headers)
            return page(refused.status, "Approval", str(refused))
        return run

    # -- who is asking --------------------------------------------------------------------------------
    async def _bearer(self, request: Request) -> Identity:
        identity = await self.authenticator.authenticate(
            credentials_from_authorization_header(request.headers.get("authorization")))
        if identity.principal is not None:
            return identity
        if identity.error:
            raise Refused(503, "temporarily_unavailable", "The token could not be verified now.")
        raise Refused(401, "invalid_token", "A valid bearer token is needed.")

    def _person(self, request: Request) -> tuple[Identity, str] | None:
        """The signed-in approver of this browser (and their cookie), or None."""
        cookie = request.cookies.get(APPROVER_COOKIE)
        identity = self.sessions.identity_of(cookie) if self.sessions is not None else None
        return (identity, cookie) if identity is not None and cookie else None

    async def _browser(self, request: Request) -> tuple[Identity, str] | Response:
        """The signed-in approver, or the redirect that signs them in (back to this page)."""
        if self.sign_in is None:
            raise Refused(403, "sign_in_not_configured", "Sign-in is not configured on this gateway "
                          "([auth.sign_in]): approve with POST /approvals/ID and a bearer token.")
        person = self._person(request)
        if person is not None:
            return person
        binding = request.cookies.get(FLOW_COOKIE) or random_id()
        url = await self.sign_in.begin(request.url.path, self.base_url + SIGN_IN_CALLBACK, binding)
        response = RedirectResponse(url, status_code=303, headers=_HEADERS)
        if request.cookies.get(FLOW_COOKIE) != binding:
            _cookie(response, request, FLOW_COOKIE, binding, SESSION_SECONDS)
        return response

    async def signed_in(self, request: Request) -> Response:
        if self.sign_in is None or self.sessions is None:
            raise Refused(404, "not_found", "This gateway signs nobody in.")
        _, claims, return_to = await self.sign_in.finish_with_claims(
            request.query_params, request.cookies.get(FLOW_COOKIE))
        cookie = self.sessions.seal(claims)
        response = RedirectResponse(return_to, status_code=303, headers=_HEADERS)
        _cookie(response, request, APPROVER_COOKIE, cookie, SESSION_SECONDS)
        return response

    # -- pages -----------------------------------------------------------------------------------------
    async def listing(self, request: Request) -> Response:
        if _scripted(request):
            found = await self._decidable(await self._bearer(request))
            return JSONResponse({"requests": [views.as_json(r) for r in found]}, headers=_HEADERS)
        who = await self._browser(request)
        if isinstance(who, Response):
            return who
        return HTMLResponse(views.listing_page(await self._decidable(who[0])), headers=_HEADERS)

    async def _decidable(self, identity: Identity) -> list[ApprovalRequest]:
        """The requests waiting that `identity` may decide, soonest to expire first."""
        now = self.current()
        found: list[ApprovalRequest] = []
        for store in _stores(now):
            for waiting in await store.waiting(LISTED):
                approval = now.approvals.get(waiting.binding.approval)
                if approval is None or approval.store is not store or approval.approvers is None:
                    continue
                ruling = await judge_approver(approval.approvers, waiting, identity, now.evaluate,
                                              now.confidential)
                if ruling.allowed:
                    found.append(waiting)
        return sorted(found, key=lambda r: (r.expires_at, r.id))

    async def show(self, request: Request) -> Response:
        if _scripted(request):
            identity = await self._bearer(request)
            found, _ = await self._judged(request.path_params["request_id"], identity)
            return JSONResponse(views.as_json(found), headers=_HEADERS)
        who = await self._browser(request)
        if isinstance(who, Response):
            return who
        identity, cookie = who
        found, _ = await self._judged(request.path_params["request_id"], identity)
        assert self.sessions is not None  # (a signed-in approver)
        html = views.request_page(found, self.sessions.csrf(cookie, found.id))
        return HTMLResponse(html, headers=_HEADERS)

    async def decide(self, request: Request) -> Response:
        request_id = request.path_params["request_id"]
        if _scripted(request):
            identity = await self._bearer(request)
            body = await _body(request)
            decided = await self._decide(request_id, _json_decision(body), identity)
            return JSONResponse({"id": decided.id, "state": decided.state.value}, headers=_HEADERS)
        person = self._person(request) if self.sign_in is not None else None
        if person is None:
            raise Refused(403, "forbidden", "Sign in first: open this request's page again.")
        body = await _body(request)
        form = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4)
        given = (form.get("csrf") or [""])[0]
        assert self.sessions is not None
        if not self._same_origin(request) or not self.sessions.csrf_ok(person[1], request_id, given):
            raise Refused(403, "forbidden", "This form was not sent from its page: open it again.")
        decided = await self._decide(request_id, _decision((form.get("decision") or [""])[0]),
                                     person[0])
        said = "approved: the caller can now make the call again, once" \
            if decided.state is State.APPROVED else "refused"
        return page(200, "Approval", f"The call to {decided.binding.tool} is {said}.")

    # -- the decision ----------------------------------------------------------------------------------
    async def _judged(self, request_id: str, identity: Identity, now: Approving | None = None
                      ) -> tuple[ApprovalRequest, CompiledApproval]:
        """The request and its approval, when `identity` may decide it; else Refused (404 before
        403: an approver never learns more than that a request they cannot decide exists)."""
        now = now or self.current()
        found, approval = await _find(request_id, now)
        assert approval.approvers is not None
        ruling = await judge_approver(approval.approvers, found, identity, now.evaluate,
                                      now.confidential)
        if ruling.error:
            raise Refused(503, "temporarily_unavailable", "Whether you may approve this could not "
                          "be decided now (a backend did not answer); try again.")
        if not ruling.allowed:
            raise Refused(403, "forbidden", f"You cannot decide this request: {ruling.reason}.")
        return found, approval

    async def _decide(self, request_id: str, decision: Decision, identity: Identity
                      ) -> ApprovalRequest:
        now = self.current()
        found, approval = await self._judged(request_id, identity, now)
        changed = await approval.store.decide(found.id, decision, Party.of(identity))
        if not isinstance(changed, Changed):
            raise _REFUSALS.get(changed, _UNKNOWN)
        who = Party.of(identity)  # the audit trail: who decided which request
        log.info("approval %r request %s %s by %s (%s)", approval.name, found.id,
                 changed.request.state.value, who.subject if who else "?", who.issuer if who else "?")
        now.counted(events_of(approval.name, changed.made))
        return changed.request

    def _same_origin(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None or origin == "null":
            return origin is None
        own = urlsplit(self.base_url)
        return origin == f"{own.scheme}://{own.netloc}"


async def _find(request_id: str, now: Approving) -> tuple[ApprovalRequest, CompiledApproval]:
    """The request and its approval in force; 404 for anything not decidable on a page (unknown,
    expired, a `self` question, an approval the policy no longer defines)."""
    if not _ID.fullmatch(request_id):
        raise _UNKNOWN
    for store in _stores(now):
        found = await store.get(request_id)
        if found is None:
            continue
        approval = now.approvals.get(found.binding.approval)
        if approval is None or approval.store is not store or approval.approvers is None or \
                found.self_approval or found.state is State.EXPIRED:
            raise _UNKNOWN
        return found, approval
    raise _UNKNOWN


def _stores(now: Approving) -> list[ApprovalStore]:
    stores: list[ApprovalStore] = []
    for approval in now.approvals.values():
        if approval.approvers is not None and not any(s is approval.store for s in stores):
            stores.append(approval.store)
    return stores


async def _body(request: Request) -> bytes:
    """The request's body, at most MAX_BODY_BYTES (413 past it, before reading the rest)."""
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
        raise Refused(413, "too_large", f"The body is larger than {MAX_BODY_BYTES} bytes.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise Refused(413, "too_large", f"The body is larger than {MAX_BODY_BYTES} bytes.")
    return body


def _decision(value: Any) -> Decision:
    if value == "approve" or value == "refuse":
        return "approve" if value == "approve" else "refuse"
    raise Refused(400, "invalid_request", 'The decision must be "approve" or "refuse".')


def _json_decision(body: bytes) -> Decision:
    try:
        data = json.loads(body)
    except ValueError:
        raise Refused(400, "invalid_request", 'The body must be JSON: {"decision": "approve" | '
                      '"refuse"}.') from None
    if not isinstance(data, dict) or set(data) != {"decision"}:
        raise Refused(400, "invalid_request", 'The body must be {"decision": "approve" | '
                      '"refuse"} and nothing else.')
    return _decision(data["decision"])


def _scripted(request: Request) -> bool:
    """A script presents a bearer token (or sends JSON, which a page's form never does); a browser,
    the approver's cookie."""
    return "authorization" in request.headers or \
        request.headers.get("content-type", "").startswith("application/json")


def _route(request: Request) -> str:
    path = request.url.path
    return "/approvals/ID" if path.startswith("/approvals/") and path != SIGN_IN_CALLBACK else path


def _refusal(request: Request, exc: Exception) -> Refused:
    """What a failed step answers: its own refusal, a sign-in's page, a 503 for a backend that is
    down, else a 500 logged in one line with the exception's type only (a message may hold a code
    or a state)."""
    if isinstance(exc, Refused):
        return exc
    if isinstance(exc, FlowError):
        return Refused(exc.status, "refused", str(exc))
    if isinstance(exc, BackendError):
        log.warning("approval page %s: a backend failed: %s", _route(request), type(exc).__name__)
        return Refused(503, "temporarily_unavailable", "A service the gateway needs is "
                       "unavailable; try again.")
    log.error("approval page %s failed: %s", _route(request), type(exc).__name__)
    return Refused(500, "server_error", "The gateway could not complete this step.")
