"""The approver pages' rules (SPEC §15) over a real Guard and memory store, with an authenticator and
a sign-in double (the real sign-in runs in Chromium in tests/integration/test_approval_pages.py):
the script API's status table, who sees which request, CSRF and origin on the page's form, the
whole call on the page (every argument, folded never cut, hidden characters escaped; no Approve
when it cannot be shown whole), the listing (every request, each one's arguments in short, the
person's own beside those they decide), nothing stored for a visitor who has not started a
sign-in, and the headers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from starlette.testclient import TestClient

from mcp_preconditions import Guard, Identity, Principal, parse_policy
from mcp_preconditions.approvals import MemoryApprovalStore, State, bind
from mcp_preconditions.approvals.lifecycle import Binding
from mcp_preconditions.credentials import Caller
from mcp_preconditions.namespaces import LiveSources
from mcp_preconditions.pages.approval_views import FOLDED_CHARACTERS, ToolFacts
from mcp_preconditions.pages.approvals import ApprovalPages, approving_of
from mcp_preconditions.pages.approver_sessions import APPROVER_COOKIE
from mcp_preconditions.principal import Credentials

ISSUER = "https://idp.example"
BASE = "http://testserver"
POLICY = b"""
confidential = ["auth:claim:clearance:top"]
[approvals.wire]
approvers = ["auth:claim:role:treasury"]
expires_seconds = 600
[approvals.top]
approvers = ["auth:claim:clearance:top"]
[approvals.mine]
approvers = "self"
"""
SOURCE = parse_policy(POLICY, "p.toml")


def person(subject: str, **claims: str) -> Identity:
    return Identity(Principal.from_claims({"iss": ISSUER, "sub": subject, **claims}))


PEOPLE = {"alice": person("alice", role="treasury"),  # the caller, a treasurer herself
          "bob": person("bob", role="treasury"), "carol": person("carol", role="clerk"),
          "dave": person("dave", clearance="top")}


class Tokens:
    """A token is a person's name; "down" is an authorization server that does not answer."""

    async def authenticate(self, credentials: Credentials) -> Identity:
        if credentials.token == "down":
            return Identity(failure="the key set did not answer", error=True)
        return PEOPLE.get(credentials.token or "", Identity(failure="invalid token"))


class SignInDouble:
    """Where `begin` sends a browser (each begun sign-in is a flow the real one stores), and who
    `finish_with_claims` signs in."""

    claims: Mapping[str, Any] = {"iss": ISSUER, "sub": "bob", "role": "treasury", "nonce": "n"}

    def __init__(self) -> None:
        self.begun: list[str] = []

    async def begin(self, return_to: str, redirect_uri: str, binding: str) -> str:
        self.begun.append(return_to)
        return f"{ISSUER}/authorize?return_to={return_to}&redirect_uri={redirect_uri}"

    async def finish_with_claims(self, answer: Mapping[str, str], binding: str | None
                                 ) -> tuple[Caller, Mapping[str, Any], str]:
        return Caller(ISSUER, "bob"), self.claims, "/approvals"


class World:
    def __init__(self, sign_in: bool = True) -> None:
        self.now = 1000.0
        self.store = MemoryApprovalStore(clock=lambda: self.now)
        self.events: list[tuple[str, State]] = []
        live = LiveSources(approvals=self.store,
                           approval_results=lambda name, result: self.events.append(
                               (name, State(result))))
        # (no tool: the pages decide requests, and a reload may drop an approval a tool would need)
        self.guard = Guard(SOURCE, {}, live=live, entry_points=False)
        self.tools: dict[str, ToolFacts] = {"send_wire": ToolFacts("bank", "Sends a wire transfer.")}
        self.sign_in = SignInDouble()
        self.pages = ApprovalPages(approving_of(self.guard), Tokens(), BASE,
                                   self.sign_in if sign_in else None,  # type: ignore[arg-type]
                                   b"k" * 32 if sign_in else None, describe=self.tools.get,
                                   clock=lambda: self.now)
        self.client = TestClient(self.pages.app(), follow_redirects=False)

    def request(self, approval: str = "wire", caller: str = "alice",
                arguments: dict[str, Any] | None = None, tool: str = "send_wire") -> str:
        binding = bind(approval, tool, arguments or {"amount": 5}, PEOPLE[caller],
                       self.guard.revision)
        assert isinstance(binding, Binding)
        opened = asyncio.run(self.store.ask(f"{approval}-question.0", binding, 600, 600)
                             if approval == "mine" else self.store.open(binding, 600, 600))
        return opened.request.id  # type: ignore[union-attr]

    def post(self, request_id: str, token: str | None, body: object = None,
             raw: bytes | None = None) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        content = raw if raw is not None else json.dumps(body or {"decision": "approve"}).encode()
        return self.client.post(f"/approvals/{request_id}", content=content,
                                headers={**headers, "Content-Type": "application/json"})

    def state(self, request_id: str) -> State:
        found = asyncio.run(self.store.get(request_id))
        assert found is not None
        return found.state

    def signed_in(self, **claims: str) -> str:
        assert self.pages.sessions is not None
        cookie = self.pages.sessions.seal({"iss": ISSUER, **claims})
        self.client.cookies.set(APPROVER_COOKIE, cookie)
        return cookie


