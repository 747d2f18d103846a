"""The policy sections that name who else decides a call (SPEC §5, §16): `[quotas.NAME]` (a rate
per caller), `[approvals.NAME]` (a person approves), `[pdp.NAME]` (an AuthZEN decision point), and
`[pdp_server]` (this policy answering as such a decision point).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from ..requirements import namespace_of
from .section import EnvReference, NonEmpty, Section, toml_type


class Quota(Section):
    """`[quotas.NAME]`: `calls` per `per_seconds` for each caller (`by`), the bucket of `quota:NAME`
    (docs/quotas.md). Strict: `calls = 3.0`, `calls = true` or `per_seconds = "60"` are errors."""

    calls: Annotated[int, Field(strict=True, gt=0, le=1_000_000_000)]
    per_seconds: Annotated[float, Field(strict=True, gt=0, le=315_576_000, allow_inf_nan=False,
                                        description="the period in which `calls` units refill")]
    by: Literal["subject", "client", "global"] = Field(
        default="subject", description="whose bucket a call draws on (docs/quotas.md)")
    store: Literal["memory", "redis"] = Field(
        default="memory", description='"redis": one bucket shared by every replica ([state.redis])')

    @model_validator(mode="after")
    def _at_most_a_million_per_second(self) -> Quota:
        if self.calls > self.per_seconds * 1_000_000:
            raise ValueError("at most 1,000,000 calls per second (calls / per_seconds)")
        return self


def _approvers(value: object) -> object:
    """`approvers`: "self", or a non-empty list of requirement strings an approver must meet. Each
    string has a namespace; none is an `approval:` (an approver needing an approval is a cycle) or
    a `quota:` (a quota only counts calls: it says nothing of who approves). The forms are checked
    at compile time, like every requirement list (approvals/approvers.py)."""
    if value == "self":
        return value
    if not isinstance(value, list):
        raise ValueError(f'must be "self" or a list of requirements an approver must meet, got '
                         f"{toml_type(value)} {value!r}")
    if not value:
        raise ValueError('must name at least one requirement an approver must meet (or be "self")')
    for i, req in enumerate(value):
        if not isinstance(req, str):
            raise ValueError(f"[{i}] must be a requirement string, got {toml_type(req)} {req!r}")
        ns = namespace_of(req)
        if ns is None:
            raise ValueError(f"requirement {req!r} has no namespace")
        if ns == "approval":
            raise ValueError(f"an approver may not need an approval ({req!r}): no cycles")
        if ns == "quota":
            raise ValueError(f"a quota is not an approver requirement ({req!r}): it counts calls, "
                             "it says nothing of who approves")
    return value


class Approval(Section):
    """`[approvals.NAME]`, the approval of `approval:NAME` (docs/approvals.md): the caller confirms
    (`approvers = "self"`), or someone who meets every requirement of the list approves. Strict:
    `expires_seconds = "600"` or `true` is an error, and so is a typo'd key."""

    approvers: Annotated[Literal["self"] | Annotated[list[NonEmpty], Field(min_length=1)],
                         BeforeValidator(_approvers)] = Field(
        description='"self" (the caller confirms in flight) or the requirements an approver must '
                    "meet, e.g. [\"auth:claim:role:release_manager\"]")
    expires_seconds: Annotated[float, Field(strict=True, ge=1, le=31_557_600, allow_inf_nan=False)] = Field(
        default=600.0, description="an approval is good this long from the moment it is given, for "
                                   "one call; a request not decided this long expires")
    timeout_seconds: Annotated[float, Field(strict=True, gt=0, le=3600, allow_inf_nan=False)] = Field(
        default=120.0, description='approvers = "self": how long the caller has to answer')
    store: Literal["memory", "redis"] = Field(
        default="memory", description='"redis": requests shared by every replica ([state.redis])')

    @model_validator(mode="after")
    def _timeout_for_self_only(self) -> Approval:
        if "timeout_seconds" in self.model_fields_set and self.approvers != "self":
            raise ValueError('timeout_seconds applies to approvers = "self" only (an approver list '
                             "has expires_seconds)")
        return self


