"""The policy file model (SPEC §5), validated with pydantic; an unknown key is always an error.

The core keys (environment, confidential, features.flags, state.values, capabilities.grants,
tools.*.requirements, auth) are fixed for portability; the rest extends them.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..arguments import parse_pointer
from ..requirements import namespace_of

NonEmpty = Annotated[str, Field(min_length=1)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
EnvVarName = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
FlagValue = bool | int | float | str

ASYMMETRIC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                                   "ES256", "ES384", "ES512", "ES256K", "EdDSA"})
HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})


class Section(BaseModel):
    """Every policy section: unknown keys are errors, values are immutable once loaded, and scalars
    are strict (SPEC §5): a key takes only its own TOML type (`true` or `"30"` is not 30 seconds;
    an integer is a fine float)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _pointer(value: str) -> str:
    parse_pointer(value)  # raises ValueError naming the problem
    return value


def _toml_type(value: object) -> str:
    return {float: "float", list: "array", dict: "table", bool: "boolean", int: "integer",
            str: "string"}.get(
        type(value), type(value).__name__)


def _scalar(value: object) -> object:
    """Argument values are JSON strings, integers or booleans: a float, null, array or table is
    refused (it would never equal an argument exactly, or invites numeric coercion)."""
    if isinstance(value, str | int):  # bool is an int
        return value
    raise ValueError(f"must be a string, an integer or a boolean, got {_toml_type(value)} {value!r}")


Pointer = Annotated[str, AfterValidator(_pointer)]
ArgumentValue = Annotated[str | int | bool, BeforeValidator(_scalar)]


class Grant(Section):
    """`[[capabilities.grants]]`: these capabilities apply when every `when` requirement holds,
    every `arguments` pointer resolves to one of its listed values, and every `argument_claims`
    pointer to the value of the caller's claim it names."""

    capabilities: list[NonEmpty] = Field(min_length=1)
    # An empty `when` gives the capabilities to every caller, anonymous ones too: allowed, but the
    # guard reports it as a lint warning at start-up.
    when: list[NonEmpty] = Field(default_factory=list)
    arguments: dict[Pointer, Annotated[list[ArgumentValue], Field(min_length=1)]] = Field(
        default_factory=dict,
        description="JSON Pointer into the call's arguments -> the values it may have (exact, typed)")
    argument_claims: dict[Pointer, NonEmpty] = Field(
        default_factory=dict,
        description="JSON Pointer into the call's arguments -> the caller's claim (a name, or an "
                    "alias of auth.claim_aliases) it must equal (exact, typed; a scalar claim)")

    @field_validator("capabilities")
    @classmethod
    def _plain_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if name.startswith("capability:"):
                raise ValueError(f"list capability names without the 'capability:' prefix: {name!r}")
        return value

    @field_validator("when")
    @classmethod
    def _no_capability_conditions(cls, value: list[str]) -> list[str]:
        for req in value:
            ns = namespace_of(req)
            if ns is None:
                raise ValueError(f"condition {req!r} has no namespace")
            if ns == "capability":
                raise ValueError(f"grants may not depend on capabilities ({req!r}): no cycles")
        return value


class Capabilities(Section):
    grants: list[Grant] = Field(default_factory=list)
    claim: NonEmpty | None = Field(default=None, description="a token claim listing capability names")


class OpenFeature(Section):
    """Flags from OpenFeature; `provider = "flagd"` reads a flagd flag file (file mode)."""

    provider: Literal["flagd"] = "flagd"
    path: NonEmpty = Field(description="flagd flag-definition file, relative to the policy file")
    context_claims: list[NonEmpty] = Field(default_factory=list,
                                           description="claims copied into the evaluation context")
    poll_interval_seconds: PositiveSeconds = 1.0


class Features(Section):
    flags: dict[str, StrictBool] = Field(default_factory=dict)  # "no" is not `false`: a load error
    openfeature: OpenFeature | None = None


class Redis(Section):
    url: NonEmpty | None = None
    url_env: EnvVarName | None = Field(default=None, description="environment variable holding the URL")
    prefix: str = "mcp-preconditions:state:"
    quota_prefix: str = Field(default="mcp-preconditions:quota:",
                              description="key prefix of the buckets of quotas with store = \"redis\"")
    connect_timeout_seconds: PositiveSeconds = 0.25
    read_timeout_seconds: PositiveSeconds = 0.25

    @field_validator("url")
    @classmethod
    def _no_password(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).password is not None:
            raise ValueError("holds a password; name an environment variable with url_env instead")
        return value

    @model_validator(mode="after")
    def _one_url(self) -> Redis:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("set exactly one of 'url' or 'url_env'")
        return self


