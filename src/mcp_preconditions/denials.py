"""How a refused call looks on the wire, hosted and gateway alike (SPEC §3, §10, §15): the `isError`
result (its payload under `_meta` for a tool with an `outputSchema`), or the data of the JSON-RPC
error in `[guard] denial = "jsonrpc"` mode, each with its SEP-2643 envelope and the step-up hint;
over HTTP, a call that more scopes alone would allow is the 403 `insufficient_scope` challenge
instead. Plain dicts, no MCP SDK: the gateway relays them, and the SDK adapters wrap them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NamedTuple

from .client import (
    ARGUMENT_DEPENDENT_META_KEY,
    DENIAL_ERRORS_META_KEY,
    DENIAL_META_KEY,
    TRANSIENT_META_KEY,
)
from .envelope import (
    AUTHORIZATION_META_KEY,
    MAX_HINTS,
    AuthorizationDenial,
    Remediation,
    RemediationHint,
    envelope_json,
    most_open,
)
from .outcomes import Decision, Refused, Status
from .principal import Identity
from .remedies import NOBODY, QUOTA_PREFIX, SCOPE_PREFIX, Recipient, remedy_of, what_to_do

# JSON-RPC error code of a denied call in `[guard] denial = "jsonrpc"` mode (implementation-defined
# server error range; clear of the codes the MCP specification assigns).
DENIAL_CODE = -32003
STEP_UP_META_KEY = "io.github.mcp-preconditions/step-up"
# The RFC 9396 `authorization_details` type of the scopes an `auth:scope:` denial asks for.
SCOPE_DETAILS_TYPE = "urn:mcp-preconditions:scope"
# RFC 6749 §3.3 scope-token characters: anything else cannot be put in a WWW-Authenticate challenge.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]+")
_SCOPE_AT = len(SCOPE_PREFIX)
OAUTH2 = "auth:oauth2"
_SATISFIED, _UNSATISFIED = Status.SATISFIED, Status.UNSATISFIED
_AVAILABLE, _UNDISCLOSED = Remediation.AVAILABLE, Remediation.UNDISCLOSED


def missing_scopes(decision: Decision) -> tuple[str, ...]:
    """The scopes a step-up would add: disclosed `auth:scope:` requirements that were unsatisfied
    (not `error`: a backend failure is not fixed by asking for more scopes)."""
    confidential = decision.confidential
    return tuple(dict.fromkeys([
        o.requirement[_SCOPE_AT:] for o in decision.outcomes if o.status is _UNSATISFIED
        and o.requirement.startswith(SCOPE_PREFIX) and o.requirement not in confidential]))


def denial_text(decision: Decision, recipient: Recipient = NOBODY) -> str:
    """The denial's text: what SPEC §3 says (`Decision.denial_text`: the unmet requirements, the
    confidential ones counted), then one plain sentence saying what to do (`remedies.what_to_do`,
    shaped for `recipient`: the same words for a client that cannot open a URL), then every
    missing scope on one line so a client can ask for all at once. A policy unusable for the
    server says its own sentence alone. Hosted servers and the gateway write it here."""
    text = decision.denial_text()
    refusal = decision.refusal
    if refusal is None or refusal.kind is not Refused.UNUSABLE:
        todo = what_to_do(decision, recipient)
        if todo:
            text = f"{text} {todo[0].upper()}{todo[1:]}."
    scopes = missing_scopes(decision)
    return f"{text} Missing scopes: {' '.join(scopes)}." if scopes else text


def disclosed_errors(decision: Decision) -> tuple[str, ...]:
    """The unmet requirements that ended as `error` (backend down, timeout), confidential ones
    left out: a client must not learn these as unsatisfiable (SPEC §6)."""
    return tuple(r for r in decision.errors if r not in decision.confidential)


def envelope_of(decision: Decision, recipient: Recipient = NOBODY) -> AuthorizationDenial | None:
    """The SEP-2643 envelope of a denial (SPEC §15), or None for one that is not an authorization
    denial (no context ID: only quotas unmet, a policy unusable for the server). A confidential
    requirement unmet makes it `undisclosed`, whatever else; otherwise it takes the most open
    remedy of its unmet requirements (`remedies.remedy_of`), with hints only when `available`:
    the missing scopes as one RFC 9396 `authorization_details` entry, then the resolvers' hints."""
    found = _remediation(decision, recipient)
    if found is None or decision.context_id is None:
        return None
    return AuthorizationDenial(found[0], decision.context_id, found[1])


