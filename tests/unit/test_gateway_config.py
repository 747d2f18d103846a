"""The gateway's deployment files (SPEC §12): every bad input a user can write in a gateway.toml or a
desktop client's JSON is one line naming the file and its key path, exit 2, from `gateway` and from
`config validate`; `env:VAR` values pass the gateway's own variables through; relative paths in a
gateway.toml resolve against it; `config schema` is the JSON Schema editors check the files with.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mcp_preconditions.cli import main
from mcp_preconditions.gateway.config import (
    ServerSpec,
    config_schema,
    listen_address,
    load_config,
    load_servers,
)

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable  # a command that exists, by absolute path
POLICY = "policy.toml"
ERROR = "mcp-preconditions: error: "


def toml(tmp_path: Path, body: str, name: str = "gateway.toml") -> Path:
    (tmp_path / POLICY).write_text("", encoding="utf-8")
    path = tmp_path / name
    path.write_text(f'policy = "{POLICY}"\n{body}', encoding="utf-8")
    return path


def desktop(tmp_path: Path, servers: object, name: str = "desktop.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def errors(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """Run the command line; it must exit 2. The lines on stderr, without the common start."""
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert all(line.startswith(ERROR) for line in lines), lines
    return [line.removeprefix(ERROR) for line in lines]


# --- gateway.toml: every bad input, by key path -----------------------------------------------------
KEY_RULE = ("not a usable server key: use letters, digits, '_', '.' or '-' (at most 64, starting with "
            "a letter or digit): it makes the default prefix KEY__")
ONE_KIND = "set exactly one of 'command' (a stdio server) or 'url' (streamable HTTP)"
TOML_ERRORS = [
    ("unknown top-level key", 'lisen = "stdio"\n[servers.a]\ncommand = "PY"\n',
     "lisen: unknown key (a typo here would silently weaken the policy)"),
    ("unknown server key", '[servers.a]\ncommand = "PY"\nargv = ["x"]\n',
     "servers.a.argv: unknown key (a typo here would silently weaken the policy)"),
    ("wrong type: command", "[servers.a]\ncommand = 3\n",
     "servers.a.command: Input should be a valid string"),
    ("wrong type: args", '[servers.a]\ncommand = "PY"\nargs = "-m x"\n',
     "servers.a.args: Input should be a valid list"),
    ("wrong type: an env value", '[servers.a]\ncommand = "PY"\nenv = { N = 1 }\n',
     "servers.a.env.N: Input should be a valid string"),
    ("wrong type: servers", 'servers = ["a"]\n', "servers: Input should be a valid dictionary"),
    ("both command and url", '[servers.a]\ncommand = "PY"\nurl = "http://127.0.0.1:1/mcp"\n',
     f"servers.a: {ONE_KIND}"),
    ("neither command nor url", '[servers.a]\nprefix = "a_"\n', f"servers.a: {ONE_KIND}"),
    ("headers on a command", '[servers.a]\ncommand = "PY"\nheaders = { X = "y" }\n',
     "servers.a: 'headers' is for a 'url' server"),
    ("args on a url", '[servers.a]\nurl = "http://127.0.0.1:1/mcp"\nargs = ["x"]\n',
     "servers.a: 'args' and 'env' are for a 'command' server"),
    ("bad url", '[servers.a]\nurl = "ftp://127.0.0.1/mcp"\n',
     "servers.a.url: not an http(s) URL: 'ftp://127.0.0.1/mcp'"),
    ("bad header name", '[servers.a]\nurl = "http://127.0.0.1:1/mcp"\nheaders = { "X Key" = "y" }\n',
     "servers.a.headers: not an HTTP header name: 'X Key'"),
    ("bad key name", '[servers."my server"]\ncommand = "PY"\n', f'servers."my server": {KEY_RULE}'),
    ("key starting with '_'", '[servers._a]\ncommand = "PY"\n', f"servers._a: {KEY_RULE}"),
    ("bad prefix", '[servers.a]\ncommand = "PY"\nprefix = "a b/"\n',
     "servers.a.prefix: not a usable prefix: 'a b/': use letters, digits, '_', '.' or '-' (at most "
     "64; \"\" keeps the server's names bare)"),
    ("type that disagrees with command", '[servers.a]\ncommand = "PY"\ntype = "http"\n',
     "servers.a: type 'http' does not match command"),
    ("type that disagrees with url", '[servers.a]\nurl = "http://127.0.0.1:1/mcp"\ntype = "stdio"\n',
     "servers.a: type 'stdio' does not match url"),
    ("unknown type", '[servers.a]\ncommand = "PY"\ntype = "sse"\n',
     "servers.a.type: Input should be 'stdio', 'http', 'streamable-http' or 'streamableHttp'"),
    ("no servers", "[servers]\n", "servers: Dictionary should have at least 1 item after validation, not 0"),
    ("bad listen", 'listen = "tcp://127.0.0.1:80"\n[servers.a]\ncommand = "PY"\n',
     "listen: expected 'stdio' or 'http://HOST:PORT', got 'tcp://127.0.0.1:80'"),
    ("listen port out of range", 'listen = "http://127.0.0.1:70000"\n[servers.a]\ncommand = "PY"\n',
     "listen: port out of range (0-65535): 70000"),
    ("claims over HTTP", 'listen = "http://127.0.0.1:0"\nclaims = "c.json"\n[servers.a]\ncommand = "PY"\n',
     "claims: for listen = \"stdio\" only; over HTTP each call's bearer token decides who is calling"),
    ("env:VAR unset", '[servers.a]\ncommand = "PY"\nenv = { K = "env:GW_CONFIG_TEST_UNSET" }\n',
     "servers.a.env.K: environment variable GW_CONFIG_TEST_UNSET is not set"),
    ("env:VAR unset, a header", '[servers.a]\nurl = "http://127.0.0.1:1/mcp"\n'
                                'headers = { Authorization = "env:GW_CONFIG_TEST_UNSET" }\n',
     "servers.a.headers.Authorization: environment variable GW_CONFIG_TEST_UNSET is not set"),
    ("env: naming no variable", '[servers.a]\ncommand = "PY"\nenv = { K = "env:MY-TOKEN" }\n',
     "servers.a.env.K: expected env:VAR (VAR: letters, digits and '_', not starting with a digit), "
     "got 'env:MY-TOKEN'"),
    ("a command not found", '[servers.a]\ncommand = "no-such-command-anywhere"\n',
     "servers.a.command: cannot start the server: command not found: no-such-command-anywhere"),
    ("a dotted key's path is quoted", '[servers."a.b"]\ncommand = "no-such-command-anywhere"\n',
     'servers."a.b".command: cannot start the server: command not found: no-such-command-anywhere'),
    ("not TOML", "[servers.a\n", "(file): not valid TOML: Expected ']' at the end of a table "
                                 "declaration (at line 2, column 11)"),
]


@pytest.fixture(autouse=True)
def _unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GW_CONFIG_TEST_UNSET", raising=False)


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in TOML_ERRORS], ids=[c[0] for c in TOML_ERRORS])
def test_a_bad_gateway_toml_is_one_line_by_key_path_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, message: str) -> None:
    path = toml(tmp_path, body.replace('"PY"', json.dumps(PY)))
    assert errors(capsys, "gateway", "--config", str(path)) == [f"{path}: {message}"]
    assert errors(capsys, "config", "validate", str(path)) == [f"{path}: {message}"]


def test_every_problem_of_a_gateway_toml_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                 ) -> None:
    """A bad key is reported beside the other servers' problems, not only once they are fixed."""
    path = toml(tmp_path, '[servers."bad key"]\ncommand = "x"\n[servers.b]\ncommand = 3\n'
                          '[servers.c]\nurl = "http://127.0.0.1:1/mcp"\ncommand = "x"\n')
    assert errors(capsys, "config", "validate", str(path)) == [
        f'{path}: servers."bad key": {KEY_RULE}', f"{path}: servers.b.command: Input should be a "
        "valid string", f"{path}: servers.c: {ONE_KIND}"]


