"""Confidential requirements never reach a caller (issue 22, item 1): generated policies with
confidential requirements on every hosted adapter (in-process, the SDK's own client, both protocol
versions and both denial forms), the server `mcp-preconditions serve` runs, and the gateway
(requirements from its policy and from its upstream's own declarations). Everything a
caller receives (raw and typed listings, results, errors) is searched for each confidential name,
and every denial's SEP-2643 envelope is read as a client reads it: it must parse, name no
confidential requirement in a hint, and be `undisclosed` when the denial withheld one (SPEC §15).

In-process: `serve`'s server wired as the command wires it for `--transport stdio --claims C` and
reached over the SDK's in-memory streams; the gateway wired from its command line in the test's
loop (tests/fixtures/inprocess.py), its logging upstream in memory. Real processes (interop): one
`serve` over stdio here, and the gateway process in tests/integration/test_gateway_confidential.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_preconditions import Credentials, Guard, Principal, load_policy
from mcp_preconditions.client import DENIAL_META_KEY
from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, AuthorizationDenial, Remediation
from mcp_preconditions.examples_server import build_server
from mcp_preconditions.files import read_claims
from tests.fixtures.gateway_upstream import tool_calls
from tests.fixtures.inprocess import logging_gateway
from tests.fixtures.mcp_servers import CLI, MISSION_POLICY, MODES, ROOT, VERSIONS, raw_tools, server_env
from tests.integration.test_gateway_confidential import CONFIDENTIAL
from tests.integration.test_gateway_confidential import files as gateway_files
from tests.properties.test_advertised_enforced import FLAVOURS, Case, build, cases, expected

from .tally import TALLY

SUITE = "confidential names"


def seen(texts: Iterable[str], confidential: Iterable[str]) -> int:
    """How many times a confidential requirement appears in what a caller received."""
    return sum(text.count(name) for text in texts for name in confidential)


# A denial's `_meta` (the result's, or a JSON-RPC error's `data["_meta"]`) and how many requirements
# it withheld.
Denied = tuple[Any, int]


def envelope_leaks(denials: Iterable[Denied], confidential: Iterable[str]) -> int:
    """Every problem with the envelopes a caller received, as the client side reads them: one that
    does not parse, a confidential name in a hint, and one of a denial that withheld a requirement
    that is not `undisclosed`."""
    names = list(confidential)
    leaks = 0
    for meta, withheld in denials:
        if not isinstance(meta, dict) or AUTHORIZATION_META_KEY not in meta:
            continue
        envelope = AuthorizationDenial.from_meta(meta)
        if envelope is None:
            leaks += 1
            continue
        hints = json.dumps([h.to_dict() for h in envelope.hints])
        leaks += sum(hints.count(name) for name in names)
        leaks += int(withheld > 0 and envelope.remediation is not Remediation.UNDISCLOSED)
    return leaks


def _withheld(payload: Any) -> int:
    count = payload.get("withheld") if isinstance(payload, dict) else None
    return count if isinstance(count, int) else 0


async def received(client: Client, names: Iterable[str], confidential: Iterable[str]
                   ) -> tuple[list[str], int, int]:
    """Every text a caller gets from listing the tools and calling each of `names` (and one name
    the server does not have), as JSON; how many calls were made; and the problems with their
    envelopes (`envelope_leaks`)."""
    texts = [json.dumps(await raw_tools(client.session)),
             (await client.list_tools()).model_dump_json(by_alias=True)]
    calls = 0
    denials: list[Denied] = []
    for name in [*names, "no_such_tool"]:
        calls += 1
        try:
            result = await client.call_tool(name, {})
            texts.append(result.model_dump_json(by_alias=True))
            payload = result.structured_content or (result.meta or {}).get(DENIAL_META_KEY)
            denials.append((result.meta, _withheld(payload)))
        except MCPError as exc:  # a JSON-RPC denial or refusal: its message and data
            texts.append(json.dumps({"message": str(exc), "data": exc.error.data}, default=str))
            data = exc.error.data if isinstance(exc.error.data, dict) else {}
            denials.append((data.get("_meta"), _withheld(data)))
    return texts, calls, envelope_leaks(denials, confidential)


async def hosted_case(case: Case, flavour: str, version: str) -> tuple[int, int, int]:
    """(calls, wrongly allowed, confidential names seen) for one generated case."""
    built = build(case, flavour)
    async with Client(built.target, mode=MODES[version]) as client:
        texts, calls, leaks = await received(client, case.names(), case.confidential)
    # None of the requirements holds; a lowlevel handler answers an unknown name itself.
    wrong = sum(1 for name in built.ran if name in built.runs and expected(case, built, name))
    return calls, wrong, seen(texts, case.confidential) + leaks


DENIALS: tuple[Literal["result", "jsonrpc"], ...] = ("result", "jsonrpc")  # `[guard] denial`


def confidential_cases() -> st.SearchStrategy[Case]:
    return cases().filter(lambda c: bool(c.confidential)).flatmap(
        lambda c: st.sampled_from(DENIALS).map(
            lambda denial: Case(c.registrations, c.policy, c.confidential, denial)))


@settings(max_examples=60, deadline=None)
@given(confidential_cases(), st.sampled_from(FLAVOURS), st.sampled_from(VERSIONS))
def test_no_hosted_adapter_names_a_confidential_requirement(case: Case, flavour: str,
                                                            version: str) -> None:
    calls, wrong, names_seen = asyncio.run(hosted_case(case, flavour, version))
    TALLY.add(SUITE, cases=1, calls=calls, wrongly_allowed=wrong, confidential_seen=names_seen)
    assert (wrong, names_seen) == (0, 0), (flavour, version, case)


MISSION_TOOLS = ["launch_rocket", "abort_launch", "read_telemetry", "schedule_maintenance",
                 "stream_telemetry_v2", "fuel_status", "get_weather"]


def cloudy_policy(directory: Path, denial: str) -> Path:
    """The mission-control policy with its confidential `state:weather.clear` false, so that
    launch_rocket is denied for it alone (withheld 1)."""
    text = MISSION_POLICY.read_text("utf-8").replace('"weather.clear" = true', '"weather.clear" = false')
    path = directory / f"cloudy-{denial}.toml"
    path.write_text(text + f'\n[guard]\ndenial = "{denial}"\n', encoding="utf-8")
    return path


CLAIMS = ROOT / "examples" / "claims" / "mission-control.json"


def serve_stdio(policy: Path) -> StdioServerParameters:
    """`mcp-preconditions serve --transport stdio --claims C` as a subprocess."""
    return StdioServerParameters(command=CLI[0], args=[
        *CLI[1:], "serve", "--policy", str(policy), "--transport", "stdio", "--claims", str(CLAIMS)],
        env=server_env(), cwd=ROOT)


def serve_in_memory(policy: Path) -> Any:
    """The server `serve --policy P --transport stdio --claims C` runs (cli/server_cmds.py: the
    caller fixed by the claims, near misses refused at start), for the SDK's in-memory client."""
    fixed = Credentials(principal=Principal.from_claims(read_claims(str(CLAIMS))))
    server = build_server(Guard(load_policy(policy)), credentials=lambda _request: fixed)
    server.know_tools()
    return server


