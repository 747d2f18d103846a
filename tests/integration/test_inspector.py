"""A third party's view of the wire: the MCP Inspector CLI (npm @modelcontextprotocol/inspector 2.12.0)
runs `tools/list` and `tools/call` against `serve`, over streamable HTTP with a real bearer token and
over stdio, in both protocol eras; what it shows of a denial includes its SEP-2643 envelope.

The Inspector's typed models drop `execution.requirements` (to `{}` at 2025-11-25, entirely at
2026-07-28); the `_meta` mirror is what it shows, which is why SPEC §1 asks for the mirror.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, AuthorizationDenial, Remediation
from tests.fixtures.inspector import ERAS, inspector, run_inspector
from tests.fixtures.mcp_servers import MISSION_POLICY, ROOT, ServeProcess
from tests.fixtures.oidc import OidcServer

pytestmark = pytest.mark.integration

SERVE = Path(sys.executable).parent / "mcp-preconditions"
# Listed as declared, less the policy's confidential `state:weather.clear` (never named).
EXPECTED = {t["name"]: [r for r in t["execution"]["requirements"] if r != "state:weather.clear"]
            if "execution" in t else None for t in json.loads(
    (ROOT / "examples" / "mission-control-tools.json").read_text(encoding="utf-8"))["tools"]}
META_KEY = "io.github.mcp-preconditions/requirements"


def check_listing(result: dict[str, Any], era: str) -> None:
    tools = result["result"]["tools"]
    assert [t["name"] for t in tools] == list(EXPECTED)
    for tool in tools:
        requirements = EXPECTED[tool["name"]]
        if requirements is None:
            assert "_meta" not in tool and "execution" not in tool
            continue
        assert tool["_meta"][META_KEY] == requirements
        # What the Inspector shows of the wire field: its typed model drops `requirements`.
        if era == "legacy":
            assert tool["execution"] == {}
        else:
            assert "execution" not in tool


@pytest.mark.parametrize("era", list(ERAS))
def test_inspector_lists_and_calls_over_http_with_a_real_token(
        mission_http: ServeProcess, oidc_server: OidcServer, tmp_path: Path, era: str) -> None:
    auth = f"Authorization: Bearer {oidc_server.token()}"
    code, listing = inspector(tmp_path, mission_http.url, "--protocol-era", era, "--header", auth,
                              "--method", "tools/list")
    assert code == 0
    check_listing(listing, era)
    code, launched = inspector(tmp_path, mission_http.url, "--protocol-era", era, "--header", auth,
                               "--method", "tools/call", "--tool-name", "launch_rocket",
                               "--tool-arg", "vehicle=Electron")
    assert code == 0
    assert launched["result"]["isError"] is False
    assert launched["result"]["content"] == [{"type": "text", "text": "Electron has cleared the tower."}]


@pytest.mark.parametrize("era", list(ERAS))
def test_inspector_sees_the_denial_of_an_anonymous_call(
        mission_http: ServeProcess, tmp_path: Path, era: str) -> None:
    code, denied = inspector(tmp_path, mission_http.url, "--protocol-era", era, "--method",
                             "tools/call", "--tool-name", "launch_rocket", "--tool-arg", "vehicle=X")
    assert code == 5  # the Inspector's exit code for a tool result with isError
    assert denied["result"]["isError"] is True
    assert denied["result"]["structuredContent"] == {
        "error": "unmet_requirements", "tool": "launch_rocket",
        "unmet": ["auth:oauth2", "auth:claim:role:mission_control", "capability:rocket.launch"],
        "withheld": 0}
    assert denied["result"]["content"][0]["text"] == (
        "Tool 'launch_rocket' was not run: unmet requirements: auth:oauth2, "
        "auth:claim:role:mission_control, capability:rocket.launch. Ask an operator.")
    shown_envelope(denied["result"], "unavailable")


def shown_envelope(result: dict[str, Any], remediation: str) -> None:
    """The SEP-2643 envelope the Inspector shows in a denial's `_meta`, as the client side reads it."""
    shown = result["_meta"][AUTHORIZATION_META_KEY]
    assert shown["reason"] == "insufficient_authorization" and shown["remediation"] == remediation
    assert shown["authorizationContextId"].startswith("authzctx_")
    envelope = AuthorizationDenial.from_meta(result["_meta"])
    assert envelope is not None and envelope.remediation is Remediation(remediation)


@pytest.mark.parametrize("era", list(ERAS))
def test_inspector_over_stdio(tmp_path: Path, era: str) -> None:
    target = [str(SERVE), "serve", "--policy", str(MISSION_POLICY), "--refresh-seconds", "0"]
    code, listing = inspector(tmp_path, "--protocol-era", era, "--method", "tools/list", *target)
    assert code == 0
    check_listing(listing, era)
    code, weather = inspector(tmp_path, "--protocol-era", era, "--method", "tools/call",
                              "--tool-name", "get_weather", *target)
    assert code == 0
    assert weather["result"]["content"] == [{"type": "text",
                                             "text": "Clear skies, wind 5 kn from the west."}]


# --- hosted denials a strict client accepts (issue 29, item 4) -----------------------------------------
@pytest.mark.parametrize("era", list(ERAS))
@pytest.mark.parametrize("flavour", ["fastmcp", "mcpserver"])
def test_inspector_shows_the_denial_of_an_ordinary_str_tool(tmp_path: Path, flavour: str,
                                                            era: str) -> None:
    """FastMCP and the SDK's MCPServer give every `-> str` tool an outputSchema; the Inspector
    validates structuredContent against it even on an error. The hosted denial carries its payload
    under `_meta`, as the gateway's does: the Inspector shows the denial, no validation error."""
    from mcp_types import CallToolResult

    from mcp_preconditions.client import DENIAL_META_KEY
    from mcp_preconditions.integrations.client_mcp import denial_of

    target = ["--", sys.executable, "-m", "tests.fixtures.str_tools", flavour]
    code, out, errors = run_inspector(tmp_path, "--protocol-era", era, "--method", "tools/call",
                                      "--tool-name", "launch", "--tool-arg", "vehicle=Electron",
                                      *target)
    assert "must have required property" not in out.decode() + errors
    assert code == 5  # the Inspector's exit code for a tool result with isError
    result = json.loads(out)["result"]
    payload = {"error": "unmet_requirements", "tool": "launch", "unmet": ["env:production"],
               "withheld": 0}
    assert result["isError"] is True and "structuredContent" not in result
    assert result["content"] == [{"type": "text", "text": "Tool 'launch' was not run: unmet "
                                                          "requirements: env:production. Ask an "
                                                          "operator."}]
    assert result["_meta"][DENIAL_META_KEY] == payload
    assert denial_of(CallToolResult.model_validate(result)) == payload
    shown_envelope(result, "unavailable")
    code, weather = inspector(tmp_path, "--protocol-era", era, "--method", "tools/call",
                              "--tool-name", "weather", *target)
    assert code == 0
    assert weather["result"]["structuredContent"] == {"result": "Clear skies."}