@pytest.fixture
def world() -> Iterator[World]:
    yield World()


@pytest.mark.parametrize(("token", "body", "status", "message"), [
    ("bob", {"decision": "approve"}, 200, None),
    ("bob", {"decision": "refuse"}, 200, None),
    ("carol", {"decision": "approve"}, 403, "the approver does not meet: auth:claim:role:treasury"),
    ("alice", {"decision": "approve"}, 403, "nobody approves their own call"),
    ("nobody", {"decision": "approve"}, 401, "A valid bearer token is needed."),
    ("down", {"decision": "approve"}, 503, "The token could not be verified now."),
    ("bob", {"decision": "maybe"}, 400, 'The decision must be "approve" or "refuse".'),
    ("bob", {"decision": "approve", "also": 1}, 400, "and nothing else"),
    ("bob", ["approve"], 400, "and nothing else"),
])
def test_a_scripts_decision_answers_by_the_table(world: World, token: str, body: object,
                                                 status: int, message: str | None) -> None:
    request_id = world.request()
    answer = world.post(request_id, token, body)
    assert answer.status_code == status, answer.text
    assert answer.headers["cache-control"] == "no-store"
    if status == 200:
        want = State.APPROVED if body == {"decision": "approve"} else State.REFUSED
        assert answer.json() == {"id": request_id, "state": want.value}
        assert world.state(request_id) is want
        assert world.events == [("wire", want)]
        return
    assert message is not None and message in answer.json()["message"]
    assert world.state(request_id) is State.REQUESTED and world.events == []
    if status == 401:
        assert answer.headers["www-authenticate"] == 'Bearer error="invalid_token"'


def test_unknown_expired_self_and_decided_requests(world: World) -> None:
    assert world.post("no-such-request", "bob").status_code == 404
    assert world.post("a" * 65, "bob").status_code == 404  # not an ID the store makes
    assert world.post(world.request("mine"), "bob").status_code == 404  # answered in flight only
    decided = world.request()
    assert world.post(decided, "bob").status_code == 200
    again = world.post(decided, "bob", {"decision": "refuse"})
    assert (again.status_code, again.json()["error"]) == (409, "already_decided")
    assert world.state(decided) is State.APPROVED
    late = world.request(arguments={"amount": 6})
    world.now += 600
    expired = world.post(late, "bob")
    assert (expired.status_code, expired.json()["message"]) == (
        404, "Unknown or expired approval request.")


def test_a_malformed_or_large_body(world: World) -> None:
    request_id = world.request()
    assert world.post(request_id, "bob", raw=b"{not json").status_code == 400
    large = world.post(request_id, "bob", raw=b" " * 1025)
    assert (large.status_code, large.json()["error"]) == (413, "too_large")
    assert world.state(request_id) is State.REQUESTED


def test_a_confidential_requirement_is_never_named(world: World) -> None:
    request_id = world.request("top")
    refused = world.post(request_id, "carol")
    assert refused.status_code == 403
    assert "clearance" not in refused.text
    assert "does not meet this approval's requirements" in refused.json()["message"]
    assert world.post(request_id, "dave").status_code == 200


