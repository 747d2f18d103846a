"""Inputs that used to crash the command line: lone surrogates, closed standard streams, an out of
range port, endless or oversized files, hidden characters in messages, a non-boolean static flag.
Each is one `mcp-preconditions: error:` line per problem and exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_preconditions.policy import load_policy
from tests.fixtures.cli_main import run

ROOT = Path(__file__).resolve().parents[2]
POLICY = str(ROOT / "policies" / "mission-control.toml")
TOOLS = str(ROOT / "examples" / "mission-control-tools.json")
KNOWLEDGE = str(ROOT / "examples" / "knowledge.json")
CATALOG = str(ROOT / "examples" / "catalog.json")
SCRIPT = Path(sys.executable).parent / "mcp-preconditions"
ERROR = "mcp-preconditions: error: "
SURROGATE_TOOLS = '{"tools": [{"name": "a", "description": "x\\ud800"}]}'
SURROGATE_MESSAGE = "t.json: tools[0].description: lone surrogate \\ud800: not Unicode text"
BOUND_HINT = "the input size bound (set $MCP_PRECONDITIONS_MAX_FILE_BYTES to raise it)"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    monkeypatch.delenv("MCP_PRECONDITIONS_MAX_FILE_BYTES", raising=False)


def script(*argv: str, shell_redirect: str = "", **options: object) -> subprocess.CompletedProcess[str]:
    """The installed console script as a real process; `shell_redirect` (`<&-`, `>&-`) closes a
    standard stream before it starts."""
    assert SCRIPT.exists(), f"console script not installed at {SCRIPT}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_PRECONDITIONS_")}
    command = ["sh", "-c", f'exec "$0" "$@" {shell_redirect}', str(SCRIPT), *argv]
    kwargs: dict[str, object] = {"capture_output": True, **options}
    if "stdout" in options:
        kwargs = {"stderr": subprocess.PIPE, **options}
    return subprocess.run(command, text=True, env=env, timeout=10, check=False,  # type: ignore[call-overload, no-any-return]
                          **kwargs)


# --- lone surrogates ----------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["check", "--policy", POLICY, "--tools", "t.json"],
    ["check", "--policy", POLICY, "--tools", "t.json", "--format", "json"],
    ["filter", "--tools", "t.json", "--knowledge", KNOWLEDGE, "--format", "table"],
    ["present", "--tools", "t.json", "--tier", "small"],
    ["route", "--tools", "t.json", "--catalog", CATALOG],
    ["lint", "--tools", "t.json"],
], ids=lambda argv: " ".join(a for a in argv[:1] + argv[-2:] if "/" not in a))
def test_a_lone_surrogate_in_a_tools_file(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text(SURROGATE_TOOLS, encoding="utf-8")
    assert run(capsys, *argv) == (2, "", f"{ERROR}{SURROGATE_MESSAGE}\n")


@pytest.mark.parametrize(("option", "text", "message"), [
    ("--claims", '{"sub": "bob", "role": "\\udc00"}',
     "c.json: role: lone surrogate \\udc00: not Unicode text"),
    ("--knowledge", '{"satisfied": ["env:\\ud800"]}',
     "c.json: satisfied[0]: lone surrogate \\ud800: not Unicode text"),
])
def test_a_lone_surrogate_in_claims_or_knowledge(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, option: str,
                                                 text: str, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.json").write_text(text, encoding="utf-8")
    command = ["check", "--policy", POLICY] if option == "--claims" else ["filter"]
    assert run(capsys, *command, "--tools", TOOLS, option, "c.json") == (2, "", f"{ERROR}{message}\n")


def test_a_surrogate_through_the_real_console_script(tmp_path: Path) -> None:
    # A real, strict UTF-8 stdout: the case that raised UnicodeEncodeError with a traceback.
    (tmp_path / "t.json").write_text(SURROGATE_TOOLS, encoding="utf-8")
    done = script("check", "--policy", POLICY, "--tools", "t.json", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"{ERROR}{SURROGATE_MESSAGE}\n")


# --- closed and failing standard streams --------------------------------------------------------
def test_a_token_from_a_closed_stdin() -> None:
    done = script("check", "--policy", POLICY, "--tools", TOOLS, "--token", "-", shell_redirect="<&-")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"{ERROR}--token -: standard input: closed\n")


def test_a_token_from_stdin_that_is_not_utf8() -> None:
    done = subprocess.run([str(SCRIPT), "check", "--policy", POLICY, "--tools", TOOLS, "--token", "-"],
                          input=b"\xff\xfe\n", capture_output=True, timeout=10, check=False)
    assert (done.returncode, done.stdout, done.stderr.decode()) == (
        2, b"", f"{ERROR}--token -: standard input: not UTF-8 (invalid start byte at byte 0)\n")


def test_a_closed_stdout_exits_non_zero() -> None:
    done = script("check", "--policy", POLICY, "--tools", TOOLS, shell_redirect=">&-")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"{ERROR}standard output is closed; there is nowhere to print the result\n")


def test_a_full_stdout_exits_non_zero() -> None:
    with open("/dev/full", "w") as full:
        done = script("policy", "schema", stdout=full)
    assert (done.returncode, done.stderr) == (
        2, f"{ERROR}standard output: cannot write: No space left on device\n")


def test_a_reader_that_went_away_exits_non_zero() -> None:
    proc = subprocess.Popen([str(SCRIPT), "policy", "schema"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child writes: its first write meets a broken pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=10) == 2
    assert err == f"{ERROR}standard output: cannot write: Broken pipe\n"


# --- serve --port -------------------------------------------------------------------------------
@pytest.mark.parametrize(("port", "shown"), [("99999", "99999"), ("-1", "-1"), ("http", "'http'")])
def test_a_port_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str], port: str,
                                              shown: str) -> None:
    code, out, err = run(capsys, "serve", "--policy", POLICY, "--transport", "http", "--port", port)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (f"mcp-preconditions serve: error: argument --port: must be a "
                                    f"port number 0..65535, got {shown}")
    assert "Traceback" not in err


# --- bounded reads ------------------------------------------------------------------------------
def test_dev_zero_as_a_tools_file_ends_with_one_line(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PRECONDITIONS_MAX_FILE_BYTES", "4096")
    assert run(capsys, "check", "--policy", POLICY, "--tools", "/dev/zero") == (
        2, "", f"{ERROR}/dev/zero: larger than 4096 bytes, {BOUND_HINT}\n")


def test_an_oversized_policy_is_refused_by_key_path(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PRECONDITIONS_MAX_FILE_BYTES", "100")
    assert run(capsys, "policy", "validate", POLICY) == (
        2, "", f"{ERROR}{POLICY}: (file): larger than 100 bytes, {BOUND_HINT}\n")


def test_dev_zero_through_the_console_script_does_not_hang() -> None:
    done = script("check", "--policy", POLICY, "--tools", "/dev/zero")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"{ERROR}/dev/zero: larger than {64 * 1024 * 1024} bytes, {BOUND_HINT}\n"


# --- hidden characters in messages --------------------------------------------------------------
@pytest.mark.parametrize(("name", "shown"), [
    ("evil\u202egnp.json", "evil\\u202egnp.json"),
    ("red\x1b[31m.json", "red\\x1b[31m.json"),
    ("two\nlines.json", "two\\nlines.json"),
    ("isolate\u2066.json", "isolate\\u2066.json"),
])
def test_hidden_characters_in_a_message_are_escaped(capsys: pytest.CaptureFixture[str], name: str,
                                                    shown: str) -> None:
    assert run(capsys, "check", "--policy", POLICY, "--tools", name) == (
        2, "", f"{ERROR}{shown}: cannot read: No such file or directory\n")


def test_validate_warns_about_a_bidi_tool_name(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text('[tools."launch\u202e_rocket"]\nrequirements = ["env:x"]\n'
                                     '[tools." abort"]\nrequirements = ["env:x"]\n', encoding="utf-8")
    revision = load_policy(tmp_path / "p.toml").revision
    assert run(capsys, "policy", "validate", "p.toml") == (0, f"OK: p.toml (revision {revision})\n", (
        'mcp-preconditions: warning: p.toml: tools."launch\\u202e_rocket": the tool name holds '
        "characters a reader cannot see (U+202E); it applies only to a tool named exactly so\n"
        'mcp-preconditions: warning: p.toml: tools." abort": the tool name holds characters a reader '
        "cannot see (leading or trailing white space); it applies only to a tool named exactly so\n"))


def test_lint_output_escapes_a_bidi_tool_name(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text(json.dumps(
        [{"name": "a\u202eb", "execution": {"requirements": ["nonamespace"]}}]), encoding="utf-8")
    code, out, _ = run(capsys, "lint", "--tools", "t.json")
    assert code == 1
    assert out.splitlines()[0].startswith("t.json: error: tool 'a\\u202eb': requirement 'nonamespace'")


# --- static flags -------------------------------------------------------------------------------
def test_a_non_boolean_static_flag_is_a_load_error(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text('[features.flags]\n"beta" = "no"\n', encoding="utf-8")
    assert run(capsys, "policy", "validate", "p.toml") == (
        2, "", f"{ERROR}p.toml: features.flags.beta: Input should be a valid boolean\n")


# --- a verified token's claims are printed too --------------------------------------------------
def test_a_verified_token_with_a_surrogate_subject_prints_escaped(tmp_path: Path) -> None:
    import time

    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "key.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (tmp_path / "p.toml").write_text(
        '[auth]\nissuer = "https://issuer.test"\naudience = "urn:test"\npublic_keys_pem = ["key.pem"]\n'
        'algorithms = ["ES256"]\n[tools.t]\nrequirements = ["auth:oauth2"]\n', encoding="utf-8")
    (tmp_path / "t.json").write_text('[{"name": "t"}]', encoding="utf-8")
    now = int(time.time())
    token = jwt.encode({"iss": "https://issuer.test", "aud": "urn:test", "sub": "x\ud800\u202ey",
                        "iat": now, "exp": now + 600}, key, algorithm="ES256")
    done = script("check", "--policy", "p.toml", "--tools", "t.json", "--token", token, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[1] == "principal: x\\ud800\\u202ey (verified jwt token)"
    done = script("check", "--policy", "p.toml", "--tools", "t.json", "--token", token, "--tool", "t",
                  "--format", "json", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["tools"][0]["allowed"] is True
