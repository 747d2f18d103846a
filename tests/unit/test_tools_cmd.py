"""`tools --policy`: each listed tool carries what the gateway would list (its own ∪ the policy's,
less the confidential ones); a tool whose own list the gateway refuses carries the policy's alone."""

from __future__ import annotations

from typing import Any

from mcp_preconditions.cli.tools_cmd import as_the_gateway_lists
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.wire import META_KEY

POLICY = b"""confidential = ["env:vault"]
[tools.own]
requirements = ["auth:oauth2", "env:vault"]
[tools.garbage]
requirements = ["env:production"]
[tools.unknown_form]
requirements = ["env:production"]
"""


def test_requirements_as_the_gateway_lists_them() -> None:
    tools: list[dict[str, Any]] = [
        {"name": "own", "execution": {"requirements": ["env:production"], "taskSupport": "optional"}},
        {"name": "garbage", "execution": {"requirements": "env:production"}},
        {"name": "unknown_form", "_meta": {META_KEY: ["nonamespace"], "other": 1}},
        {"name": "open", "description": "left as sent"},
        {"title": "no name"},
    ]
    listed = as_the_gateway_lists(tools, parse_policy(POLICY, "p.toml"), [])
    assert listed == [
        {"name": "own", "execution": {"requirements": ["env:production", "auth:oauth2"],
                                      "taskSupport": "optional"},
         "_meta": {META_KEY: ["env:production", "auth:oauth2"]}},
        {"name": "garbage", "execution": {"requirements": ["env:production"]},
         "_meta": {META_KEY: ["env:production"]}},
        {"name": "unknown_form", "_meta": {META_KEY: ["env:production"], "other": 1},
         "execution": {"requirements": ["env:production"]}},
        {"name": "open", "description": "left as sent"},
        {"title": "no name"},
    ]