class State(Section):
    values: dict[str, StrictBool] = Field(default_factory=dict)  # 1 or "yes" is not `true`
    callables: dict[str, NonEmpty] = Field(
        default_factory=dict, description="state key -> 'module:function' returning a bool")
    ttl_seconds: Seconds = Field(default=1.0, description="cache TTL for state lookups; 0 disables")
    redis: Redis | None = None


class Introspection(Section):
    """RFC 7662 token introspection for opaque tokens; credentials come from the environment."""

    endpoint: NonEmpty
    client_id_env: EnvVarName
    client_secret_env: EnvVarName
    timeout_seconds: PositiveSeconds = 2.0


def _env_reference(value: str) -> str:
    if not re.fullmatch(r"env:[A-Za-z_][A-Za-z0-9_]*", value):
        # the value itself is not shown: it may be the secret, written where it must not be
        raise ValueError("must be env:VAR, naming an environment variable (a secret is never "
                         "written in a policy)")
    return value


EnvReference = Annotated[str, AfterValidator(_env_reference)]


class SignIn(Section):
    """`[auth.sign_in]`: the gateway as an OpenID Connect client of `[auth]`'s issuer, for people
    signing in to its pages (connect links, approvals)."""

    client_id: EnvReference = Field(description='"env:VAR": the gateway\'s client id at the issuer')
    client_secret: EnvReference = Field(description='"env:VAR": its client secret')


class Auth(Section):
    """Access-token verification (RFC 9068 JWTs, RFC 7662 introspection) and claim/scope rules."""

    issuer: NonEmpty | None = None
    audience: NonEmpty | list[NonEmpty] | None = None
    jwks_uri: NonEmpty | None = None
    discovery: bool = Field(default=False, description="find jwks_uri from the issuer's metadata")
    keys: list[dict[str, str | list[str]]] = Field(
        default_factory=list, description="static public JWKs (`key_ops`, `x5c` may be arrays)")
    public_keys_pem: NonEmpty | list[NonEmpty] = Field(
        default_factory=list,
        description="PEM public keys: PEM text, or a file relative to the policy (one or a list)")
    algorithms: list[NonEmpty] = Field(default_factory=lambda: ["RS256", "ES256"], min_length=1)
    leeway_seconds: Annotated[int, Field(ge=0, le=600)] = 30
    require_typ: NonEmpty | None = Field(default=None, description="e.g. 'at+jwt' (RFC 9068)")
    max_token_bytes: Annotated[int, Field(gt=0)] = 16384
    fetch_timeout_seconds: PositiveSeconds = 2.0
    jwks_refetch_interval_seconds: Seconds = Field(
        default=10.0, description="minimum time between JWKS refetches triggered by an unknown kid")
    introspection: Introspection | None = None
    claim_aliases: dict[NonEmpty, NonEmpty | Annotated[list[NonEmpty], Field(min_length=1)]] = Field(
        default_factory=dict,
        description="alias -> claim name (string) or nested path (list of keys)")
    scope_implications: dict[NonEmpty, list[NonEmpty]] = Field(
        default_factory=dict, description="scope -> scopes it implies (exact strings)")
    cache_max_entries: Annotated[int, Field(ge=0)] = 10000
    cache_ttl_seconds: Seconds = 300.0
    sign_in: SignIn | None = Field(default=None,
                                   description="sign people in to the gateway's pages at `issuer`")

    @field_validator("algorithms")
    @classmethod
    def _safe_algorithms(cls, value: list[str]) -> list[str]:
        for alg in value:
            if alg.lower() == "none":
                raise ValueError("'none' is never an acceptable algorithm")
            if alg not in ASYMMETRIC_ALGORITHMS | HMAC_ALGORITHMS:
                raise ValueError(f"unknown algorithm {alg!r}")
        if set(value) & HMAC_ALGORITHMS and set(value) & ASYMMETRIC_ALGORITHMS:
            raise ValueError("do not mix HMAC and asymmetric algorithms (key-confusion attack)")
        return value

    @model_validator(mode="after")
    def _sign_in_needs_issuer(self) -> Auth:
        if self.sign_in is not None and self.issuer is None:
            raise ValidationError.from_exception_data("Auth", [InitErrorDetails(
                type=PydanticCustomError("sign_in_issuer", "needs auth.issuer: people sign in there"),
                loc=("sign_in",), input=None)])
        return self

    @field_validator("claim_aliases")
    @classmethod
    def _alias_names(cls, value: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        for alias in value:
            if ":" in alias:
                raise ValueError(f"alias {alias!r} may not contain ':'")
        return value


class ToolPolicy(Section):
    requirements: list[NonEmpty] = Field(default_factory=list)


class GuardSettings(Section):
    lookup_timeout_seconds: PositiveSeconds = 0.5
    denial: Literal["result", "jsonrpc"] = "result"
    list_filtering: bool = Field(default=False, description="hide tools a principal cannot call")

    @field_validator("lookup_timeout_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if math.isinf(value):
            raise ValueError("must be finite")
        return value


class Gateway(Section):
    """`[gateway]`: how `mcp-preconditions gateway` treats the server it guards (SPEC §10)."""

    unlisted_tools: Literal["allow", "deny"] = Field(
        default="allow", description='"deny" refuses every tool with no requirements anywhere')
    call_timeout_seconds: PositiveSeconds = Field(
        default=30.0, description="an upstream call still running after this is cut off")
    max_response_bytes: Annotated[int, Field(ge=1 << 16, le=1 << 30)] = Field(
        default=64 << 20, description="an HTTP server's response body larger than this fails the "
                                      "request and closes its connection")
    max_event_bytes: Annotated[int, Field(ge=1 << 12, le=1 << 30)] = Field(
        default=4 << 20, description="one SSE event (and one line) from an HTTP server; larger "
                                     "closes the stream")


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
                         f"{_toml_type(value)} {value!r}")
    if not value:
        raise ValueError('must name at least one requirement an approver must meet (or be "self")')
    for i, req in enumerate(value):
        if not isinstance(req, str):
            raise ValueError(f"[{i}] must be a requirement string, got {_toml_type(req)} {req!r}")
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
                     f"{_toml_type(value)} {value}{at}")


