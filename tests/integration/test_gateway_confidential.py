"""A confidential requirement never reaches a gateway's caller (SPEC §3, §10): whether the policy's
`[tools.NAME]` puts it on a tool or the upstream declares it itself (`execution.requirements` or the
`_meta` mirror), it is named in no listing (both protocol versions), no denial (its text, its
`structuredContent`, its `_meta` payload for a tool with an `outputSchema`, the JSON-RPC form), no
unlisted refusal and not in /readyz.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop (a stdio gateway with `--claims`, or an HTTP one for /readyz), the logging upstream in memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.fixtures.gateway_upstream import MIRROR_WIRE, tool_calls
from tests.fixtures.inprocess import logging_gateway
from tests.integration.test_gateway_calls import VERSIONS, gateway_client, raw_call, raw_tools

pytestmark = pytest.mark.asyncio(loop_scope="module")

MIRROR_KEY = "io.github.mcp-preconditions/requirements"
# `state:vault.open` is the policy's own (on echo and typed); `auth:claim:role:admin` is what the
# upstream declares for `secret` (execution.requirements) and `mirror` (its _meta mirror).
CONFIDENTIAL = ("state:vault.open", "auth:claim:role:admin")
WORDS = ("vault", "admin")  # no part of either name may show
OBSERVER = "auth:claim:role:observer"


def policy_text(denial: str) -> str:
    return (f'confidential = {json.dumps(list(CONFIDENTIAL))}\n'
            '[state.values]\n"vault.open" = false\n'
            f'[tools.echo]\nrequirements = ["state:vault.open", "{OBSERVER}"]\n'
            '[tools.typed]\nrequirements = ["state:vault.open"]\n'
            f'[guard]\ndenial = "{denial}"\n')


def files(tmp_path: Path, denial: str) -> tuple[Path, Path, Path]:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text(denial), encoding="utf-8")
    claims = tmp_path / "claims.json"
    claims.write_text('{"sub": "o", "role": "observer"}', encoding="utf-8")
    return policy, claims, tmp_path / "upstream.jsonl"


def named(text: str) -> list[str]:
    return [word for word in WORDS if word in text]


async def refusal(client: Client, name: str) -> dict[str, Any]:
    """A refused call as the caller receives it: the raw result, or the JSON-RPC error."""
    try:
        return await raw_call(client, name)
    except MCPError as exc:
        return {"message": str(exc), "data": exc.error.data}


@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
@pytest.mark.parametrize("version", VERSIONS)
async def test_no_listing_or_refusal_names_a_confidential_requirement(
        tmp_path: Path, version: str, denial: str) -> None:
    policy, claims, log = files(tmp_path, denial)
    async with gateway_client(policy, log, "--claims", str(claims), mode=VERSIONS[version]) as client:
        assert client.protocol_version == version
        tools = await raw_tools(client)
        refused = {name: await refusal(client, name)
                   for name in ("echo", "typed", "secret", "mirror", "no_such_tool")}
    # Advertised: the rest of each list, on the wire and in the mirror alike.
    for name, shown in (("echo", [OBSERVER]), ("mirror", MIRROR_WIRE)):
        assert tools[name]["execution"]["requirements"] == shown
        assert tools[name]["_meta"][MIRROR_KEY] == shown
    for name in ("typed", "secret"):
        assert "requirements" not in tools[name].get("execution", {})
        assert MIRROR_KEY not in tools[name].get("_meta", {})
    assert named(json.dumps(tools)) == []
    # Refused, each with its confidential requirement counted and not named.
    for name, withheld in (("echo", 1), ("typed", 1), ("secret", 1), ("mirror", 1)):
        got = refused[name]
        payload = (got["data"] if denial == "jsonrpc" else
                   got["_meta"]["io.github.mcp-preconditions/denial"] if name == "typed" else
                   got["structuredContent"])
        assert payload["withheld"] == withheld, (name, got)
        text = got["message"] if denial == "jsonrpc" else got["content"][0]["text"]
        assert named(text) == [] and named(json.dumps(got)) == [], (name, got)
    if denial == "result":  # the tool with an outputSchema carries the payload under _meta only
        assert "structuredContent" not in refused["typed"]
    unlisted = refused["no_such_tool"]
    assert (unlisted["data"] if denial == "jsonrpc" else unlisted["structuredContent"])["error"] \
        == "unlisted_tool"
    assert named(json.dumps(unlisted)) == []
    assert tool_calls(log) == []


async def test_readiness_names_no_confidential_requirement(tmp_path: Path) -> None:
    policy, _claims, log = files(tmp_path, "result")
    async with logging_gateway(policy, log, "--listen", "http://127.0.0.1:0") as gw, \
            gw.http() as http:  # (once the upstream is listed)
        ready = await http.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["servers"]["upstream"]["tools_loaded"] is True
    assert named(ready.text) == []
