"""Token exchange (RFC 8693) for `credential:KEY` against a scripted authorization server: the
request (subject token, audience, resource, scope, client authentication), the answer validated
(garbage is `error`), refusals `unsatisfied`, the 10 s timeout, the cache per (subject token,
server) within both expiries less 30 s, single flight, the bound, and renewal after a 401.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import pytest

from mcp_preconditions.credentials import Client, ExchangeCache, TokenExchangeSettings
from mcp_preconditions.credentials.credential import Credential
from mcp_preconditions.credentials.exchange import TokenExchange
from mcp_preconditions.credentials.resolver import NOT_OBTAINED, CredentialResolver
from mcp_preconditions.outcomes import Status
from mcp_preconditions.principal import ANONYMOUS_IDENTITY, Identity, Principal
from tests.unit.credentials_doubles import TOKEN_ENDPOINT, AuthServer, Clock, basic, caller, exchanged

SUBJECT = "caller-token-abc"
REQ = "credential:crm"
SECRET = "gw-secret-value"


def settings(**overrides: Any) -> TokenExchangeSettings:
    values: dict[str, Any] = {"token_endpoint": TOKEN_ENDPOINT, "client": Client("gw", SECRET),
                              "audience": "https://crm.test", "scope": ("crm.read",)}
    values.update(overrides)
    return TokenExchangeSettings(**values)


def resolver(server: AuthServer, clock: Clock, cache: ExchangeCache | None = None,
             **overrides: Any) -> CredentialResolver:
    cache = cache if cache is not None else ExchangeCache(clock=clock)
    source = TokenExchange("crm", settings(**overrides), cache,
                           clock=clock, transport=server.transport())
    return CredentialResolver({"crm": source})


async def test_the_request_is_rfc_8693_with_client_secret_basic() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged())), Clock()
    obtained = await resolver(server, clock, resource="https://crm.test/mcp").obtain(
        REQ, caller(), SUBJECT)
    assert obtained.outcome.status is Status.SATISFIED
    assert server.forms == [{
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": SUBJECT,
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "audience": "https://crm.test", "resource": "https://crm.test/mcp", "scope": "crm.read"}]
    assert basic(server.requests[0]) == ("gw", SECRET)
    assert str(server.requests[0].url) == TOKEN_ENDPOINT
    assert obtained.credential is not None
    assert obtained.credential.headers() == {"Authorization": "Bearer upstream-token"}
    assert (obtained.kind, obtained.cached, obtained.result) == ("token-exchange", False, "obtained")
    assert obtained.record() == {"kind": "token-exchange", "cached": False}


async def test_client_secret_post_sends_the_client_in_the_form() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged())), Clock()
    await resolver(server, clock, client=Client("gw", SECRET, "client_secret_post")).obtain(
        REQ, caller(), SUBJECT)
    assert "authorization" not in server.requests[0].headers
    assert server.forms[0]["client_id"] == "gw" and server.forms[0]["client_secret"] == SECRET


def test_a_client_id_with_reserved_characters_is_form_encoded_before_base64() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged())), Clock()
    asyncio.run(resolver(server, clock, client=Client("gw:1 x", "s%e:c")).obtain(REQ, caller(), SUBJECT))
    assert server.requests[0].headers["authorization"] == "Basic Z3clM0ExJTIweDpzJTI1ZSUzQWM="


@pytest.mark.parametrize(("identity", "token", "reason"), [
    (ANONYMOUS_IDENTITY, None, "the caller is not verified (no valid access token)"),
    (ANONYMOUS_IDENTITY, SUBJECT, "the caller is not verified (no valid access token)"),
    (caller(), None, "the caller presented no access token to exchange"),
])
async def test_no_caller_or_no_token_is_unsatisfied_and_asks_nobody(
        identity: Identity, token: str | None, reason: str) -> None:
    server, clock = AuthServer(lambda form: (200, exchanged())), Clock()
    obtained = await resolver(server, clock).obtain(REQ, identity, token)
    assert (obtained.outcome.status, obtained.outcome.reason, obtained.result) == (
        Status.UNSATISFIED, reason, "refused")
    assert obtained.credential is None and server.requests == []


@pytest.mark.parametrize(("status", "body", "expected", "reason"), [
    *((400, {"error": code}, Status.UNSATISFIED, f"the authorization server refused: {code}")
      for code in ("invalid_grant", "invalid_target", "invalid_scope", "access_denied")),
    (401, {"error": "invalid_client"}, Status.ERROR,
     f"token endpoint {TOKEN_ENDPOINT} answered HTTP 401 (invalid_client)"),
    (400, {"error": "unauthorized_client"}, Status.ERROR,
     f"token endpoint {TOKEN_ENDPOINT} answered HTTP 400 (unauthorized_client)"),
    (400, {"error": "bad\nline"}, Status.ERROR, f"token endpoint {TOKEN_ENDPOINT} answered HTTP 400"),
    (503, b"<html>down</html>", Status.ERROR, f"token endpoint {TOKEN_ENDPOINT} answered HTTP 503"),
    (200, b"not json", Status.ERROR, f"token endpoint {TOKEN_ENDPOINT} answered 200 without a JSON object"),
    (200, ["a list"], Status.ERROR, f"token endpoint {TOKEN_ENDPOINT} answered 200 without a JSON object"),
])
async def test_what_the_authorization_server_answers(status: int, body: Any, expected: Status,
                                                     reason: str) -> None:
    server, clock = AuthServer(lambda form: (status, body)), Clock()
    obtained = await resolver(server, clock).obtain(REQ, caller(), SUBJECT)
    assert (obtained.outcome.status, obtained.outcome.reason) == (expected, reason)
    assert obtained.outcome.transient and obtained.credential is None


GARBAGE = [
    ({"access_token": None}, "an access_token"),
    ({"access_token": ""}, "an access_token"),
    ({"access_token": "two words"}, "a usable access_token (printable, at most 16 KiB)"),
    ({"access_token": "x" * 16385}, "a usable access_token (printable, at most 16 KiB)"),
    ({"access_token": "tok\r\nX-Injected: 1"}, "a usable access_token (printable, at most 16 KiB)"),
    ({"issued_token_type": None}, "an issued_token_type of an access token or a JWT"),
    ({"issued_token_type": "urn:ietf:params:oauth:token-type:refresh_token"},
     "an issued_token_type of an access token or a JWT"),
    ({"token_type": "N_A"}, "token_type Bearer"),
    ({"token_type": "DPoP"}, "token_type Bearer"),
    ({"token_type": None}, "token_type Bearer"),
    ({"expires_in": None}, "a positive whole expires_in"),
    ({"expires_in": "600"}, "a positive whole expires_in"),
    ({"expires_in": 0}, "a positive whole expires_in"),
    ({"expires_in": 60.5}, "a positive whole expires_in"),
    ({"expires_in": True}, "a positive whole expires_in"),
]


@pytest.mark.parametrize(("change", "missing"), GARBAGE, ids=[m + str(c) for c, m in GARBAGE])
async def test_a_garbage_answer_is_an_error_never_a_credential(change: dict[str, Any], missing: str
                                                                ) -> None:
    answer = {k: v for k, v in {**exchanged(), **change}.items() if v is not None}
    server, clock = AuthServer(lambda form: (200, answer)), Clock()
    obtained = await resolver(server, clock).obtain(REQ, caller(), SUBJECT)
    assert (obtained.outcome.status, obtained.outcome.reason) == (
        Status.ERROR, f"token endpoint {TOKEN_ENDPOINT} answered without {missing}")
    assert obtained.credential is None


async def test_token_type_is_compared_without_case() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged(token_type="bearer"))), Clock()
    assert (await resolver(server, clock).obtain(REQ, caller(), SUBJECT)).outcome.ok


async def test_a_slow_authorization_server_is_an_error_at_the_timeout() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged()), delay=5.0), Clock()
    obtained = await resolver(server, clock, timeout_seconds=0.05).obtain(REQ, caller(), SUBJECT)
    assert (obtained.outcome.status, obtained.outcome.reason) == (
        Status.ERROR, f"{TOKEN_ENDPOINT} did not answer within 0.05 s")


async def test_an_unreachable_authorization_server_is_an_error() -> None:
    source = TokenExchange("crm", settings(token_endpoint="http://127.0.0.1:9/token"), ExchangeCache())
    obtained = await CredentialResolver({"crm": source}).obtain(REQ, caller(), SUBJECT)
    assert obtained.outcome.status is Status.ERROR
    assert obtained.outcome.reason.startswith("cannot reach http://127.0.0.1:9/token: connection failed")


# -- the cache ----------------------------------------------------------------------------------------
async def test_one_exchange_serves_a_caller_until_the_earlier_expiry_less_30_s() -> None:
    server = AuthServer(lambda form: (200, exchanged(f"t{len(server.requests)}", expires_in=600)))
    clock = Clock()
    resolve = resolver(server, clock)
    identity = caller(expires_at=clock.now + 300)  # the caller's token expires first
    first = await resolve.obtain(REQ, identity, SUBJECT)
    clock.now += 269
    again = await resolve.obtain(REQ, identity, SUBJECT)
    assert (again.cached, again.result, again.outcome.reason) == (
        True, "cached", "a token-exchange credential for server 'crm' (cached)")
    assert again.credential is first.credential and len(server.requests) == 1
    clock.now += 1  # 270 s: 30 s before the subject token's exp
    late = await resolve.obtain(REQ, identity, SUBJECT)
    assert (late.cached, len(server.requests)) == (False, 2)


async def test_the_cache_is_per_subject_token_and_per_server() -> None:
    server = AuthServer(lambda form: (200, exchanged(form["subject_token"] + "-" + form["audience"])))
    clock, cache = Clock(), ExchangeCache(clock=Clock())
    crm = TokenExchange("crm", settings(), cache, clock=clock, transport=server.transport())
    wiki = TokenExchange("wiki", settings(audience="https://wiki.test"), cache, clock=clock,
                         transport=server.transport())
    resolve = CredentialResolver({"crm": crm, "wiki": wiki})
    seen = {(await resolve.obtain(f"credential:{s}", caller(who), who)).credential.headers()[  # type: ignore[union-attr]
        "Authorization"] for s in ("crm", "wiki") for who in ("alice", "bob")}
    assert seen == {"Bearer alice-https://crm.test", "Bearer bob-https://crm.test",
                    "Bearer alice-https://wiki.test", "Bearer bob-https://wiki.test"}
    assert len(cache) == 4


async def test_a_token_that_expires_within_the_margin_is_used_once_not_kept() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged(expires_in=20))), Clock()
    resolve = resolver(server, clock)
    assert (await resolve.obtain(REQ, caller(), SUBJECT)).outcome.ok
    assert (await resolve.obtain(REQ, caller(), SUBJECT)).cached is False
    assert len(server.requests) == 2


async def test_failures_are_not_kept() -> None:
    answers = iter([(503, {}), (200, exchanged())])
    server, clock = AuthServer(lambda form: next(answers)), Clock()
    resolve = resolver(server, clock)
    assert (await resolve.obtain(REQ, caller(), SUBJECT)).result == "error"
    assert (await resolve.obtain(REQ, caller(), SUBJECT)).result == "obtained"


async def test_concurrent_calls_of_one_caller_share_one_exchange() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged()), delay=0.05), Clock()
    resolve = resolver(server, clock)
    results = await asyncio.gather(*(resolve.obtain(REQ, caller(), SUBJECT) for _ in range(50)))
    assert len(server.requests) == 1
    assert [r.result for r in results].count("obtained") == 1  # the others joined: no request of theirs
    assert all(r.outcome.ok and r.credential is results[0].credential for r in results)


async def test_concurrent_failures_are_shared_too_and_not_kept() -> None:
    server, clock = AuthServer(lambda form: (400, {"error": "invalid_grant"}), delay=0.05), Clock()
    resolve = resolver(server, clock)
    results = await asyncio.gather(*(resolve.obtain(REQ, caller(), SUBJECT) for _ in range(10)))
    assert len(server.requests) == 1 and {r.result for r in results} == {"refused"}
    await resolve.obtain(REQ, caller(), SUBJECT)
    assert len(server.requests) == 2


async def test_a_caller_that_gives_up_does_not_cancel_the_exchange_for_the_others() -> None:
    server = AuthServer(lambda form: (200, exchanged()), hold=asyncio.Event())
    resolve = resolver(server, Clock())
    impatient = asyncio.ensure_future(resolve.obtain(REQ, caller(), SUBJECT))
    await asyncio.wait_for(server.arrived.wait(), 10)  # its exchange is at the server, held
    patient = asyncio.ensure_future(resolve.obtain(REQ, caller(), SUBJECT))
    await anyio.wait_all_tasks_blocked()  # the patient caller waits for that exchange too
    impatient.cancel()
    await anyio.wait_all_tasks_blocked()
    assert server.hold is not None
    server.hold.set()
    assert (await asyncio.wait_for(patient, 10)).outcome.ok and len(server.requests) == 1


async def test_the_cache_holds_at_most_its_bound() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged(form["subject_token"]))), Clock()
    cache = ExchangeCache(3, clock=clock)
    resolve = resolver(server, clock, cache)
    for n in range(5):
        await resolve.obtain(REQ, caller(f"c{n}"), f"token-{n}")
    assert len(cache) == 3 and ExchangeCache().max_entries == 10_000
    assert (await resolve.obtain(REQ, caller("c4"), "token-4")).cached  # the latest stay
    assert not (await resolve.obtain(REQ, caller("c0"), "token-0")).cached  # the oldest went


async def test_renew_drops_the_refused_credential_and_exchanges_once_more() -> None:
    server = AuthServer(lambda form: (200, exchanged(f"t{len(server.requests)}")))
    clock = Clock()
    resolve = resolver(server, clock)
    stale = (await resolve.obtain(REQ, caller(), SUBJECT)).credential
    assert stale is not None
    renewed = await resolve.renew(REQ, caller(), SUBJECT, stale)
    assert renewed.result == "obtained" and renewed.credential is not None
    assert renewed.credential.headers() == {"Authorization": "Bearer t2"}
    again = await resolve.renew(REQ, caller(), SUBJECT, stale)  # a newer one is kept, not dropped
    assert again.cached and again.credential is renewed.credential and len(server.requests) == 2


async def test_renew_that_is_refused_is_unsatisfied() -> None:
    answers = iter([(200, exchanged()), (400, {"error": "invalid_grant"})])
    server, clock = AuthServer(lambda form: next(answers)), Clock()
    resolve = resolver(server, clock)
    stale = (await resolve.obtain(REQ, caller(), SUBJECT)).credential
    assert stale is not None
    assert (await resolve.renew(REQ, caller(), SUBJECT, stale)).result == "refused"


# -- the resolver protocol ----------------------------------------------------------------------------
def test_the_plain_protocol_never_allows_and_validates_server_keys() -> None:
    resolve = resolver(AuthServer(), Clock())
    outcome = resolve.resolve(REQ, object())
    assert (outcome.status, outcome.reason, outcome.transient) == (Status.UNSATISFIED, NOT_OBTAINED, True)
    assert resolve.validate(REQ) is None
    assert resolve.validate("credential:wiki") == ("no server 'wiki' has credentials (servers with "
                                                   "credentials: 'crm')")
    assert resolve.kind_of(REQ) == "token-exchange"


async def test_a_bug_in_a_source_is_an_error_naming_only_its_type(caplog: pytest.LogCaptureFixture
                                                                  ) -> None:
    class Broken:
        kind, server = "token-exchange", "crm"

        async def obtain(self, principal: Principal | None, token: str | None) -> tuple[Credential, bool]:
            raise KeyError(token)

        async def renew(self, principal: Principal | None, token: str | None, stale: Credential,
                        challenge: str | None = None) -> tuple[Credential, bool]:
            raise KeyError(token)

        def cached(self, identity: Identity, token: str | None) -> Credential | None:
            raise KeyError(token)

    obtained = await CredentialResolver({"crm": Broken()}).obtain(REQ, caller(), SUBJECT)
    assert (obtained.outcome.status, obtained.outcome.reason) == (
        Status.ERROR, "credential source failed (KeyError)")
    assert SUBJECT not in caplog.text


async def test_no_secret_in_reasons_logs_or_reprs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    answers = iter([(200, exchanged("the-upstream-secret-token")), (400, {"error": "invalid_grant"}),
                    (503, {})])
    server, clock = AuthServer(lambda form: next(answers)), Clock()
    resolve = resolver(server, clock)
    shown = []
    for token in (SUBJECT, SUBJECT + "2", SUBJECT + "3"):
        obtained = await resolve.obtain(REQ, caller(), token)
        shown += [obtained.outcome.reason, repr(obtained), repr(obtained.credential),
                  str(obtained.outcome.to_dict()), str(obtained.record())]
    shown.append(repr(resolve.sources["crm"].settings))  # type: ignore[attr-defined]
    for secret in (SUBJECT, "the-upstream-secret-token", SECRET):
        assert secret not in " ".join(shown) and secret not in caplog.text


def test_a_credential_cannot_be_copied_or_pickled() -> None:
    import copy
    import pickle

    credential = Credential.bearer("secret", "oauth")
    for attempt in (lambda: pickle.dumps(credential), lambda: copy.deepcopy(credential)):
        with pytest.raises(TypeError):
            attempt()


async def test_a_guard_without_the_credential_step_denies_and_lists_the_tool(
        ) -> None:
    """Registered as a plain resolver (no phase-2 wiring), `credential:KEY` fails closed: every
    call is denied without asking anyone, and list filtering still counts the tool as callable."""
    from mcp_preconditions.guard import Guard
    from mcp_preconditions.policy.load import parse_policy
    from mcp_preconditions.principal import Credentials

    server = AuthServer(lambda form: (200, exchanged()))
    guard = Guard(parse_policy(b"[guard]\nlist_filtering = true\n", "p.toml"),
                  {"read": [REQ]}, resolvers=[resolver(server, Clock())], entry_points=False)
    decision = await guard.check("read", Credentials(principal=caller().principal))
    assert not decision.allowed and decision.unmet == (REQ,)
    assert decision.outcomes[0].reason == NOT_OBTAINED and server.requests == []
    assert await guard.callable_tools(Credentials(principal=caller().principal)) == ["read"]
    assert guard.snapshot.registry.check_form("credential:nope") == (
        "no server 'nope' has credentials (servers with credentials: 'crm') (accepted forms: "
        "credential:KEY, where the gateway's config has [servers.KEY.credentials])")
