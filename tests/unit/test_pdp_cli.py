"""`mcp-preconditions pdp` bad input: a bad `--listen`, a `[pdp_server]` with an unknown key or a
malformed `[pdp_server.subjects]` entry, a bad `url`, a port taken: one line each, exit 2, naming
the option or the key path, before anything is served."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mcp_preconditions.cli import main

ROOT = Path(__file__).resolve().parents[2]
TODO = str(ROOT / "policies" / "authzen-todo.toml")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["pdp", *argv])
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err


@pytest.mark.parametrize(("listen", "said"), [
    ("tcp://127.0.0.1:8080", "--listen: expected 'http://HOST:PORT', got 'tcp://127.0.0.1:8080'"),
    ("http://127.0.0.1", "--listen: expected 'http://HOST:PORT', got 'http://127.0.0.1'"),
    ("http://127.0.0.1:70000", "--listen: port out of range (0-65535): 70000"),
    ("https://127.0.0.1:8443", "--listen: expected 'http://HOST:PORT', got 'https://127.0.0.1:8443'"),
])
def test_a_bad_listen_is_one_line(capsys: pytest.CaptureFixture[str], listen: str, said: str) -> None:
    assert run(capsys, "--policy", TODO, "--listen", listen) == (
        2, f"mcp-preconditions: error: {said}\n")


def test_listen_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--policy", TODO) == (
        2, "mcp-preconditions pdp: error: the following arguments are required: --listen\n")


def test_a_port_taken_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, err = run(capsys, "--policy", TODO, "--listen", f"http://127.0.0.1:{port}")
    assert code == 2
    assert err.startswith(f"mcp-preconditions: error: --listen: cannot listen on 127.0.0.1:{port}: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize(("toml", "said"), [
    ("[pdp_server]\nenable = true\n",
     "pdp_server.enable: unknown key (a typo here would silently weaken the policy)"),
    ('[pdp_server]\nactions = ["can_read"]\n', "pdp_server.actions: Input should be a valid dictionary"),
    ('[pdp_server]\nurl = "pdp.example.com"\n',
     "pdp_server.url: must be an http(s) URL with no query or fragment (the decision point's "
     "identifier, AuthZEN 1.0 metadata)"),
    ('[pdp_server.actions]\ncan_read = ""\n',
     "pdp_server.actions.can_read: String should have at least 1 character"),
    ('[pdp_server.subjects]\nada = "keeper"\n',
     "pdp_server.subjects.ada: must be a table of claims, got string 'keeper'"),
    ('[pdp_server.subjects.ada]\nsub = "eve"\n',
     "pdp_server.subjects.ada: may not set 'sub': the subject's id is its 'sub'"),
    ("[pdp_server.subjects.ada]\nlevel = 1.5\n",
     "pdp_server.subjects.ada.level: must be a string, an integer, a boolean, or an array or "
     "table of them, got float 1.5"),
    ('[pdp_server.subjects.ada]\nprofile = { since = 1979-05-27, name = "Ada" }\n',
     "pdp_server.subjects.ada.profile: must be a string, an integer, a boolean, or an array or "
     "table of them, got date 1979-05-27 (at since)"),
    ('[pdp_server.subjects."CiRm"]\nroles = ["viewer", 2.0]\n',
     'pdp_server.subjects.CiRm.roles: must be a string, an integer, a boolean, or an array or '
     "table of them, got float 2.0 (at [1])"),
])
def test_a_bad_pdp_server_table_is_one_line_naming_the_key_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, said: str) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(toml, encoding="utf-8")
    assert run(capsys, "--policy", str(policy), "--listen", "http://127.0.0.1:0") == (
        2, f"mcp-preconditions: error: {policy}: {said}\n")
