"""`[servers.KEY.credentials]` in a gateway.toml and `[auth.sign_in]` in a policy (SPEC §14): every bad
input is one line naming the key path, exit 2, from `config validate` and from `gateway --config`;
a secret written in the file is refused without being shown; `env:VAR` references are read; a good
table gives the settings the credentials package serves.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from mcp_preconditions.cli import main
from mcp_preconditions.credentials import (
    Client,
    OAuthSettings,
    PerSubjectSettings,
    TokenExchangeSettings,
    sign_in_settings,
)
from mcp_preconditions.errors import PolicyError
from mcp_preconditions.gateway.config import load_config
from mcp_preconditions.policy.load import parse_policy
from tests.unit.test_gateway_config import errors, toml

KEY = base64.b64encode(bytes(range(32))).decode()
URL = 'url = "http://127.0.0.1:1/mcp"\n'
EXCHANGE = ('kind = "token-exchange"\ntoken_endpoint = "https://idp.test/token"\nclient_id = "gw"\n'
            'client_secret = "env:GW_TEST_SECRET"\naudience = "https://crm.test"\n')
OAUTH = ('kind = "oauth"\nissuer = "https://gh.test"\nclient_id = "env:GW_TEST_ID"\n'
         'client_secret = "env:GW_TEST_SECRET"\nencryption_key = "env:GW_TEST_KEY"\n')
ENV_REF = "must be env:VAR, naming an environment variable (a secret is never written in this file)"
BOTH = "set both authorization_endpoint and token_endpoint (or neither: they are discovered)"


def without(table: str, key: str) -> str:
    return "".join(line + "\n" for line in table.splitlines() if not line.startswith(key + " "))


CASES = [
    ("on a stdio server", f'[servers.a]\ncommand = {json.dumps(sys.executable)}\n'
                          f'[servers.a.credentials]\n{EXCHANGE}',
     "servers.a.credentials: for a 'url' server only: a stdio server is one process the gateway "
     "starts, not reached by each caller as themselves"),
    ("an unknown kind", f'[servers.a]\n{URL}[servers.a.credentials]\nkind = "saml"\n',
     "servers.a.credentials.kind: Input should be one of 'token-exchange', 'oauth', 'per-subject', "
     "got 'saml'"),
    ("no kind", f'[servers.a]\n{URL}[servers.a.credentials]\nheader = "X"\n',
     "servers.a.credentials.kind: Field required (one of 'token-exchange', 'oauth', 'per-subject')"),
    ("not a table", f'[servers.a]\n{URL}credentials = "token-exchange"\n',
     "servers.a.credentials: Input should be a valid dictionary or object to extract fields from"),
    ("an unknown key", f'[servers.a]\n{URL}[servers.a.credentials]\n{EXCHANGE}audiance = "x"\n',
     "servers.a.credentials.audiance: unknown key (a typo here would silently weaken the policy)"),
    ("a key of another kind", f'[servers.a]\n{URL}[servers.a.credentials]\n{EXCHANGE}store = "redis"\n',
     "servers.a.credentials.store: unknown key (a typo here would silently weaken the policy)"),
    ("no token endpoint", f'[servers.a]\n{URL}[servers.a.credentials]\n{without(EXCHANGE, "token_endpoint")}',
     "servers.a.credentials.token_endpoint: Field required"),
    ("a token endpoint that is no URL",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{without(EXCHANGE, "token_endpoint")}'
     'token_endpoint = "ftp://idp.test/token"\n',
     "servers.a.credentials.token_endpoint: not an http(s) URL: 'ftp://idp.test/token'"),
    ("no audience nor resource",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{without(EXCHANGE, "audience")}',
     "servers.a.credentials.audience: set audience or resource (or both): the token the server gets "
     "must be issued for it"),
    ("a secret written in the file",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{without(EXCHANGE, "client_secret")}'
     'client_secret = "s3cr3t-in-the-file"\n', f"servers.a.credentials.client_secret: {ENV_REF}"),
    ("an unknown client authentication",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{EXCHANGE}token_endpoint_auth = "private_key_jwt"\n',
     "servers.a.credentials.token_endpoint_auth: Input should be 'client_secret_basic' or "
     "'client_secret_post'"),
    ("a timeout of 0", f'[servers.a]\n{URL}[servers.a.credentials]\n{EXCHANGE}timeout_seconds = 0\n',
     "servers.a.credentials.timeout_seconds: Input should be greater than 0"),
    ("a timeout as text", f'[servers.a]\n{URL}[servers.a.credentials]\n{EXCHANGE}timeout_seconds = "10"\n',
     "servers.a.credentials.timeout_seconds: Input should be a valid number"),
    ("a scope that is two", f'[servers.a]\n{URL}[servers.a.credentials]\n{EXCHANGE}scope = ["a b"]\n',
     "servers.a.credentials.scope: not a scope token (RFC 6749 §3.3): 'a b'"),
    ("a scope as text", f'[servers.a]\n{URL}[servers.a.credentials]\n{EXCHANGE}scope = "a"\n',
     "servers.a.credentials.scope: Input should be a valid list"),
    ("oauth without an encryption key",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{without(OAUTH, "encryption_key")}',
     "servers.a.credentials.encryption_key: Field required"),
    ("oauth with a key written in the file",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{without(OAUTH, "encryption_key")}'
     f'encryption_key = "{KEY}"\n', f"servers.a.credentials.encryption_key: {ENV_REF}"),
    ("oauth with one endpoint",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{without(OAUTH, "issuer")}'
     'token_endpoint = "https://gh.test/token"\n',
     f"servers.a.credentials.authorization_endpoint: {BOTH}"),
    ("oauth with the endpoints and no client",
     f'[servers.a]\n{URL}[servers.a.credentials]\nkind = "oauth"\nencryption_key = "env:GW_TEST_KEY"\n'
     'authorization_endpoint = "https://gh.test/a"\ntoken_endpoint = "https://gh.test/t"\n',
     "servers.a.credentials.client_id: required with the two endpoints: nothing is discovered, so "
     "the gateway cannot register itself"),
    ("oauth with a secret and no client",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{without(OAUTH, "client_id")}',
     "servers.a.credentials.client_id: required with client_secret"),
    ("oauth with a client and no secret",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{without(OAUTH, "client_secret")}',
     'servers.a.credentials.client_secret: required with client_id (or token_endpoint_auth = '
     '"none": a public client)'),
    ("oauth, a public client with a secret",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{OAUTH}token_endpoint_auth = "none"\n',
     'servers.a.credentials.client_secret: a public client (token_endpoint_auth = "none") has no '
     'secret'),
    ("oauth with an issuer and endpoints",
     f'[servers.a]\n{URL}[servers.a.credentials]\n{OAUTH}authorization_endpoint = "https://gh.test/a"\n'
     'token_endpoint = "https://gh.test/t"\n',
     "servers.a.credentials.issuer: set issuer (discovery) or the two endpoints, not both"),
    ("oauth with an unknown store", f'[servers.a]\n{URL}[servers.a.credentials]\n{OAUTH}store = "disk"\n',
     "servers.a.credentials.store: Input should be 'memory' or 'redis'"),
    ("per-subject without a file", f'[servers.a]\n{URL}[servers.a.credentials]\nkind = "per-subject"\n',
     "servers.a.credentials.secrets: Field required"),
    ("per-subject with a bad header",
     f'[servers.a]\n{URL}[servers.a.credentials]\nkind = "per-subject"\nsecrets = "s.json"\n'
     'header = "X Key"\n', "servers.a.credentials.header: not an HTTP header name: 'X Key'"),
    ("an unset variable", f'[servers.a]\n{URL}[servers.a.credentials]\n{EXCHANGE}'.replace(
        "GW_TEST_SECRET", "GW_TEST_UNSET"),
     "servers.a.credentials.client_secret: environment variable GW_TEST_UNSET is not set"),
    ("a short encryption key", f'[servers.a]\n{URL}[servers.a.credentials]\n{OAUTH}'.replace(
        "GW_TEST_KEY", "GW_TEST_SHORT_KEY"),
     "servers.a.credentials.encryption_key: $GW_TEST_SHORT_KEY decodes to 16 bytes, not 32 (make one "
     "with `openssl rand -base64 32`)"),
    ("a key that is not base64", f'[servers.a]\n{URL}[servers.a.credentials]\n{OAUTH}'.replace(
        "GW_TEST_KEY", "GW_TEST_ID"), "servers.a.credentials.encryption_key: $GW_TEST_ID not base64"),
]


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_TEST_SECRET", "the-client-secret")
    monkeypatch.setenv("GW_TEST_ID", "gh-client!")
    monkeypatch.setenv("GW_TEST_KEY", KEY)
    monkeypatch.setenv("GW_TEST_SHORT_KEY", base64.b64encode(bytes(16)).decode())
    monkeypatch.delenv("GW_TEST_UNSET", raising=False)


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_credentials_table_is_one_line_by_key_path_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, message: str) -> None:
    path = toml(tmp_path, body)
    assert errors(capsys, "config", "validate", str(path)) == [f"{path}: {message}"]
    assert errors(capsys, "gateway", "--config", str(path)) == [f"{path}: {message}"]
    for secret in ("s3cr3t-in-the-file", "the-client-secret", KEY):
        assert secret not in message


def test_bad_secrets_files_by_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.json").write_text('{"alice": "Bearer x"}', encoding="utf-8")
    path = toml(tmp_path, f'[servers.a]\n{URL}[servers.a.credentials]\nkind = "per-subject"\n'
                          'secrets = "s.json"\n[servers.b]\nurl = "http://127.0.0.1:2/mcp"\n'
                          '[servers.b.credentials]\nkind = "per-subject"\nsecrets = "none.json"\n')
    assert errors(capsys, "config", "validate", str(path)) == [
        f'{path}: servers.a.credentials.secrets: {tmp_path / "s.json"}: "alice": a key is '
        '"<issuer> <subject>"',
        f"{path}: servers.b.credentials.secrets: {tmp_path / 'none.json'}: cannot read: No such file "
        "or directory"]


def test_good_tables_give_their_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.json").write_text('{"https://idp.test alice": "Bearer a"}', encoding="utf-8")
    monkeypatch.setenv("GW_TEST_SECRETS_FILE", "s.json")
    path = toml(tmp_path, f'[servers.crm]\n{URL}[servers.crm.credentials]\n{EXCHANGE}'
                          'resource = "https://crm.test/mcp"\nscope = ["crm.read", "crm.write"]\n'
                          'token_endpoint_auth = "client_secret_post"\ntimeout_seconds = 3\n'
                          f'[servers.gh]\n{URL}[servers.gh.credentials]\n{OAUTH}store = "redis"\n'
                          'scope = ["repo"]\nresource = "https://api.gh.test"\n'
                          f'[servers.legacy]\n{URL}[servers.legacy.credentials]\nkind = "per-subject"\n'
                          'secrets = "env:GW_TEST_SECRETS_FILE"\nheader = "X-Api-Key"\n'
                          f'[servers.plain]\n{URL}'
                          f'[servers.zero]\n{URL}[servers.zero.credentials]\nkind = "oauth"\n'
                          'encryption_key = "env:GW_TEST_KEY"\n'
                          f'[servers.public]\n{URL}[servers.public.credentials]\nkind = "oauth"\n'
                          'encryption_key = "env:GW_TEST_KEY"\nclient_id = "gw-public"\n'
                          'token_endpoint_auth = "none"\n')
    specs = {s.key: s.credentials for s in load_config(str(path)).servers}
    assert specs == {
        "crm": TokenExchangeSettings("https://idp.test/token", Client("gw", "the-client-secret",
                                                                      "client_secret_post"),
                                     "https://crm.test", "https://crm.test/mcp",
                                     ("crm.read", "crm.write"), 3.0),
        "gh": OAuthSettings(Client("gh-client!", "the-client-secret"), bytes(range(32)),
                            "https://gh.test", None, None, ("repo",), "https://api.gh.test", "redis",
                            server_url="http://127.0.0.1:1/mcp"),
        "legacy": PerSubjectSettings(str(tmp_path / "s.json"), "X-Api-Key"),
        "plain": None,
        # SPEC §17: nothing but the key; everything else is discovered from the server
        "zero": OAuthSettings(None, bytes(range(32)), server_url="http://127.0.0.1:1/mcp"),
        "public": OAuthSettings(Client("gw-public", "", "none"), bytes(range(32)),
                                server_url="http://127.0.0.1:1/mcp")}
    shown = repr(specs)
    assert "the-client-secret" not in shown and repr(bytes(range(32))) not in shown
    assert main(["config", "validate", str(path)]) == 0
    capsys.readouterr()
    assert errors(capsys, "gateway", "--config", str(path)) == [  # a stdio caller has no token
        f"{path}: servers.crm.credentials.kind: \"token-exchange\" exchanges each caller's bearer "
        "token, and a stdio gateway's caller has none: serve it with --listen http://HOST:PORT"]


def test_the_schema_describes_each_kind() -> None:
    from mcp_preconditions.gateway.config import config_schema

    schema = config_schema()
    mapping = schema["$defs"]["ServerEntry"]["properties"]["credentials"]["anyOf"][0]["discriminator"]
    assert sorted(mapping["mapping"]) == ["oauth", "per-subject", "token-exchange"]


# -- [auth.sign_in] -----------------------------------------------------------------------------------
SIGN_IN = '[auth]\nissuer = "https://idp.test"\naudience = "a"\njwks_uri = "https://idp.test/jwks"\n'


@pytest.mark.parametrize(("body", "message"), [
    (f'{SIGN_IN}[auth.sign_in]\nclient_id = "gw"\nclient_secret = "env:S"\n',
     "auth.sign_in.client_id: must be env:VAR, naming an environment variable (a secret is never "
     "written in a policy)"),
    (f'{SIGN_IN}[auth.sign_in]\nclient_id = "env:I"\nclient_secret = "hunter2"\n',
     "auth.sign_in.client_secret: must be env:VAR, naming an environment variable (a secret is never "
     "written in a policy)"),
    (f'{SIGN_IN}[auth.sign_in]\nclient_id = "env:I"\n', "auth.sign_in.client_secret: Field required"),
    (f'{SIGN_IN}[auth.sign_in]\nclient_id = "env:I"\nclient_secret = "env:S"\nscope = "openid"\n',
     "auth.sign_in.scope: unknown key (a typo here would silently weaken the policy)"),
    ('[auth]\naudience = "a"\njwks_uri = "https://idp.test/jwks"\n[auth.sign_in]\n'
     'client_id = "env:I"\nclient_secret = "env:S"\n',
     "auth.sign_in: needs auth.issuer: people sign in there"),
])
def test_a_bad_sign_in_is_one_line_by_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              body: str, message: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(body, encoding="utf-8")
    assert errors(capsys, "policy", "validate", str(path)) == [f"{path}: {message}"]
    assert "hunter2" not in message


def test_sign_in_settings_read_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    source = parse_policy((SIGN_IN + '[auth.sign_in]\nclient_id = "env:GW_TEST_ID"\n'
                           'client_secret = "env:GW_TEST_UNSET"\n').encode(), "p.toml")
    with pytest.raises(PolicyError) as unset:
        sign_in_settings(source)
    assert unset.value.lines() == ["p.toml: auth.sign_in.client_secret: environment variable "
                                   "GW_TEST_UNSET is not set"]
    settings = sign_in_settings(source, {"GW_TEST_ID": "gw", "GW_TEST_UNSET": "secret"})
    assert settings is not None
    assert (settings.issuer, settings.client, settings.jwks_uri) == (
        "https://idp.test", Client("gw", "secret"), "https://idp.test/jwks")
    assert sign_in_settings(parse_policy(b"", "p.toml")) is None


def test_oauth_without_sign_in_is_refused_naming_the_key(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC §14 (issue 39.4): a connect link alone let whoever held it connect *their* account for
    the link's caller (mallory sent her link to alice, and alice's account served mallory's
    calls). `kind = "oauth"` requires `[auth.sign_in]`; before, this gateway started."""
    path = toml(tmp_path, f'[servers.gh]\n{URL}[servers.gh.credentials]\n{OAUTH}')
    assert errors(capsys, "gateway", "--config", str(path)) == [
        f'{path}: servers.gh.credentials: kind = "oauth" requires [auth.sign_in] in the policy: a '
        "connect link is completed only by the person it was made for, signed in"]


def test_oauth_on_a_stdio_gateway_needs_its_pages(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = toml(tmp_path, f'[servers.gh]\n{URL}[servers.gh.credentials]\n{OAUTH}')
    (tmp_path / "policy.toml").write_text(SIGN_IN + '[auth.sign_in]\nclient_id = "env:GW_TEST_ID"\n'
                                          'client_secret = "env:GW_TEST_SECRET"\n', encoding="utf-8")
    assert errors(capsys, "gateway", "--config", str(path)) == [
        f'{path}: servers.gh.credentials: kind = "oauth" needs the gateway\'s pages (connect links, '
        "/oauth/callback): give --pages-listen http://127.0.0.1:PORT (or --public-url)"]