def _claim_value(value: object, where: str = "") -> object:
    """A claim of `[pdp_server.subjects]`: what a verified token could carry (a string, an integer,
    a boolean, or an array or table of them). A float, a date or a time is refused: none ever
    equals a claim or an argument exactly."""
    if isinstance(value, str | int):  # bool is an int
        return value
    if isinstance(value, list):
        for i, item in enumerate(value):
            _claim_value(item, f"{where}[{i}]")
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            _claim_value(item, f"{where}.{key}")
        return value
    at = f" (at {where.lstrip('.')})" if where else ""
    raise ValueError(f"must be a string, an integer, a boolean, or an array or table of them, got "
                     f"{toml_type(value)} {value}{at}")


def _subject_claims(value: object) -> object:
    """One `[pdp_server.subjects]` entry: a table of claims, without `sub` (the subject's id is its
    `sub`, never a value the table could change)."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a table of claims, got {toml_type(value)} {value!r}")
    if "sub" in value:
        raise ValueError("may not set 'sub': the subject's id is its 'sub'")
    return value


ClaimValue = Annotated[object, BeforeValidator(_claim_value)]


def _pdp_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError("must be an http(s) URL with no query or fragment (the decision point's "
                         "identifier, AuthZEN 1.0 metadata)")
    return value.rstrip("/")


class PdpServer(Section):
    """`[pdp_server]`: how this policy answers as an AuthZEN Access Evaluation API 1.0 decision
    point (SPEC §16, docs/authzen.md; `mcp-preconditions pdp`). A request is read as a call:
    `actions` maps an action name to a tool, `subjects` is the claims of each subject id the
    requests name."""

    url: Annotated[str, AfterValidator(_pdp_url)] | None = Field(
        default=None, description="the identifier the metadata announces (`policy_decision_point`); "
                                  "default: the listener's own http://HOST:PORT")
    actions: dict[NonEmpty, NonEmpty] = Field(
        default_factory=dict, description="action.name -> the tool it asks about (default: the "
                                          "action's own name)")
    subjects: dict[NonEmpty, Annotated[dict[NonEmpty, ClaimValue], BeforeValidator(_subject_claims)]] = Field(
        default_factory=dict, description="subject.id -> its claims (roles, email, ...): a static "
                                          "directory, merged over the request's subject.properties")


def _enforcement_url(value: str) -> str:
    """`[pdp.NAME] url`: https, or http to a loopback address only (a PDP's answer decides calls:
    it is never read in clear text off a network). No query or fragment: the API's paths follow."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError("must be an https URL (or http on a loopback address) with no query or "
                         "fragment: the decision point's base, before /access/v1/evaluation")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ValueError(f"http is allowed on a loopback address only (127.0.0.1, ::1, localhost), "
                         f"got host {parts.hostname!r}: use https")
    return value.rstrip("/")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Pdp(Section):
    """`[pdp.NAME]`: the AuthZEN decision point that decides the requirement `pdp:NAME` (SPEC §16,
    docs/authzen.md). Strict: a typo'd key, a missing or non-HTTP(S) `url` is an error."""

    url: Annotated[str, AfterValidator(_enforcement_url)] = Field(
        description="the decision point's base URL: POST {url}/access/v1/evaluation(s)")
    token: EnvReference | None = Field(
        default=None, description='"env:VAR": a bearer token the gateway presents to the PDP')
    timeout_seconds: Annotated[float, Field(strict=True, gt=0, le=60, allow_inf_nan=False)] = Field(
        default=1.0, description="no answer within this is `error`, which denies")
    cache_seconds: Annotated[float, Field(strict=True, ge=0, le=86_400, allow_inf_nan=False)] = Field(
        default=30.0, description="how long a decision (true or false, never an error) is reused; "
                                  "0: no cache")
    subject_claims: list[NonEmpty] = Field(
        default_factory=list, description="the caller's claims sent as subject properties")