@pytest.mark.parametrize(("body", "message"), [
    ("", "policy: Field required"),
    ('policy = ""\n', "policy: String should have at least 1 character"),
])
def test_a_gateway_toml_names_its_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str,
                                         message: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'{body}[servers.a]\ncommand = {json.dumps(PY)}\n', encoding="utf-8")
    assert errors(capsys, "gateway", "--config", str(path)) == [f"{path}: {message}"]


def test_a_missing_gateway_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nowhere.toml"
    assert errors(capsys, "gateway", "--config", str(path)) == [
        f"{path}: (file): cannot read: No such file or directory"]


# --- a desktop client's JSON ------------------------------------------------------------------------
DESKTOP_ERRORS = [
    ("unknown server key", {"a": {"command": "PY", "disabled": True}},
     "mcpServers.a.disabled: unknown key (a typo here would silently weaken the policy)"),
    ("wrong type", {"a": {"command": "PY", "args": "x"}}, "mcpServers.a.args: Input should be a valid list"),
    ("both", {"a": {"command": "PY", "url": "http://127.0.0.1:1/mcp"}}, f"mcpServers.a: {ONE_KIND}"),
    ("neither", {"a": {"env": {}}}, f"mcpServers.a: {ONE_KIND}"),
    ("bad key name", {"a/b": {"command": "PY"}}, f'mcpServers."a/b": {KEY_RULE}'),
    ("bad prefix", {"a": {"command": "PY", "prefix": "é"}},
     "mcpServers.a.prefix: not a usable prefix: 'é': use letters, digits, '_', '.' or '-' (at most "
     "64; \"\" keeps the server's names bare)"),
    ("type that disagrees", {"a": {"url": "http://127.0.0.1:1/mcp", "type": "stdio"}},
     "mcpServers.a: type 'stdio' does not match url"),
    ("env:VAR unset", {"a": {"command": "PY", "env": {"K": "env:GW_CONFIG_TEST_UNSET"}}},
     "mcpServers.a.env.K: environment variable GW_CONFIG_TEST_UNSET is not set"),
    ("a command not found", {"a": {"command": "no-such-command-anywhere"}},
     "mcpServers.a.command: cannot start the server: command not found: no-such-command-anywhere"),
    ("no servers", {}, "mcpServers: Dictionary should have at least 1 item after validation, not 0"),
    ("not an object", ["a"], "mcpServers: Input should be a valid dictionary"),
]