def _remediation(decision: Decision, recipient: Recipient
                 ) -> tuple[Remediation, tuple[RemediationHint, ...]] | None:
    """`envelope_of`'s remediation and hints (None: no envelope), for `denial_meta` to write the
    envelope's JSON straight from them."""
    if decision.context_id is None or decision.allowed:
        return None
    confidential = decision.confidential
    remedies = []
    for outcome in decision.outcomes:
        if outcome.status is _SATISFIED or outcome.requirement.startswith(QUOTA_PREFIX):
            continue
        if outcome.requirement in confidential:
            return _UNDISCLOSED, ()
        remedies.append(remedy_of(outcome, recipient))
    remediation = most_open([r.remediation for r in remedies])
    if remediation is not _AVAILABLE:
        return remediation, ()
    scopes = missing_scopes(decision)
    hints = [RemediationHint("authorization_remediation", authorization_details=(
        {"type": SCOPE_DETAILS_TYPE, "scopes": list(scopes)},))] if scopes else []
    hints += [h for r in remedies if r.remediation is _AVAILABLE for h in r.hints]
    return remediation, tuple(hints[:MAX_HINTS])


def denial_meta(decision: Decision, recipient: Recipient = NOBODY) -> dict[str, Any] | None:
    """The denial's `_meta`: its SEP-2643 envelope (`envelope_of`), the step-up hint, the
    requirements that ended as `error`, those whose outcome depended on the call's arguments and
    those that hold only for now (quotas), each only when there are some: a client learns none of
    them. Kept out of structuredContent, which stays exactly SPEC §3. Both forms of every denial
    carry it: the one place for a key all carry."""
    meta: dict[str, Any] = {}
    found = _remediation(decision, recipient)
    if found is not None and decision.context_id is not None:
        meta[AUTHORIZATION_META_KEY] = envelope_json(found[0], decision.context_id, found[1])
    scopes = missing_scopes(decision)
    if scopes:
        meta[STEP_UP_META_KEY] = {"error": "insufficient_scope", "scope": " ".join(scopes)}
    errors = disclosed_errors(decision)
    if errors:
        meta[DENIAL_ERRORS_META_KEY] = list(errors)
    dependent = [r for r in decision.disclosed_unmet if r in decision.argument_dependent]
    if dependent:
        meta[ARGUMENT_DEPENDENT_META_KEY] = dependent
    transient = decision.transient
    passing = [r for r in decision.disclosed_unmet if r in transient] if transient else []
    if passing:
        meta[TRANSIENT_META_KEY] = passing
    return meta or None


