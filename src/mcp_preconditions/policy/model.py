"""The policy file model (SPEC §5), validated with pydantic; an unknown key is always an error.

The core keys (environment, confidential, features.flags, state.values, capabilities.grants,
tools.*.requirements, auth) are fixed for portability; the rest extends them.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..requirements import namespace_of
from .deciders import Approval, Pdp, PdpServer, Quota
from .section import (
    ArgumentValue,
    EnvReference,
    EnvVarName,
    NonEmpty,
    Pointer,
    PositiveSeconds,
    Seconds,
    Section,
)

FlagValue = bool | int | float | str

ASYMMETRIC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                                   "ES256", "ES384", "ES512", "ES256K", "EdDSA"})
HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})


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