@pytest.mark.parametrize(("servers", "message"), [c[1:] for c in DESKTOP_ERRORS],
                         ids=[c[0] for c in DESKTOP_ERRORS])
def test_a_bad_desktop_config_is_one_line_by_key_path_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], servers: object, message: str) -> None:
    path = desktop(tmp_path, json.loads(json.dumps(servers).replace('"PY"', json.dumps(PY))))
    (tmp_path / POLICY).write_text("", encoding="utf-8")
    policy = str(tmp_path / POLICY)
    assert errors(capsys, "gateway", "--policy", policy, "--servers", str(path)) == [f"{path}: {message}"]
    assert errors(capsys, "config", "validate", str(path)) == [f"{path}: {message}"]


@pytest.mark.parametrize(("text", "message"), [
    ('{"mcpServers": ', "(file): not valid JSON: Expecting value at line 1 column 16"),
    ("[]", "(top level): expected an object, got list"),
    ('{"servers": {}}', "mcpServers: Field required"),
])
def test_a_desktop_config_that_is_not_one(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                          message: str) -> None:
    path = tmp_path / "desktop.json"
    path.write_text(text, encoding="utf-8")
    assert errors(capsys, "config", "validate", str(path)) == [f"{path}: {message}"]


def test_a_desktop_clients_own_settings_are_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"globalShortcut": "Ctrl+Space", "mcpServers": {"a": {"command": PY}}}),
                    encoding="utf-8")
    assert [s.key for s in load_servers(str(path)).servers] == ["a"]