def test_a_listing_shows_only_what_this_approver_may_decide(world: World) -> None:
    wire = world.request()  # alice's call
    bobs = world.request(caller="bob", arguments={"amount": 7})
    top = world.request("top")
    world.request("mine")

    def listed(token: str) -> list[str]:
        answer = world.client.get("/approvals", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200
        return [r["id"] for r in answer.json()["requests"]]

    assert listed("bob") == [wire]  # not his own call, not the confidential one, not a question
    assert sorted(listed("alice")) == [bobs]
    assert listed("carol") == []
    assert listed("dave") == [top]
    shown = world.client.get(f"/approvals/{wire}", headers={"Authorization": "Bearer bob"}).json()
    assert shown == {"id": wire, "approval": "wire", "tool": "send_wire", "arguments": {"amount": 5},
                     "caller": {"issuer": ISSUER, "subject": "alice"}, "state": "requested",
                     "expires_at": 1600.0}
    assert world.client.get(f"/approvals/{wire}",
                            headers={"Authorization": "Bearer carol"}).status_code == 403


def test_a_page_offers_a_sign_in_and_stores_nothing_until_it_is_started(world: World) -> None:
    """Issue 39.11: each anonymous GET of an approvals page began a sign-in (a 600 s record, in
    Redis when shared). Now a visitor who is not signed in is shown a sign-in link, and only
    following it begins one."""
    request_id = world.request()
    for path in (f"/approvals/{request_id}", "/approvals", "/approvals/no-such-request"):
        answer = world.client.get(path)
        assert answer.status_code == 200 and "set-cookie" not in answer.headers
        assert "send_wire" not in answer.text and "alice" not in answer.text  # nothing shown
        assert f'href="/approvals/sign-in?next={path}"' in answer.text
    assert world.sign_in.begun == []  # nothing stored for a visitor
    start = world.client.get(f"/approvals/sign-in?next=/approvals/{request_id}")
    assert start.status_code == 303 and world.sign_in.begun == [f"/approvals/{request_id}"]
    assert start.headers["location"] == (f"{ISSUER}/authorize?return_to=/approvals/{request_id}"
                                         f"&redirect_uri={BASE}/approvals/callback")
    assert "mcp_preconditions_flow" in start.cookies
    for elsewhere in ("https://evil.example/", "//evil.example", "/connections", "/approvals/a/b"):
        refused = world.client.get("/approvals/sign-in", params={"next": elsewhere})
        assert refused.status_code == 400 and "returns only to an approvals page" in refused.text
    back = world.client.get("/approvals/callback?code=c&state=s")
    assert (back.status_code, back.headers["location"]) == (303, "/approvals")
    world.client.cookies.set(APPROVER_COOKIE, back.cookies[APPROVER_COOKIE])
    assert world.client.get(f"/approvals/{request_id}").status_code == 200
    assert world.client.get("/approvals/sign-in?next=/approvals").headers["location"] == "/approvals"
    assert len(world.sign_in.begun) == 1  # signed in: no second flow


def test_a_forged_or_expired_cookie_is_nobody(world: World) -> None:
    request_id = world.request()
    world.client.cookies.set(APPROVER_COOKIE, "Zm9yZ2Vk")
    assert 'id="sign-in"' in world.client.get(f"/approvals/{request_id}").text
    world.signed_in(sub="bob", role="treasury")
    world.now += 901
    assert 'id="sign-in"' in world.client.get(f"/approvals/{request_id}").text


def page_form(world: World, request_id: str) -> str:
    shown = world.client.get(f"/approvals/{request_id}")
    assert shown.status_code == 200, shown.text
    return shown.text.split('name="csrf" value="')[1].split('"')[0]


def test_the_page_shows_the_whole_call_escaped_and_its_buttons(world: World) -> None:
    """SPEC §15 (issue 39.15, 40.4): every key and value, a long one folded but whole (it was cut
    at 4,000 characters, hiding what followed, and Approve was offered), hidden characters
    escaped, the server and the tool's description, who asked, who is signed in."""
    padding = "x" * (2 * FOLDED_CHARACTERS)
    request_id = world.request(arguments={
        "a_note": "<script>alert(1)</script>", "blob": padding + " z_scope: ALL-CUSTOMERS",
        "memo": "pay \u202eSU 0001\u202c to acme", "n\u200bame": 1, "padding": "p" * 5000,
        "z_scope": "ALL-CUSTOMERS"})
    world.signed_in(sub="bob", role="treasury")
    shown = world.client.get(f"/approvals/{request_id}")
    assert shown.status_code == 200
    text = shown.text
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert padding + " z_scope: ALL-CUSTOMERS" in text  # whole, folded
    assert "p" * 5000 in text and "(cut:" not in text
    assert '<th>&quot;z_scope&quot;</th><td><pre>&quot;ALL-CUSTOMERS&quot;</pre></td>' in text
    assert "\u202e" not in text and "\u202c" not in text and "\u200b" not in text  # never raw
    assert '<span class="esc">\\u202e</span>SU 0001<span class="esc">\\u202c</span>' in text
    assert '&quot;n<span class="esc">\\u200b</span>ame&quot;' in text
    assert text.count("<details") == 2  # the two long values, folded
    for shown_part in ('<dd id="server">bank</dd>', "Sends a wire transfer.",
                       '<dd id="caller">alice (https://idp.example)</dd>',
                       '<dd id="signed-in">bob (https://idp.example)</dd>',
                       "1970-01-01 00:26:40 UTC"):  # expiry: created at 1000 s, 600 s to decide
        assert shown_part in text
    assert 'value="approve"' in text and 'value="refuse"' in text
    assert shown.headers["content-security-policy"].startswith("default-src 'none'; style-src 'sha256-")
    assert "frame-ancestors 'none'" in shown.headers["content-security-policy"]
    assert shown.headers["referrer-policy"] == "same-origin"  # (no-referrer: a form posts Origin null)


def test_a_page_that_cannot_show_the_whole_call_offers_no_approve(world: World) -> None:
    """A tool no server lists now (its server and description unknown): Refuse only, and an
    Approve posted anyway is refused; a script, which reads the whole call, still decides."""
    request_id = world.request(tool="gone_tool")
    world.signed_in(sub="bob", role="treasury")
    shown = world.client.get(f"/approvals/{request_id}")
    assert shown.status_code == 200 and 'value="approve"' not in shown.text
    assert 'value="refuse"' in shown.text and "cannot show the whole call" in shown.text
    token = shown.text.split('name="csrf" value="')[1].split('"')[0]
    posted = world.client.post(f"/approvals/{request_id}", data={"csrf": token, "decision": "approve"})
    assert posted.status_code == 409 and "cannot be approved here" in posted.text
    assert world.state(request_id) is State.REQUESTED
    assert world.post(request_id, "bob").status_code == 200


def test_the_form_needs_its_csrf_token_and_origin(world: World) -> None:
    request_id = world.request()
    other = world.request(arguments={"amount": 9})
    world.signed_in(sub="bob", role="treasury")
    token = page_form(world, request_id)
    url = f"/approvals/{request_id}"
    for form, headers in [({"csrf": "forged", "decision": "approve"}, {}),
                          ({"csrf": page_form(world, other), "decision": "approve"}, {}),
                          ({"csrf": token, "decision": "approve"}, {"Origin": "https://evil.example"}),
                          ({"decision": "approve"}, {})]:
        refused = world.client.post(url, data=form, headers=headers)
        assert refused.status_code == 403 and "not sent from its page" in refused.text
    assert world.state(request_id) is State.REQUESTED
    taken = world.client.post(url, data={"csrf": token, "decision": "approve"},
                              headers={"Origin": BASE})
    assert taken.status_code == 200 and "is approved" in taken.text
    assert world.state(request_id) is State.APPROVED and world.events == [("wire", State.APPROVED)]
    world.client.cookies.clear()
    assert world.client.post(url, data={"csrf": token, "decision": "refuse"}).status_code == 403


def test_a_signed_in_caller_sees_their_own_request_and_cannot_approve_it(world: World) -> None:
    request_id = world.request()
    cookie = world.signed_in(sub="alice", role="treasury")
    answer = world.client.get(f"/approvals/{request_id}")
    assert answer.status_code == 200 and "This is your own request" in answer.text
    assert 'value="approve"' not in answer.text and 'value="refuse"' not in answer.text
    assert world.pages.sessions is not None
    token = world.pages.sessions.csrf(cookie, request_id)
    posted = world.client.post(f"/approvals/{request_id}", data={"csrf": token, "decision": "approve"})
    assert posted.status_code == 403 and "nobody approves their own call" in posted.text
    listing = world.client.get("/approvals")
    assert listing.status_code == 200 and "No request is waiting for you." in listing.text
    mine = listing.text.split('<ul id="mine">')[1]
    assert f'href="/approvals/{request_id}"' in mine  # beside: her own, waiting
    scripted = world.client.get("/approvals", headers={"Authorization": "Bearer alice"}).json()
    assert scripted["requests"] == [] and [r["id"] for r in scripted["mine"]] == [request_id]


def test_the_listing_shows_every_request_each_with_its_arguments_in_short(world: World) -> None:
    """Every request an approver may decide (it stopped at 100), each one's arguments in short
    with a fingerprint: two requests that differ only in their arguments look different."""
    people = [f"p{i}" for i in range(12)]
    for name in people:
        PEOPLE[name] = person(name)
    try:
        ids = [world.request(caller=name, arguments={"amount": 5, "to": "x" * 200 + str(i)})
               for name in people for i in range(15)]
    finally:
        for name in people:
            del PEOPLE[name]
    world.signed_in(sub="bob", role="treasury")
    listing = world.client.get("/approvals").text
    items = listing.split('<ul id="requests">')[1].split("</ul>")[0].split("<li>")[1:]
    assert len(items) == len(ids) == 180 and all(f'href="/approvals/{i}"' in listing for i in ids)
    assert '<code class="args">{&quot;amount&quot;:5,&quot;to&quot;:&quot;xxx' in items[0]
    fingerprints = {item.split("</code> #")[1][:8] for item in items}
    assert len(fingerprints) == 15  # each caller's 15 calls differ only past the short form
    scripted = world.client.get("/approvals", headers={"Authorization": "Bearer bob"}).json()
    assert len(scripted["requests"]) == 180


def test_the_listing_page_links_each_request(world: World) -> None:
    request_id = world.request()
    world.signed_in(sub="bob", role="treasury")
    listing = world.client.get("/approvals")
    assert f'href="/approvals/{request_id}"' in listing.text
    assert '<p id="signed-in">Signed in as bob (https://idp.example)</p>' in listing.text


def test_without_sign_in_the_page_says_so_and_scripts_still_work() -> None:
    world = World(sign_in=False)
    request_id = world.request()
    page = world.client.get(f"/approvals/{request_id}")
    assert page.status_code == 403 and "Sign-in is not configured on this gateway" in page.text
    assert world.client.get("/approvals/callback?code=c&state=s").status_code == 404
    assert world.post(request_id, "bob").status_code == 200


def test_an_unexpected_failure_is_one_line_naming_its_type(world: World,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    class Broken(MemoryApprovalStore):
        async def get(self, request_id: str) -> Any:
            raise RuntimeError(f"lost {request_id}")

    world.guard = Guard(SOURCE, {"send_wire": ["approval:wire"]},
                        live=LiveSources(approvals=Broken()), entry_points=False)
    world.pages.current = approving_of(world.guard)
    with caplog.at_level(logging.ERROR, "mcp_preconditions.approvals"):
        answer = world.post("some-request", "bob")
    assert (answer.status_code, answer.json()["error"]) == (500, "server_error")
    assert [r.getMessage() for r in caplog.records] == [
        "approval page /approvals/ID failed: RuntimeError"]


def test_a_reload_is_followed(world: World) -> None:
    request_id = world.request()
    assert world.client.get(f"/approvals/{request_id}",
                            headers={"Authorization": "Bearer carol"}).status_code == 403
    clerks = POLICY.replace(b'approvers = ["auth:claim:role:treasury"]',
                            b'approvers = ["auth:claim:role:clerk"]')
    world.guard.reload(parse_policy(clerks, "p.toml"))  # the same store: memory requests are kept
    assert world.client.get(f"/approvals/{request_id}",
                            headers={"Authorization": "Bearer carol"}).status_code == 200
    assert world.post(request_id, "bob").status_code == 403  # no longer an approver
    gone = POLICY.replace(b"[approvals.wire]", b"[approvals.other]")
    world.guard.reload(parse_policy(gone, "p.toml"))
    assert world.post(request_id, "carol").status_code == 404  # its approval is no longer defined
    assert world.state(request_id) is State.REQUESTED


def test_an_id_token_with_too_many_claims_is_refused_at_sign_in(world: World) -> None:
    world.pages.sign_in.claims = {  # type: ignore[union-attr]
        "iss": ISSUER, "sub": "bob", "groups": ["g" * 40] * 100}
    back = world.client.get("/approvals/callback?code=c&state=s")
    assert back.status_code == 400
    assert "The sign-in&#x27;s ID token has too many claims to keep." in back.text
    assert APPROVER_COOKIE not in back.cookies