def denial_result(decision: Decision, *, typed: bool = False,
                  recipient: Recipient = NOBODY) -> dict[str, Any]:
    """The `isError` result of a refused call: its text, the denial payload as structuredContent,
    and `denial_meta` (its envelope shaped for `recipient`). For a tool that declares an
    `outputSchema` (`typed`) the payload goes under `_meta[DENIAL_META_KEY]` instead: strict
    clients (the MCP Inspector, most desktop apps) validate structuredContent against the schema
    even on an error, and would show a schema error instead of the denial. A policy unusable for
    the server's tools is the service's fault, not the caller's: its text alone (no envelope)."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": denial_text(decision, recipient)}],
                              "isError": True}
    refusal = decision.refusal
    if refusal is not None and refusal.kind is Refused.UNUSABLE:
        return result
    payload = decision.denial_payload()
    meta = denial_meta(decision, recipient)
    if typed:
        meta = {**(meta or {}), DENIAL_META_KEY: payload}
    else:
        result["structuredContent"] = payload
    if meta is not None:
        result["_meta"] = meta
    return result


def denial_error_data(decision: Decision, recipient: Recipient = NOBODY) -> dict[str, Any] | None:
    """The `data` of a denial's JSON-RPC error (`[guard] denial = "jsonrpc"`): the same payload,
    plus the result's `_meta` under `data["_meta"]` when there is one. None for a refusal that is
    never a JSON-RPC error: a policy unusable for the server is a tool error, like a server fault."""
    refusal = decision.refusal
    if refusal is not None and refusal.kind is Refused.UNUSABLE:
        return None
    data = decision.denial_payload()
    meta = denial_meta(decision, recipient)
    if meta:
        data["_meta"] = meta
    return data


# -- HTTP: the 403 step-up ---------------------------------------------------------------------------
class StepUp(NamedTuple):
    """The 403 answer of a call that more scopes alone would allow: its `WWW-Authenticate`
    challenge and its JSON body."""

    challenge: str
    body: bytes


def only_scopes_missing(decision: Decision) -> bool:
    """True when more scopes alone would turn this denial into an allow: every unmet requirement is
    a disclosed `auth:scope:` one that was unsatisfied (not `error`)."""
    unmet = [o for o in decision.outcomes if not o.ok]
    return bool(unmet) and all(
        o.status is Status.UNSATISFIED and o.requirement.startswith(SCOPE_PREFIX)
        and o.requirement not in decision.confidential for o in unmet)


def insufficient_scope_challenge(decision: Decision) -> str | None:
    """`WWW-Authenticate` value for a 403 step-up (MCP auth spec), or None unless missing scopes
    are the only reason for the denial."""
    scopes = missing_scopes(decision)
    if not only_scopes_missing(decision) or not all(_SCOPE_TOKEN.fullmatch(s) for s in scopes):
        return None
    return (f'Bearer error="insufficient_scope", scope="{" ".join(scopes)}", '
            f'error_description="tool \'{_quoted(decision.tool)}\' needs more scopes"')


def step_up(decision: Decision, identity: Identity) -> StepUp | None:
    """Over HTTP, a denied call that more scopes alone would allow, made with a verified token
    (`identity`, the caller's), is answered `403` with `WWW-Authenticate: Bearer
    error="insufficient_scope", scope="..."` (SEP-2643's case 5: the transport's challenge says it
    all, no envelope); None for any other call (no token, or one not accepted, is the auth
    layer's 401). The one rule for hosted apps (`InsufficientScopeChallenge`) and the gateway's
    HTTP listener."""
    if decision.allowed or identity.principal is None:
        return None
    challenge = insufficient_scope_challenge(decision)
    if challenge is None:
        return None
    return StepUp(challenge, json.dumps({
        "error": "insufficient_scope", "scope": " ".join(missing_scopes(decision)),
        "error_description": "the call needs more scopes"}).encode())


def needs_sign_in(decision: Decision, identity: Identity) -> bool:
    """Over HTTP, a denied call whose only unmet requirement is a disclosed `auth:oauth2`, made
    without an accepted token (none, or one refused: not a verifier that failed, which is `error`),
    is answered with the transport's 401 challenge, no envelope (SPEC §15): signing in is its whole
    remedy. The rule of `serve --transport http` (`SignInChallenge`); the gateway challenges every
    request without an accepted token before any decision."""
    if decision.allowed or identity.principal is not None or OAUTH2 in decision.confidential:
        return False
    unmet = [o for o in decision.outcomes if o.status is not _SATISFIED]
    return (len(unmet) == 1 and unmet[0].requirement == OAUTH2
            and unmet[0].status is _UNSATISFIED)


Send = Callable[[dict[str, Any]], Awaitable[None]]


async def send_step_up(send: Send, answer: StepUp,
                       headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Write the 403 step-up as an ASGI response (plus `headers`: a session's id)."""
    await send({"type": "http.response.start", "status": 403, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(answer.body)).encode()),
        (b"www-authenticate", answer.challenge.encode("latin-1")), *headers]})
    await send({"type": "http.response.body", "body": answer.body})


def _quoted(text: str) -> str:
    """Text safe inside a quoted-string of an HTTP header (no quotes, backslashes or controls)."""
    return "".join(c for c in text if c.isascii() and c.isprintable() and c not in '"\\')