# --- the command line's combinations -----------------------------------------------------------------
@pytest.mark.parametrize(("extra", "message"), [
    (["--policy", "p.toml"], "--config names the policy and the servers: give no --policy, --servers, "
                             "--upstream-url or command with it"),
    (["--servers", "d.json"], "--config names the policy and the servers: give no --policy, --servers, "
                              "--upstream-url or command with it"),
    (["--upstream-url", "http://127.0.0.1:1/mcp"], "--config names the policy and the servers: give no "
                                                   "--policy, --servers, --upstream-url or command with it"),
    (["--", PY], "--config names the policy and the servers: give no --policy, --servers, "
                 "--upstream-url or command with it"),
])
def test_config_takes_no_other_source_of_servers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 extra: list[str], message: str) -> None:
    path = toml(tmp_path, f"[servers.a]\ncommand = {json.dumps(PY)}\n")
    assert errors(capsys, "gateway", "--config", str(path), *extra) == [message]


def test_servers_needs_a_policy_and_no_upstream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = desktop(tmp_path, {"a": {"command": PY}})
    (tmp_path / POLICY).write_text("", encoding="utf-8")
    assert errors(capsys, "gateway", "--servers", str(path)) == [
        "no policy: give --policy P (or --config gateway.toml)"]
    for upstream in (["--", PY], ["--upstream-url", "http://127.0.0.1:1/mcp"]):
        assert errors(capsys, "gateway", "--policy", str(tmp_path / POLICY), "--servers", str(path),
                      *upstream) == ["--servers names the servers: give no --upstream-url or command with it"]


def test_claims_on_the_command_line_need_stdio_whatever_the_file_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = toml(tmp_path, f'listen = "http://127.0.0.1:0"\n[servers.a]\ncommand = {json.dumps(PY)}\n')
    assert errors(capsys, "gateway", "--config", str(path), "--claims", "c.json") == [
        "--claims is for --listen stdio only; over HTTP each call's bearer token decides who is calling"]


# --- what a valid file means -------------------------------------------------------------------------
def test_env_var_values_pass_the_gateways_own_variables_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_CONFIG_TEST_KEY", "s3cret")
    monkeypatch.setenv("GW_CONFIG_TEST_TOKEN", "Bearer t0ken")
    path = toml(tmp_path, f'[servers.fs]\ncommand = {json.dumps(PY)}\nargs = ["-m", "x"]\n'
                          'env = { API_KEY = "env:GW_CONFIG_TEST_KEY", LEVEL = "warn", ODD = "env" }\n'
                          '[servers.crm]\nurl = "https://crm.example.com/mcp"\n'
                          'headers = { Authorization = "env:GW_CONFIG_TEST_TOKEN" }\nprefix = ""\n')
    found = load_config(str(path))
    assert found.servers == (
        ServerSpec("fs", "fs__", PY, ("-m", "x"), {"API_KEY": "s3cret", "LEVEL": "warn", "ODD": "env"}),
        ServerSpec("crm", "", url="https://crm.example.com/mcp",
                   headers={"Authorization": "Bearer t0ken"}))


