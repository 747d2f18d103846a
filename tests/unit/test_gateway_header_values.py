"""Header values for an HTTP server holding CR, LF or NUL are refused before anything starts, with
the one line a user sees: from the environment (`--upstream-header NAME=env:VAR`) and from a
gateway.toml (a literal, or an `env:VAR` it names). They could write headers of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_preconditions.cli import main
from mcp_preconditions.errors import PolicyError
from mcp_preconditions.gateway.config import load_config

PROBLEM = "its value holds CR, LF, NUL or another control character"


@pytest.mark.parametrize("value", ["a\nx-injected: 1", "a\r\nb", "a\x1bb"])  # (no NUL in an environment)
def test_an_environment_variable_with_cr_lf_or_nul_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        value: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("", encoding="utf-8")
    monkeypatch.setenv("GW_HEADER_VALUE", value)
    assert main(["gateway", "--policy", str(policy), "--upstream-url", "http://127.0.0.1:1/mcp",
                 "--upstream-header", "X-Key=env:GW_HEADER_VALUE"]) == 2
    assert capsys.readouterr().err == (f"mcp-preconditions: error: --upstream-header X-Key: "
                                       f"environment variable GW_HEADER_VALUE: {PROBLEM}\n")


def test_a_gateway_toml_header_with_cr_lf_or_nul_is_refused_by_key_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_HEADER_VALUE", "token\r\nx-injected: 1")
    config = tmp_path / "gateway.toml"
    config.write_text('policy = "p.toml"\n[servers.crm]\nurl = "http://127.0.0.1:1/mcp"\n'
                      'headers = { "X-Literal" = "a\\nb", "X-Env" = "env:GW_HEADER_VALUE", '
                      '"X-Fine" = "ok" }\n', encoding="utf-8")
    with pytest.raises(PolicyError) as caught:
        load_config(str(config))
    assert caught.value.problems == [f"servers.crm.headers.X-Literal: {PROBLEM}",
                                     f"servers.crm.headers.X-Env: {PROBLEM}"]
