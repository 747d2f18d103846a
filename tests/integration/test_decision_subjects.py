"""Every decision names its caller (issue 22, item 9), through `mcp-preconditions serve`'s server: a
call to a tool without requirements (`get_weather`) is recorded with the subject of a verified
token (verified on that first call, then cached) over HTTP, and of `--claims` over stdio.

Over HTTP in-process: the server `serve` builds (examples_server.build_server, its app wrapped in
the sign-in challenge as `serve --transport http` does) on the streaming bridge in the test's event
loop, a fresh one for each run (nothing cached), verifying the tokens of a JWT issuer in the test's
process (tests/fixtures/jwt_issuer.py, its JWKS fetched over a socket of that loop); the records are
the decision logger's. Over stdio it stays a real `serve` process (interop): the records are what
that process writes on its stderr, for the caller its `--claims` file names.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jwt
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.examples_server import build_server
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.step_up import SignInChallenge
from mcp_preconditions.policy.load import load_policy
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.inprocess import BASE_URL, LogLines, asgi_served
from tests.fixtures.jwt_issuer import JwtIssuer
from tests.fixtures.mcp_servers import CLI, MISSION_POLICY, ROOT, server_env
from tests.fixtures.oidc import AUDIENCE

IN_PROCESS = pytest.mark.asyncio(loop_scope="module")  # one event loop for the module's servers

DECISION = "mcp_preconditions.decisions: "
CALLER = {"sub": "mission-control", "role": "mission_control", "scope": "mission:read"}


def decisions(output: str) -> list[dict[str, Any]]:
    """The decision records a server wrote, in order."""
    return [json.loads(line.split(DECISION, 1)[1]) for line in output.splitlines() if DECISION in line]


def subject_of(token: str) -> str:
    claims = jwt.decode(token, options={"verify_signature": False})
    return str(claims.get("sub") or claims["client_id"])


def issuer_policy(directory: Path, issuer: JwtIssuer, jwks_uri: str, extra: str = "") -> Path:
    """policies/mission-control.toml, verifying the issuer's JWTs ([auth] issuer, audience, JWKS)."""
    text = MISSION_POLICY.read_text(encoding="utf-8")
    auth = f'[auth]\nissuer = "{issuer.name}"\naudience = "{AUDIENCE}"\njwks_uri = "{jwks_uri}"\n'
    path = directory / "mission-control-jwt.toml"
    path.write_text(text.replace("[auth]\n", auth, 1) + extra, encoding="utf-8")
    return path


@asynccontextmanager
async def recorded() -> AsyncIterator[LogLines]:
    """The decision records made while the block runs (the logger at INFO, as `serve` sets it)."""
    logger, lines = logging.getLogger("mcp_preconditions.decisions"), LogLines()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(lines)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


async def weather_records(policy: Path, token: str) -> list[tuple[str | None, bool, list[str]]]:
    """`get_weather` called over HTTP on a fresh server with `token` twice, a forged copy of it and
    none: (subject, allowed, unmet) of each call's decision record."""
    server = build_server(Guard(load_policy(policy)))  # fresh: nothing cached
    app = SignInChallenge(server.streamable_http_app(host="127.0.0.1"), server.preconditions,
                          f"{BASE_URL}/mcp")
    async with recorded() as lines, AsgiBridge(app, base_url=BASE_URL) as bridge:
        for sent in (token, token, token[:-4] + "AAAA", None):
            http = bridge.httpx2(headers={"Authorization": f"Bearer {sent}"} if sent else {})
            async with Client(streamable_http_client(f"{BASE_URL}/mcp", http_client=http),
                              mode="legacy") as client:
                weather = await client.call_tool("get_weather", {})
                assert weather.is_error is False
        output = "\n".join(lines.lines)
    return [(r["subject"], r["allowed"], r["unmet"]) for r in decisions(output)
            if r["tool"] == "get_weather"]


@IN_PROCESS
async def test_open_tool_calls_over_http_name_the_verified_caller(tmp_path: Path) -> None:
    issuer = JwtIssuer()
    token = issuer.token(CALLER, audience=AUDIENCE)
    async with asgi_served(issuer) as keys:
        records = await weather_records(issuer_policy(tmp_path, issuer, f"{keys}/jwks"), token)
    # First call: the token is verified to name its caller; second: the cached answer; a forged
    # token and no token: no caller known, and the open tool runs all the same.
    assert records == [(subject_of(token), True, []), (subject_of(token), True, []),
                       (None, True, []), (None, True, [])]
    assert issuer.fetched == 1  # verified once, then cached (the forged token: the cached keys)


@pytest.mark.interop
@pytest.mark.asyncio
async def test_open_tool_calls_over_stdio_name_the_claims_caller(tmp_path: Path) -> None:
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


@IN_PROCESS
async def test_a_call_decided_by_static_requirements_names_the_verified_caller(
        tmp_path: Path) -> None:
    """Issue 29, item 2: a tool whose requirements are all static (`env:`) is decided without the
    caller, but its record names the caller whose token was verified, allowed calls included."""
    issuer = JwtIssuer()
    token = issuer.token(CALLER, audience=AUDIENCE)
    async with asgi_served(issuer) as keys:
        policy = issuer_policy(tmp_path, issuer, f"{keys}/jwks",
                               '\n[tools.get_weather]\nrequirements = ["env:production"]\n')
        records = await weather_records(policy, token)
    assert records == [(subject_of(token), True, []), (subject_of(token), True, []),
                       (None, True, []), (None, True, [])]