def _subject_claims(value: object) -> object:
    """One `[pdp_server.subjects]` entry: a table of claims, without `sub` (the subject's id is its
    `sub`, never a value the table could change)."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a table of claims, got {_toml_type(value)} {value!r}")
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


class DecisionLog(Section):
    logger: NonEmpty = "mcp_preconditions.decisions"
    jsonl_path: NonEmpty | None = None
    opentelemetry: bool = True


class Policy(Section):
    """A whole policy file."""

    environment: list[NonEmpty] = Field(default_factory=list)
    environment_variable: EnvVarName | None = Field(
        default="MCP_PRECONDITIONS_ENVIRONMENT",
        description="when set, its comma-separated labels replace `environment`")
    confidential: list[NonEmpty] = Field(default_factory=list)
    features: Features = Field(default_factory=Features)
    state: State = Field(default_factory=State)
    capabilities: Capabilities = Field(default_factory=Capabilities)
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    auth: Auth = Field(default_factory=Auth)
    guard: GuardSettings = Field(default_factory=GuardSettings)
    decision_log: DecisionLog = Field(default_factory=DecisionLog)
    gateway: Gateway = Field(default_factory=Gateway)
    quotas: dict[NonEmpty, Quota] = Field(default_factory=dict,
                                          description="quota:NAME -> its rate and bucket")
    approvals: dict[NonEmpty, Approval] = Field(
        default_factory=dict, description="approval:NAME -> who approves a call, and for how long")
    pdp: dict[NonEmpty, Pdp] = Field(
        default_factory=dict, description="pdp:NAME -> the AuthZEN decision point that decides it")
    pdp_server: PdpServer = Field(
        default_factory=PdpServer,
        description="the AuthZEN decision point this policy answers as (docs/authzen.md)")

    @model_validator(mode="after")
    def _redis_quotas_need_redis(self) -> Policy:
        if self.state.redis is not None:
            return self
        stores = [*(("quotas", name, quota.store) for name, quota in self.quotas.items()),
                  *(("approvals", name, approval.store) for name, approval in self.approvals.items())]
        missing = [InitErrorDetails(type=PydanticCustomError(
            "store", 'store = "redis" needs a [state.redis] connection'),
            loc=(section, name, "store"), input="redis")
            for section, name, store in stores if store == "redis"]
        if missing:  # a ValidationError keeps each problem's own key path
            raise ValidationError.from_exception_data("Policy", missing)
        return self
