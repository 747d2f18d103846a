"""The approver pages (SPEC §15), an ASGI app (starlette) the gateway mounts beside the credential
pages on its HTTP listener (or a stdio gateway's `--pages-listen`):

    GET  /approvals            the requests waiting that this person may decide, and their own
                               waiting for an approver (HTML; JSON for a bearer token)
    GET  /approvals/sign-in    starts the sign-in (`[auth.sign_in]`, credentials/signin.py), back
                               to `?next=` (an approvals page)
    GET  /approvals/callback   the sign-in's redirect
    GET  /approvals/ID         one request, the whole call (approval_views.py), and buttons
    POST /approvals/ID         the page's form (a signed-in approver, CSRF token), or a script's
                               `{"decision": "approve" | "refuse"}` with a bearer token: 200 taken,
                               400 malformed, 401 no token, 403 not an approver (or the caller),
                               404 unknown or expired, 409 decided already, 503 a backend is down

An approver meets every requirement of the approval's `approvers`, judged by the guard in force
(approvers.judge_approver): a bearer token as the guard verifies it, a signed-in person by the
claims of the ID token the sign-in returned. Nobody sees a request they may not decide (but its
caller, who decides nothing); a visitor who is not signed in sees none and is stored nothing until
they start a sign-in; no token, code or cookie is logged; pages are never cached or framed and send
no referrer to other sites.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol
from urllib.parse import parse_qs, urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..approvals.approvers import Evaluate, judge_approver
from ..approvals.lifecycle import ApprovalRequest, Decision, Event, Party, State, events_of
from ..approvals.plan import CompiledApproval
from ..approvals.resolver import NAMESPACE, PAGES_PATH, ApprovalResolver
from ..approvals.store import ApprovalStore, Changed, Cursor
from ..auth.base import Authenticator
from ..auth.header import credentials_from_authorization_header
from ..credentials.pkce import random_id
from ..credentials.signin import SESSION_SECONDS, SignIn
from ..errors import PageRefused
from ..principal import Identity
from . import approval_views as views
from .approval_requests import (
    REFUSALS,
    SIGN_IN_CALLBACK,
    UNKNOWN,
    decision_of,
    json_decision,
    read_body,
    refusal_of,
    scripted,
)
from .approver_sessions import APPROVER_COOKIE, ApproverSessions
from .cookies import set_cookie
from .parts import FLOW_COOKIE, page

if TYPE_CHECKING:
    from ..snapshot import Snapshot

log = logging.getLogger("mcp_preconditions.approvals")

PATHS = (PAGES_PATH,)  # what the gateway routes to this app: the path and everything under it
SIGN_IN_START = "/approvals/sign-in"
BATCH = 100  # requests read from a store at a time for a listing (all are listed)
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what store.new_id makes (anything else is unknown)
_NEXT = re.compile(r"/approvals(/[A-Za-z0-9_-]{1,64})?")  # where a sign-in may return to
# What the gateway knows of a tool a request names (its server, its description), by the name the
# caller used; None when no server lists it now. Without it the page shows no Approve button.
Describe = Callable[[str], "views.ToolFacts | None"]
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


class ApprovalPages:
    """The approver pages of one gateway. `current`: the approvals in force (`approving_of`);
    `authenticator`: the guard's, for bearer tokens; `sign_in` and `key` (the key sealing the
    approver's cookie, and the CSRF tokens): people in browsers, when `[auth.sign_in]` is set;
    `base_url`: where browsers reach the gateway."""

    def __init__(self, current: Callable[[], Approving], authenticator: Authenticator,
                 base_url: str, sign_in: SignIn | None = None, key: bytes | None = None, *,
                 describe: Describe | None = None, clock: Callable[[], float] = time.time) -> None:
        self.current = current
        self.authenticator = authenticator
        self.base_url = base_url.rstrip("/")
        self.sign_in = sign_in if key is not None else None
        self.sessions = ApproverSessions(key, clock) if key is not None else None
        self.describe = describe

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/approvals", self._guarded(self.listing), methods=["GET"]),
            Route(SIGN_IN_CALLBACK, self._guarded(self.signed_in), methods=["GET"]),
            Route(SIGN_IN_START, self._guarded(self.start_sign_in), methods=["GET"]),
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
                refused = refusal_of(request, exc)
            if scripted(request):
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
            raise PageRefused(503, "temporarily_unavailable", "The token could not be verified now.")
        raise PageRefused(401, "invalid_token", "A valid bearer token is needed.")

    def _person(self, request: Request) -> tuple[Identity, str] | None:
        """The signed-in approver of this browser (and their cookie), or None."""
        cookie = request.cookies.get(APPROVER_COOKIE)
        identity = self.sessions.identity_of(cookie) if self.sessions is not None else None
        return (identity, cookie) if identity is not None and cookie else None

    async def _browser(self, request: Request) -> tuple[Identity, str] | Response:
        """The signed-in person, or the page offering a sign-in (nothing is stored for a visitor
        until they start one: `start_sign_in`)."""
        if self.sign_in is None:
            raise PageRefused(403, "sign_in_not_configured", "Sign-in is not configured on this gateway "
                          "([auth.sign_in]): approve with POST /approvals/ID and a bearer token.")
        person = self._person(request)
        if person is not None:
            return person
        return HTMLResponse(views.sign_in_page(request.url.path, SIGN_IN_START), headers=_HEADERS)

    async def start_sign_in(self, request: Request) -> Response:
        """The visitor asked to sign in: a flow is begun (and stored) now, back to `next`."""
        if self.sign_in is None:
            raise PageRefused(404, "not_found", "This gateway signs nobody in.")
        back = request.query_params.get("next", "/approvals")
        if not _NEXT.fullmatch(back):
            raise PageRefused(400, "invalid_request", "A sign-in returns only to an approvals page.")
        if self._person(request) is not None:
            return RedirectResponse(back, status_code=303, headers=_HEADERS)
        binding = request.cookies.get(FLOW_COOKIE) or random_id()
        url = await self.sign_in.begin(back, self.base_url + SIGN_IN_CALLBACK, binding)
        response = RedirectResponse(url, status_code=303, headers=_HEADERS)
        if request.cookies.get(FLOW_COOKIE) != binding:
            set_cookie(response, request, FLOW_COOKIE, binding, SESSION_SECONDS)
        return response

    async def signed_in(self, request: Request) -> Response:
        if self.sign_in is None or self.sessions is None:
            raise PageRefused(404, "not_found", "This gateway signs nobody in.")
        _, claims, return_to = await self.sign_in.finish_with_claims(
            request.query_params, request.cookies.get(FLOW_COOKIE))
        cookie = self.sessions.seal(claims)
        response = RedirectResponse(return_to, status_code=303, headers=_HEADERS)
        set_cookie(response, request, APPROVER_COOKIE, cookie, SESSION_SECONDS)
        return response

    # -- pages -----------------------------------------------------------------------------------------
    async def listing(self, request: Request) -> Response:
        if scripted(request):
            identity = await self._bearer(request)
            found, mine = await self._decidable(identity), await self._mine(identity)
            return JSONResponse({"requests": [views.as_json(r) for r in found],
                                 "mine": [views.as_json(r) for r in mine]}, headers=_HEADERS)
        who = await self._browser(request)
        if isinstance(who, Response):
            return who
        identity = who[0]
        page = views.listing_page(await self._decidable(identity), await self._mine(identity),
                                  views.who(Party.of(identity)))
        return HTMLResponse(page, headers=_HEADERS)

    async def _decidable(self, identity: Identity) -> list[ApprovalRequest]:
        """Every request waiting that `identity` may decide, soonest to expire first."""
        now = self.current()
        found: list[ApprovalRequest] = []
        for store in _stores(now):
            after: Cursor | None = None
            while batch := await store.waiting(BATCH, after):
                after = (batch[-1].expires_at, batch[-1].id)
                for waiting in batch:
                    approval = now.approvals.get(waiting.binding.approval)
                    if approval is None or approval.store is not store or approval.approvers is None:
                        continue
                    ruling = await judge_approver(approval.approvers, waiting, identity,
                                                  now.evaluate, now.confidential)
                    if ruling.allowed:
                        found.append(waiting)
        return sorted(found, key=lambda r: (r.expires_at, r.id))

    async def _mine(self, identity: Identity) -> list[ApprovalRequest]:
        """The person's own requests waiting for an approver (of approvals the policy defines)."""
        party, now = Party.of(identity), self.current()
        if party is None:
            return []
        found = [r for store in _stores(now) for r in await store.pending_of(party)
                 if (a := now.approvals.get(r.binding.approval)) is not None and a.store is store]
        return sorted(found, key=lambda r: (r.expires_at, r.id))

    async def show(self, request: Request) -> Response:
        if scripted(request):
            identity = await self._bearer(request)
            found, _, _ = await self._viewed(request.path_params["request_id"], identity)
            return JSONResponse(views.as_json(found), headers=_HEADERS)
        who = await self._browser(request)
        if isinstance(who, Response):
            return who
        identity, cookie = who
        found, _, own = await self._viewed(request.path_params["request_id"], identity)
        assert self.sessions is not None  # (a signed-in person)
        shown = views.request_page(found, self.sessions.csrf(cookie, found.id),
                                   views.who(Party.of(identity)), self._facts(found), own)
        return HTMLResponse(shown.html, headers=_HEADERS)

    def _facts(self, request: ApprovalRequest) -> views.ToolFacts | None:
        describe = self.describe
        if describe is None:
            return None
        try:
            return describe(request.binding.tool)
        except Exception as exc:  # what cannot be shown is not approved here
            log.warning("approval page: describing a tool failed: %s", type(exc).__name__)
            return None

    async def decide(self, request: Request) -> Response:
        request_id = request.path_params["request_id"]
        if scripted(request):
            identity = await self._bearer(request)
            body = await read_body(request)
            decided = await self._decide(request_id, json_decision(body), identity)
            return JSONResponse({"id": decided.id, "state": decided.state.value}, headers=_HEADERS)
        person = self._person(request) if self.sign_in is not None else None
        if person is None:
            raise PageRefused(403, "forbidden", "Sign in first: open this request's page again.")
        body = await read_body(request)
        form = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4)
        given = (form.get("csrf") or [""])[0]
        assert self.sessions is not None
        if not self._same_origin(request) or not self.sessions.csrf_ok(person[1], request_id, given):
            raise PageRefused(403, "forbidden", "This form was not sent from its page: open it again.")
        decision = decision_of((form.get("decision") or [""])[0])
        decided = await self._decide(request_id, decision, person[0], on_page=decision == "approve")
        said = "approved: the caller can now make the call again, once" \
            if decided.state is State.APPROVED else "refused"
        return page(200, "Approval", f"The call to {decided.binding.tool} is {said}.")

    # -- the decision ----------------------------------------------------------------------------------
    async def _judged(self, request_id: str, identity: Identity, now: Approving | None = None
                      ) -> tuple[ApprovalRequest, CompiledApproval]:
        """The request and its approval, when `identity` may decide it; else PageRefused (404 before
        403: an approver never learns more than that a request they cannot decide exists)."""
        now = now or self.current()
        found, approval = await _find(request_id, now)
        assert approval.approvers is not None
        ruling = await judge_approver(approval.approvers, found, identity, now.evaluate,
                                      now.confidential)
        if ruling.error:
            raise PageRefused(503, "temporarily_unavailable", "Whether you may approve this could not "
                          "be decided now (a backend did not answer); try again.")
        if not ruling.allowed:
            raise PageRefused(403, "forbidden", f"You cannot decide this request: {ruling.reason}.")
        return found, approval

    async def _viewed(self, request_id: str, identity: Identity
                      ) -> tuple[ApprovalRequest, CompiledApproval, bool]:
        """The request, when `identity` may decide it or is its caller (who sees it, `own`, and
        decides nothing); else PageRefused as `_judged`."""
        now = self.current()
        found, approval = await _find(request_id, now)
        party = Party.of(identity)
        if party is not None and party == found.binding.caller and not identity.error:
            return found, approval, True
        return (*await self._judged(request_id, identity, now), False)

    async def _decide(self, request_id: str, decision: Decision, identity: Identity,
                      on_page: bool = False) -> ApprovalRequest:
        """The decision taken. An approval from the page is taken only when the page could show
        the whole call (`on_page`): what a person could not read is not approved."""
        now = self.current()
        found, approval = await self._judged(request_id, identity, now)
        if on_page and not views.request_page(found, None, "", self._facts(found)).complete:
            raise PageRefused(409, "incomplete", "This page cannot show the whole call, so it cannot be "
                                             "approved here.")
        changed = await approval.store.decide(found.id, decision, Party.of(identity))
        if not isinstance(changed, Changed):
            raise REFUSALS.get(changed, UNKNOWN)
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
        raise UNKNOWN
    for store in _stores(now):
        found = await store.get(request_id)
        if found is None:
            continue
        approval = now.approvals.get(found.binding.approval)
        if approval is None or approval.store is not store or approval.approvers is None or \
                found.self_approval or found.state is State.EXPIRED:
            raise UNKNOWN
        return found, approval
    raise UNKNOWN


def _stores(now: Approving) -> list[ApprovalStore]:
    stores: list[ApprovalStore] = []
    for approval in now.approvals.values():
        if approval.approvers is not None and not any(s is approval.store for s in stores):
            stores.append(approval.store)
    return stores