async def serve_case(target: Any, version: str) -> None:
    """Every mission-control tool listed and called, then `launch_rocket` (denied for its
    confidential requirement alone): counted, nothing wrongly allowed, no name seen."""
    async with Client(target, mode=MODES[version]) as client:
        texts, calls, leaks = await received(client, MISSION_TOOLS, ["state:weather.clear"])
        try:
            launched: Any = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
            texts.append(launched.model_dump_json(by_alias=True))
            wrong = int(not launched.is_error)  # the weather is not clear: never launched
            withheld = launched.structured_content["withheld"]
        except MCPError as exc:
            texts.append(json.dumps({"message": str(exc), "data": exc.error.data}, default=str))
            wrong, withheld = 0, exc.error.data["withheld"]
    names_seen = seen(texts, ["state:weather.clear", "weather.clear"]) + leaks
    TALLY.add(SUITE, cases=1, calls=calls + 1, wrongly_allowed=wrong, confidential_seen=names_seen)
    assert withheld == 1  # enforced, and counted
    assert (wrong, names_seen) == (0, 0)


@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
@pytest.mark.parametrize("version", VERSIONS)
async def test_serve_never_names_a_confidential_requirement(tmp_path: Path, version: str,
                                                            denial: str) -> None:
    await serve_case(serve_in_memory(cloudy_policy(tmp_path, denial)), version)


@pytest.mark.interop
async def test_serve_over_stdio_never_names_a_confidential_requirement(tmp_path: Path) -> None:
    """Interop: the `serve` process, its stdio transport and its command line, end to end (the
    in-process cases above hold the rest of the table)."""
    await serve_case(serve_stdio(cloudy_policy(tmp_path, "jsonrpc")), "2026-07-28")


@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
@pytest.mark.parametrize("version", VERSIONS)
async def test_the_gateway_never_names_a_confidential_requirement(
        tmp_path: Path, version: str, denial: str) -> None:
    policy, claims, log = gateway_files(tmp_path, denial)
    async with logging_gateway(policy, log, "--claims", str(claims)) as gw, \
            gw.client(MODES[version]) as client:  # type: ignore[arg-type]
        texts, calls, leaks = await received(client, ["echo", "typed", "secret", "mirror"],
                                             CONFIDENTIAL)
    wrong = len(tool_calls(log))  # each is denied: none may reach the upstream
    names_seen = seen(texts, CONFIDENTIAL) + leaks
    TALLY.add(SUITE, cases=1, calls=calls, wrongly_allowed=wrong, confidential_seen=names_seen)
    assert (wrong, names_seen) == (0, 0)
