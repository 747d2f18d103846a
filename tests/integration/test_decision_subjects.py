"""Every decision names its caller (issue 22, item 9), through `mcp-preconditions serve` as a real
subprocess: a call to a tool without requirements (`get_weather`) is recorded with the subject of a
real OIDC token (verified on that first call, then cached) over HTTP, and of `--claims` over stdio.
"""

from __future__ import annotations

import json
from typing import Any

import jwt
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.mcp_servers import (
    CLI,
    MISSION_POLICY,
    ROOT,
    bearer,
    oidc_policy,
    serve_http,
    server_env,
)
from tests.fixtures.oidc import OidcServer

pytestmark = pytest.mark.integration

DECISION = "mcp_preconditions.decisions: "


def decisions(output: str) -> list[dict[str, Any]]:
    """The decision records a server wrote on stderr, in order."""
    return [json.loads(line.split(DECISION, 1)[1]) for line in output.splitlines() if DECISION in line]


def subject_of(token: str) -> str:
    claims = jwt.decode(token, options={"verify_signature": False})
    return str(claims.get("sub") or claims["client_id"])


async def weather_records(policy: Any, token: str) -> list[tuple[str | None, bool, list[str]]]:
    """`get_weather` called over HTTP by a fresh `serve` process with `token` twice, a forged copy
    of it and none: (subject, allowed, unmet) of each call's decision record."""
    with serve_http(policy) as server:  # a fresh process: nothing cached
        for sent in (token, token, token[:-4] + "AAAA", None):
            async with Client(streamable_http_client(server.url, http_client=bearer(sent)),
                              mode="legacy") as client:
                weather = await client.call_tool("get_weather", {})
                assert weather.is_error is False
        return [(r["subject"], r["allowed"], r["unmet"]) for r in decisions(server.output())
                if r["tool"] == "get_weather"]


async def test_open_tool_calls_over_http_name_the_verified_caller(
        oidc_server: OidcServer, tmp_path: Any) -> None:
    token = oidc_server.token()
    # First call: the token is verified to name its caller; second: the cached answer; a forged
    # token and no token: no caller known, and the open tool runs all the same.
    assert await weather_records(oidc_policy(tmp_path, oidc_server), token) == [
        (subject_of(token), True, []), (subject_of(token), True, []), (None, True, []),
        (None, True, [])]


async def test_open_tool_calls_over_stdio_name_the_claims_caller(tmp_path: Any) -> None:
    claims = ROOT / "examples" / "claims" / "mission-control.json"
    log = tmp_path / "stderr.log"
    params = StdioServerParameters(command=CLI[0], args=[
        *CLI[1:], "serve", "--policy", str(MISSION_POLICY), "--transport", "stdio",
        "--claims", str(claims)], env=server_env(), cwd=ROOT)
    with log.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await client.call_tool("get_weather", {})
            await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
    records = decisions(log.read_text(encoding="utf-8"))
    subject = json.loads(claims.read_text(encoding="utf-8"))["sub"]
    assert [(r["tool"], r["subject"], r["allowed"]) for r in records] == [
        ("get_weather", subject, True), ("launch_rocket", subject, True)]


async def test_a_call_decided_by_static_requirements_names_the_verified_caller(
        oidc_server: OidcServer, tmp_path: Any) -> None:
    """Issue 29, item 2: a tool whose requirements are all static (`env:`) is decided without the
    caller, but its record names the caller whose token was verified, allowed calls included."""
    token = oidc_server.token()
    policy = oidc_policy(tmp_path, oidc_server,
                         extra='\n[tools.get_weather]\nrequirements = ["env:production"]\n')
    assert await weather_records(policy, token) == [
        (subject_of(token), True, []), (subject_of(token), True, []), (None, True, []),
        (None, True, [])]
