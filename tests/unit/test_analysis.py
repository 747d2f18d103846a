"""Policy analysis: tools no caller can ever be allowed, grants whose `when` never holds, and
argument conditions the tool's inputSchema rules out."""

from __future__ import annotations

from typing import Any

from mcp_preconditions import Guard, parse_policy
from mcp_preconditions.analysis import never_match_findings

TOOLS: list[dict[str, Any]] = [
    {"name": "launch_rocket", "inputSchema": {"type": "object", "properties": {
        "vehicle": {"type": "string"}, "count": {"type": "integer"},
        "stages": {"type": "array", "items": {"type": "object", "properties": {
            "engine": {"type": "string"}}}}}}},
    {"name": "get_weather", "inputSchema": {"type": "object", "properties": {}}},
]


def findings(policy: str) -> list[str]:
    source = parse_policy(policy.encode(), "p.toml")
    guard = Guard(source, entry_points=False, strict=False)
    return [str(f) for f in never_match_findings(guard.snapshot, TOOLS)]


def test_a_clean_policy_has_no_findings() -> None:
    assert findings('environment = ["prod"]\n[[capabilities.grants]]\ncapabilities = ["go"]\n'
                    'when = ["auth:oauth2"]\narguments = { "/vehicle" = ["x"], "/count" = [3], '
                    '"/stages/0/engine" = ["raptor"] }\n'
                    '[tools.launch_rocket]\nrequirements = ["env:prod", "capability:go"]\n') == []


def test_a_tool_that_needs_a_label_the_server_lacks() -> None:
    assert findings('environment = ["prod"]\nenvironment_variable = "MCP_PRECONDITIONS_UNSET_X"\n'
                    '[tools.launch_rocket]\nrequirements = ["env:production"]\n') == [
        "p.toml: tool 'launch_rocket': no caller can ever be allowed: env:production (environment "
        "label 'production' is not among this server's labels)"]


def test_a_false_static_flag_and_state_and_an_ungranted_capability() -> None:
    policy = ('[features.flags]\n"beta" = false\n[state.values]\n"pad.clear" = false\n'
              '[tools.launch_rocket]\nrequirements = ["feature:beta"]\n'
              '[tools.get_weather]\nrequirements = ["capability:nobody"]\n')
    assert findings(policy) == [
        "p.toml: tool 'launch_rocket': no caller can ever be allowed: feature:beta (flag 'beta' is "
        "false (policy))",
        "p.toml: tool 'get_weather': no caller can ever be allowed: capability:nobody (no grant "
        "gives capability 'nobody')"]


def test_a_grant_whose_when_never_holds_and_the_tools_that_depend_on_it() -> None:
    policy = ('[state.values]\n"pad.clear" = false\n[[capabilities.grants]]\ncapabilities = ["go"]\n'
              'when = ["auth:oauth2", "state:pad.clear"]\n'
              '[tools.launch_rocket]\nrequirements = ["capability:go"]\n')
    assert findings(policy) == [
        "p.toml: tool '(policy capabilities.grants[0])': this grant can never apply: "
        "state:pad.clear (state 'pad.clear' is not true (policy))",
        "p.toml: tool 'launch_rocket': no caller can ever be allowed: capability:go (every grant of "
        "it needs something that never holds: state:pad.clear (state 'pad.clear' is not true "
        "(policy)))"]


def test_argument_conditions_the_schema_rules_out() -> None:
    policy = ('[[capabilities.grants]]\ncapabilities = ["go"]\nwhen = ["auth:oauth2"]\n'
              'arguments = { "/vehicel" = ["x"], "/count" = ["3", true], "/vehicle" = [1], '
              '"/stages/0/fuel" = ["lox"] }\n'
              '[tools.launch_rocket]\nrequirements = ["capability:go"]\n')
    assert findings(policy) == [
        "p.toml: tool 'launch_rocket': capabilities.grants[0].arguments '/vehicel' can never "
        "match: /vehicel names no property of the tool's inputSchema",
        "p.toml: tool 'launch_rocket': capabilities.grants[0].arguments '/count' can never match: "
        "the inputSchema says /count is integer, and no listed value is",
        "p.toml: tool 'launch_rocket': capabilities.grants[0].arguments '/vehicle' can never "
        "match: the inputSchema says /vehicle is string, and no listed value is",
        "p.toml: tool 'launch_rocket': capabilities.grants[0].arguments '/stages/0/fuel' can never "
        "match: /stages/0/fuel names no property of the tool's inputSchema"]
