"""Policy files (SPEC §5): every core key parses, unknown keys are errors listed by key path, bad files
are named, secrets only by environment-variable name, and the exported JSON Schema.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mcp_preconditions import PolicyError, load_policy, parse_policy, policy_schema

ROOT = Path(__file__).resolve().parents[2]
UNKNOWN = "unknown key (a typo here would silently weaken the policy)"

SPEC_EXAMPLE = b"""
environment = ["production", "eu-west-1"]
confidential = ["state:weather.clear"]

[features.flags]
"launch_window.open" = true

[state.values]
"weather.clear" = true

[[capabilities.grants]]
capabilities = ["rocket.launch"]
when = ["auth:claim:role:mission_control"]

[tools.launch_rocket]
requirements = ["state:weather.clear"]

[auth]
issuer = "https://auth.example.com"
audience = "urn:mcp:mission-server"
jwks_uri = "https://auth.example.com/jwks"
algorithms = ["RS256", "ES256"]
leeway_seconds = 30
"""

EVERY_KEY = b"""
environment = ["production"]
environment_variable = "DEPLOY_ENV"
confidential = ["state:a"]
[features]
flags = { "a" = true, "b" = false }
[features.openfeature]
provider = "flagd"
path = "flags.json"
context_claims = ["sub"]
poll_interval_seconds = 2
[state]
values = { "a" = true }
callables = { "b" = "module:function" }
ttl_seconds = 0
[state.redis]
url_env = "REDIS_URL"
prefix = "p:"
connect_timeout_seconds = 0.1
read_timeout_seconds = 0.1
[capabilities]
claim = "caps"
[[capabilities.grants]]
capabilities = ["x"]
[tools.t]
requirements = ["env:production"]
[auth]
issuer = "https://issuer"
audience = ["a", "b"]
jwks_uri = "https://issuer/jwks"
discovery = true
keys = [{ kty = "RSA", kid = "k", n = "xx", e = "AQAB" }]
public_keys_pem = ["-----BEGIN PUBLIC KEY-----"]
algorithms = ["ES256"]
leeway_seconds = 0
require_typ = "at+jwt"
max_token_bytes = 4096
fetch_timeout_seconds = 1
jwks_refetch_interval_seconds = 0
claim_aliases = { r = ["realm_access", "roles"], g = "urn:groups" }
scope_implications = { "a" = ["b"] }
cache_max_entries = 0
cache_ttl_seconds = 60
[auth.introspection]
endpoint = "https://issuer/introspect"
client_id_env = "CLIENT_ID"
client_secret_env = "CLIENT_SECRET"
timeout_seconds = 1
[guard]
lookup_timeout_seconds = 0.25
denial = "jsonrpc"
list_filtering = true
[decision_log]
logger = "audit"
jsonl_path = "decisions.jsonl"
opentelemetry = false
"""


def problems(data: bytes | str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(data.encode() if isinstance(data, str) else data, "p.toml")
    assert info.value.source == "p.toml"
    return info.value.problems


def test_the_spec_example_parses() -> None:
    p = parse_policy(SPEC_EXAMPLE, "p.toml").policy
    assert p.environment == ["production", "eu-west-1"]
    assert p.confidential == ["state:weather.clear"]
    assert p.features.flags == {"launch_window.open": True}
    assert p.state.values == {"weather.clear": True}
    assert [(g.capabilities, g.when) for g in p.capabilities.grants] == [
        (["rocket.launch"], ["auth:claim:role:mission_control"])]
    assert p.tools["launch_rocket"].requirements == ["state:weather.clear"]
    assert (p.auth.issuer, p.auth.audience, p.auth.jwks_uri) == (
        "https://auth.example.com", "urn:mcp:mission-server", "https://auth.example.com/jwks")
    assert (p.auth.algorithms, p.auth.leeway_seconds) == (["RS256", "ES256"], 30)


def test_every_key_parses() -> None:
    p = parse_policy(EVERY_KEY, "p.toml").policy
    assert p.features.flags == {"a": True, "b": False}
    assert p.features.openfeature is not None and p.features.openfeature.path == "flags.json"
    assert p.state.redis is not None and p.state.redis.url_env == "REDIS_URL"
    assert p.auth.introspection is not None
    assert p.auth.introspection.client_secret_env == "CLIENT_SECRET"
    assert p.auth.claim_aliases == {"r": ["realm_access", "roles"], "g": "urn:groups"}
    assert (p.guard.denial, p.guard.list_filtering, p.decision_log.logger) == ("jsonrpc", True, "audit")


def test_an_empty_file_is_the_default_policy() -> None:
    p = parse_policy(b"", "p.toml").policy
    assert p.environment == [] and p.tools == {} and p.capabilities.grants == []
    assert p.environment_variable == "MCP_PRECONDITIONS_ENVIRONMENT"
    assert (p.guard.lookup_timeout_seconds, p.state.ttl_seconds) == (0.5, 1.0)


def test_revision_is_a_content_hash(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_bytes(SPEC_EXAMPLE)
    loaded = load_policy(path)
    assert loaded.revision == hashlib.sha256(SPEC_EXAMPLE).hexdigest()[:12]
    assert (loaded.source, loaded.base_dir) == (str(path), tmp_path)
    assert loaded.resolve_path("flags.json") == tmp_path / "flags.json"
    assert parse_policy(SPEC_EXAMPLE + b"\n", "x").revision != loaded.revision


# -- unknown keys and bad values, by key path ---------------------------------------------------
@pytest.mark.parametrize(("text", "path"), [
    ('envronment = ["production"]', "envronment"),
    ('[auth]\njwks_url = "x"', "auth.jwks_url"),
    ('[tools.launch]\nrequirment = ["env:a"]', "tools.launch.requirment"),
    ('[tools."my tool"]\nreq = []', 'tools."my tool".req'),
    ('[[capabilities.grants]]\ncapabilities = ["a"]\nwhen_all = ["env:a"]',
     "capabilities.grants[0].when_all"),
    ('[features]\nflag = {}', "features.flag"),
    ('[state.redis]\nurl = "redis://x"\npassword = "hunter2"', "state.redis.password"),
    ('[guard]\ntimeout = 1', "guard.timeout"),
    ('[decision_log]\npath = "x"', "decision_log.path"),
])
def test_unknown_keys_are_errors(text: str, path: str) -> None:
    assert problems(text) == [f"{path}: {UNKNOWN}"]


@pytest.mark.parametrize(("text", "key"), [
    ('[auth.introspection]\nendpoint = "https://i"\nclient_id_env = "A"\nclient_secret_env = "B"\n'
     'client_secret = "x"', "auth.introspection.client_secret"),
    ('[auth.introspection]\nendpoint = "https://i"\nclient_id_env = "A"\nclient_secret_env = "B"\n'
     'client_id = "x"', "auth.introspection.client_id"),
    ('[auth]\nclient_secret = "x"', "auth.client_secret"),
    ('[auth]\nsecret = "x"', "auth.secret"),
])
def test_secrets_are_never_inline(text: str, key: str) -> None:
    assert problems(text) == [f"{key}: {UNKNOWN}"]


def test_a_password_in_an_inline_url_is_refused() -> None:
    # `url` is for URLs without credentials; a password belongs in the variable `url_env` names.
    assert problems('[state.redis]\nurl = "redis://:hunter2@localhost:6379/0"') == [
        "state.redis.url: holds a password; name an environment variable with url_env instead"]
    assert parse_policy(b'[state.redis]\nurl = "redis://localhost:6379/0"', "p.toml").policy.state.redis


def test_secret_variables_must_be_variable_names() -> None:
    assert problems('[auth.introspection]\nendpoint = "https://i"\nclient_id_env = "A"\n'
                    'client_secret_env = "s3cr3t value"') == [
        "auth.introspection.client_secret_env: String should match pattern '^[A-Za-z_][A-Za-z0-9_]*$'"]


def test_many_problems_are_listed_together() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(b'envronment = ["x"]\nconfidential = [""]\n[auth]\nalgorithms = ["none"]\n'
                     b'leeway_seconds = 9999\n[guard]\nlookup_timeout_seconds = 0\n'
                     b'[tools.t]\nrequirements = "env:a"\n', "policies/p.toml")
    assert str(info.value) == (
        "policies/p.toml: invalid policy (6 problem(s)):\n"
        "  confidential[0]: String should have at least 1 character\n"
        "  tools.t.requirements: Input should be a valid list\n"
        "  auth.algorithms: 'none' is never an acceptable algorithm\n"
        "  auth.leeway_seconds: Input should be less than or equal to 600\n"
        "  guard.lookup_timeout_seconds: Input should be greater than 0\n"
        f"  envronment: {UNKNOWN}")


@pytest.mark.parametrize(("text", "problem"), [
    ('environment = "production"', "environment: Input should be a valid list"),
    ("environment = [1]", "environment[0]: Input should be a valid string"),
    ('[auth]\nalgorithms = ["HS256", "RS256"]',
     "auth.algorithms: do not mix HMAC and asymmetric algorithms (key-confusion attack)"),
    ('[auth]\nalgorithms = ["RS1"]', "auth.algorithms: unknown algorithm 'RS1'"),
    ('[auth]\nalgorithms = []', "auth.algorithms: List should have at least 1 item after validation, not 0"),
    ('[guard]\ndenial = "raise"', "guard.denial: Input should be 'result' or 'jsonrpc'"),
    ("[state]\nttl_seconds = -1", "state.ttl_seconds: Input should be greater than or equal to 0"),
    ("[guard]\nlookup_timeout_seconds = inf",
     "guard.lookup_timeout_seconds: Input should be a finite number"),
    ('[state.redis]\nprefix = "x"', "state.redis: set exactly one of 'url' or 'url_env'"),
    ('[auth.introspection]\nclient_id_env = "A"\nclient_secret_env = "B"',
     "auth.introspection.endpoint: Field required"),
    ('[features.openfeature]\nprovider = "launchdarkly"\npath = "f.json"',
     "features.openfeature.provider: Input should be 'flagd'"),
    ('[auth]\nscope_implications = { "a" = "b" }', "auth.scope_implications.a: Input should be a valid list"),
])
def test_bad_values_are_named_by_key_path(text: str, problem: str) -> None:
    assert problems(text) == [problem]


def test_a_dotted_flag_key_without_quotes_is_reported_at_its_table() -> None:
    # `launch_window.open = true` is a TOML table, not a flag named "launch_window.open"
    assert problems("[state.values]\nweather.clear = true") == [
        "state.values.weather: Input should be a valid boolean"]
    assert problems("[features.flags]\nlaunch_window.open = true")[0] == (
        "features.flags.launch_window: Input should be a valid boolean")


@pytest.mark.parametrize("value", ['"no"', '"true"', "1", "0.5", "[true]"])
def test_a_static_flag_must_be_a_boolean(value: str) -> None:
    # As static state: a typo such as "no" must not load as a silently unsatisfied flag.
    assert problems(f'[features.flags]\n"beta" = {value}') == [
        "features.flags.beta: Input should be a valid boolean"]


def test_quoted_keys_in_key_paths() -> None:
    assert problems('[state.values]\n"weather.clear" = [true]') == [
        'state.values."weather.clear": Input should be a valid boolean']


def test_union_member_names_never_appear_in_key_paths() -> None:
    assert problems("[auth]\naudience = 1") == [
        "auth.audience: Input should be a valid string", "auth.audience: Input should be a valid list"]
    assert problems('[auth]\naudience = ["ok", ""]') == [
        "auth.audience: Input should be a valid string",
        "auth.audience[1]: String should have at least 1 character"]
    assert problems("[auth]\nclaim_aliases = { a = 1 }") == [
        "auth.claim_aliases.a: Input should be a valid string",
        "auth.claim_aliases.a: Input should be a valid list"]


@pytest.mark.parametrize(("text", "problem"), [
    ('[state.values]\n"int" = [true]', "state.values.int: Input should be a valid boolean"),
    ('[features.flags]\n"bool" = [true]', "features.flags.bool: Input should be a valid boolean"),
    ('[tools.float]\nrequirements = "env:a"', "tools.float.requirements: Input should be a valid list"),
])
def test_keys_named_like_python_types_keep_their_place(text: str, problem: str) -> None:
    assert problems(text)[0] == problem


# -- unreadable files ---------------------------------------------------------------------------
def test_invalid_toml() -> None:
    assert problems("environment = \n") == ["(file): not valid TOML: Invalid value (at line 1, column 15)"]
    assert problems("[x]\n[x]\n") == ["(file): not valid TOML: Cannot declare ('x',) twice (at line 2, "
                                      "column 3)"]


def test_not_utf8() -> None:
    assert problems(b'environment = ["\xff"]') == ["(file): not UTF-8 (invalid start byte at byte 16)"]


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "nope.toml")
    assert str(info.value) == (f"{tmp_path / 'nope.toml'}: invalid policy (1 problem(s)):\n"
                               "  (file): cannot read: No such file or directory")


# -- the JSON Schema ----------------------------------------------------------------------------
def objects(node: Any) -> list[dict[str, Any]]:
    """Every sub-schema that describes an object with declared properties."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if "properties" in node:
            found.append(node)
        for value in node.values():
            found.extend(objects(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(objects(value))
    return found


def test_the_schema_is_valid_json_schema() -> None:
    schema = policy_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "mcp-preconditions policy"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_the_schema_names_the_core_keys_and_forbids_others() -> None:
    schema = policy_schema()
    assert {"environment", "confidential", "features", "state", "capabilities", "tools", "auth"} <= set(
        schema["properties"])
    defs = schema["$defs"]
    assert {"flags"} <= set(defs["Features"]["properties"])
    assert {"values", "callables", "ttl_seconds"} <= set(defs["State"]["properties"])
    assert {"capabilities", "when"} <= set(defs["Grant"]["properties"])
    assert {"issuer", "audience", "jwks_uri", "algorithms", "leeway_seconds"} <= set(
        defs["Auth"]["properties"])
    assert "client_secret" not in defs["Introspection"]["properties"]
    assert all(o.get("additionalProperties") is False for o in objects(schema))
    assert len(objects(schema)) == 1 + len(defs)


def test_the_schema_accepts_the_shipped_policy_and_rejects_a_typo() -> None:
    validator = jsonschema.Draft202012Validator(policy_schema())
    shipped = tomllib.loads((ROOT / "policies" / "mission-control.toml").read_text())
    assert list(validator.iter_errors(shipped)) == []
    assert list(validator.iter_errors(tomllib.loads(EVERY_KEY.decode()))) == []
    errors = list(validator.iter_errors({**shipped, "envronment": ["x"]}))
    assert [e.validator for e in errors] == ["additionalProperties"]
