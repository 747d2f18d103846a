"""The explorer page's decisions equal `check --format json` for random policies, callers, tools and
arguments: the page's JSON endpoints asked over real HTTP (uvicorn on 127.0.0.1, httpx) against the
command line run on the same files. Tools may have quotas: a call refused for another requirement
asks none, and both list its quotas as `not_asked`.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_preconditions.cli import main
from mcp_preconditions.explore import Inputs, Workbench, build_app
from mcp_preconditions.explore.access import new_token
from tests.properties.reference import World
from tests.properties.test_argument_props import argument_worlds
from tests.properties.test_guard_props import TOOLS, requirement

SETTINGS = settings(max_examples=100, deadline=None)
TOKEN = new_token()
HEADERS = {"x-explore-token": TOKEN}
QUOTAS = ["quota:q1", "quota:q2"]


class Swappable:
    """One server for every example: each example puts its own explorer app behind it."""

    app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Swappable, str]]:
    holder = Swappable()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(holder, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield holder, f"http://127.0.0.1:{sock.getsockname()[1]}/"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def toml(value: Any) -> str:
    """A TOML value: the generated policies hold strings, integers, booleans, arrays and tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return json.dumps(value)  # JSON's escapes of these strings (BMP only) are TOML's
    if isinstance(value, list):
        return "[" + ", ".join(map(toml, value)) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"


def policy_text(w: World, policy_tools: dict[str, list[str]]) -> str:
    data = {
        "environment": sorted(w.labels),
        "environment_variable": "MCP_PRECONDITIONS_TEST_UNSET_VARIABLE",
        "features": {"flags": w.flags},
        "state": {"values": w.state},
        "capabilities": {"grants": [{"capabilities": g[0], "when": g[1],
                                     **({"arguments": g[2]} if len(g) > 2 else {})} for g in w.grants],
                         **({"claim": w.capability_claim} if w.capability_claim else {})},
        "auth": {"claim_aliases": w.aliases, "scope_implications": w.implications},
        "tools": {name: {"requirements": reqs} for name, reqs in policy_tools.items()},
        "quotas": {q.removeprefix("quota:"): {"calls": 1, "per_seconds": 60} for q in QUOTAS},
        "confidential": sorted({r for reqs in policy_tools.values() for r in reqs[:1]}),
    }
    return "".join(f"{json.dumps(key)} = {toml(value)}\n" for key, value in data.items())


def check_json(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["check", *args, "--format", "json"])
    assert code == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


tool_lists = st.dictionaries(st.sampled_from(TOOLS), st.lists(requirement(QUOTAS), max_size=4),
                             min_size=1)


@SETTINGS
@given(w=argument_worlds(), code=tool_lists, policy_tools=st.dictionaries(
    st.sampled_from(TOOLS), st.lists(requirement(QUOTAS), max_size=3)), data=st.data())
def test_the_page_decides_as_check(served: tuple[Swappable, str], tmp_path_factory: pytest.TempPathFactory,
                                   w: World, code: dict[str, list[str]],
                                   policy_tools: dict[str, list[str]], data: st.DataObject) -> None:
    holder, url = served
    folder = tmp_path_factory.mktemp("example")
    policy, tools, claims = folder / "policy.toml", folder / "tools.json", folder / "claims.json"
    text = policy_text(w, policy_tools)
    policy.write_text(text, encoding="utf-8")
    listed = [{"name": n, "execution": {"requirements": r}} for n, r in code.items()]
    tools.write_text(json.dumps({"tools": listed}), encoding="utf-8")
    caller = [] if w.claims is None else ["--claims", str(claims)]
    claims.write_text(json.dumps(w.claims), encoding="utf-8")
    holder.app = build_app(Workbench(Inputs(str(policy), text, listed, str(tools))), TOKEN)
    asked = {"policy": text, "claims": "" if w.claims is None else json.dumps(w.claims)}

    page = httpx.post(url + "api/decisions", json=asked, headers=HEADERS, timeout=10).json()
    expected = check_json("--policy", str(policy), "--tools", str(tools), *caller)
    assert [{k: t[k] for k in ("name", "allowed", "unmet", "errors")} for t in page["tools"]] \
        == expected["tools"]

    tool = data.draw(st.sampled_from(list(code)))
    arguments = json.dumps(w.arguments)
    call = httpx.post(url + "api/call", json={**asked, "tool": tool, "arguments": arguments},
                      headers=HEADERS, timeout=10).json()["call"]["decision"]
    expected = check_json("--policy", str(policy), "--tools", str(tools), *caller, "--tool", tool,
                          "--arguments", arguments)["tools"][0]
    assert (call["allowed"], call["unmet"], call["errors"]) == (
        expected["allowed"], expected["unmet"], expected["errors"])
    assert [{k: o[k] for k in ("requirement", "status", "reason")} for o in call["outcomes"]] == \
        [{k: o[k] for k in ("requirement", "status", "reason")} for o in expected["outcomes"]]
    # Every requirement is listed, with an outcome or not asked. Every quota has room (a fresh
    # store): a quota is not asked exactly when the call is refused.
    assert {o["requirement"] for o in call["outcomes"]} == {*code[tool], *policy_tools.get(tool, [])}
    assert all((o["status"] == "not_asked") == (o["requirement"] in QUOTAS and not call["allowed"])
               for o in call["outcomes"])
    confidential = set(page["tools"] and [r for t in policy_tools.values() for r in t[:1]])
    assert all(o["confidential"] == (o["requirement"] in confidential) for o in call["outcomes"])