def test_relative_paths_resolve_against_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    path = toml(deploy, f'claims = "me.json"\n[servers.a]\ncommand = {json.dumps(PY)}\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    found = load_config(str(Path("..") / "deploy" / "gateway.toml"))
    assert Path(str(found.policy)).resolve() == deploy / POLICY
    assert Path(str(found.claims)).resolve() == deploy / "me.json"
    assert found.listen == "stdio" and found.source == str(Path("..") / "deploy" / "gateway.toml")
    assert load_config(str(path)).policy == str(deploy / POLICY)


@pytest.mark.parametrize("policy", ["https://policies.example.com/gateway.toml", "/etc/gateway/p.toml"])
def test_a_policy_url_or_absolute_path_is_kept(tmp_path: Path, policy: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'policy = "{policy}"\n[servers.a]\ncommand = {json.dumps(PY)}\n', encoding="utf-8")
    assert load_config(str(path)).policy == policy


def test_listen_addresses() -> None:
    assert listen_address("stdio") is None
    assert listen_address("http://127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert listen_address("http://[::1]:0") == ("::1", 0)
    with pytest.raises(ValueError, match="port out of range"):
        listen_address("http://127.0.0.1:65536")


# --- config validate | schema -------------------------------------------------------------------------
def test_config_validate_says_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = toml(tmp_path, f'[servers.fs]\ncommand = {json.dumps(PY)}\n[servers.crm]\n'
                          'url = "http://127.0.0.1:1/mcp"\n')
    assert main(["config", "validate", str(path)]) == 0
    assert capsys.readouterr().out == f"OK: {path} (2 server(s): fs, crm; policy {tmp_path / POLICY})\n"
    json_path = desktop(tmp_path, {"a": {"command": PY}})
    assert main(["config", "validate", str(json_path)]) == 0
    assert capsys.readouterr().out == f"OK: {json_path} (1 server(s): a)\n"


@pytest.mark.parametrize(("argv", "title"), [
    ([], "mcp-preconditions gateway config"),
    (["--desktop"], "mcp-preconditions gateway config (desktop JSON)")])
def test_config_schema_is_a_json_schema(capsys: pytest.CaptureFixture[str], argv: list[str],
                                        title: str) -> None:
    assert main(["config", "schema", *argv]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == title
    assert schema == config_schema("json" if argv else "toml")


def test_the_schema_accepts_good_files_and_refuses_bad_ones() -> None:
    toml_schema = jsonschema.Draft202012Validator(config_schema("toml"))
    desktop_schema = jsonschema.Draft202012Validator(config_schema("json"))
    good = tomllib.loads('policy = "p.toml"\nlisten = "stdio"\n[servers.fs]\ncommand = "npx"\n'
                         'args = ["-y", "x"]\nenv = { A = "env:B" }\n[servers.crm]\n'
                         'url = "https://crm.example.com/mcp"\nprefix = ""\n')
    assert list(toml_schema.iter_errors(good)) == []
    for bad in ({**good, "lisen": "stdio"}, {**good, "servers": {"bad key": {"command": "x"}}},
                {**good, "servers": {"a": {"command": "x", "prefix": "a b"}}},
                {**good, "servers": {"a": {"command": 3}}}):
        assert list(toml_schema.iter_errors(bad)) != [], bad
    shipped = json.loads((ROOT / "examples" / "desktop-config.json").read_text(encoding="utf-8"))
    assert list(desktop_schema.iter_errors(shipped)) == []


def test_a_desktop_config_that_would_start_the_gateway_on_itself(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's one entry, pointed by mistake at the very config the client reads: the gateway
    would start a gateway on the same file, which would start another, and so on."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "claude_desktop_config.json"
    entry: dict[str, Any] = {
        "command": PY, "args": ["gateway", "--policy", "p.toml", "--servers", "claude_desktop_config.json"]}
    path.write_text(json.dumps({"mcpServers": {"guarded": entry}}), encoding="utf-8")
    assert errors(capsys, "config", "validate", str(path)) == [
        f"{path}: mcpServers.guarded.args: names this file: a gateway started on it would start itself "
        "again and again (give --servers a copy of the servers, not the config that launches the gateway)"]
    entry["args"][-1] = "servers.json"  # a copy of the servers: fine
    path.write_text(json.dumps({"mcpServers": {"guarded": entry}}), encoding="utf-8")
    assert load_servers(str(path)).servers[0].args[-1] == "servers.json"


def test_the_readmes_one_entry_is_a_desktop_config_that_runs_the_gateway_on_its_servers() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Guard every server in your desktop config"):]
    section = section[:section.index("\n## ", 1)]
    command = ("mcp-preconditions gateway --policy policies/desktop.toml --servers "
               "examples/desktop-config.json")
    assert command in section
    snippet = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    assert list(jsonschema.Draft202012Validator(config_schema("json")).iter_errors(snippet)) == []
    [entry] = snippet["mcpServers"].values()
    assert entry["command"] == "/path/to/mcp-preconditions/.venv/bin/mcp-preconditions"
    assert entry["args"][:1] == ["gateway"]
    assert entry["args"][entry["args"].index("--servers") + 1] == "/path/to/servers.json"
