"""The MCP conformance suite (npm @modelcontextprotocol/conformance 0.1.16, on the npm Node 22 it needs)
against npm server-everything 2026.8.31 alone, through `mcp-preconditions gateway` with no
requirements (alone, and beside another server behind one gateway.toml), and through fastmcp 4.1.2's
`create_proxy`. The gateway may lose no check that passes alone.

A check is one result line of checks.json; a scenario passes when all its checks do. Most scenarios need
fixture tools that server-everything lacks, so alone it passes 13 checks (11 scenarios).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.fleet import clock, fleet_http, write_gateway_toml
from tests.fixtures.upstreams import (
    NODE_BIN,
    Listening,
    everything_stdio,
    fastmcp_proxy_http,
    gateway_http,
)

pytestmark = pytest.mark.integration

Results = dict[tuple[str, str], str]  # (scenario, check id) -> SUCCESS / FAILURE / ...
ALONE_PASSING = 13  # checks server-everything 2026.8.31 passes on its own (the suite's summary line)
FASTMCP_LOSES = {("resources-subscribe", "resources-subscribe"),
                 ("resources-unsubscribe", "resources-unsubscribe")}
_RUN_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")


def conformance(url: str, out: Path) -> Results:
    """Run every active server scenario against `url`; the status of each check."""
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}"}
    node = subprocess.run(["node", "--version"], env=env, capture_output=True, text=True, check=False)
    if not node.stdout.startswith("v22."):
        pytest.fail(f"the conformance suite needs the npm Node 22 in {NODE_BIN}, found "
                    f"{node.stdout.strip() or node.stderr.strip()}: run `make install`", pytrace=False)
    done = subprocess.run(["conformance", "server", "--url", url, "-o", str(out)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    results: Results = {}
    for checks in sorted(out.glob("server-*/checks.json")):
        found = _RUN_DIR.match(checks.parent.name)
        assert found, f"unexpected conformance output directory {checks.parent.name}"
        for check in json.loads(checks.read_text(encoding="utf-8")):
            results[(found["scenario"], check["id"])] = check["status"]
    assert results, (f"the conformance suite wrote no results (exit {done.returncode}):\n"
                     f"{done.stdout}\n{done.stderr}")
    return results


def passing(results: Results) -> set[tuple[str, str]]:
    return {key for key, status in results.items() if status == "SUCCESS"}


def scenarios_passing(results: Results) -> set[str]:
    scenarios = {scenario for scenario, _ in results}
    return {s for s in scenarios if all(v == "SUCCESS" for (sc, _), v in results.items() if sc == s)}


def counts(name: str, results: Results) -> str:
    line = (f"{name}: {len(passing(results))} of {len(results)} checks, "
            f"{len(scenarios_passing(results))} of {len({s for s, _ in results})} scenarios")
    print(line)
    return line


@pytest.fixture(scope="module")
def alone(everything_http_server: Listening, tmp_path_factory: pytest.TempPathFactory) -> Results:
    results = conformance(everything_http_server.url, tmp_path_factory.mktemp("conformance-alone"))
    counts("server-everything alone", results)
    assert len(passing(results)) == ALONE_PASSING, sorted(passing(results))
    return results


@pytest.mark.parametrize("upstream", ["stdio", "http"])
def test_the_gateway_loses_no_conformance_check(
        alone: Results, everything_http_server: Listening, open_policy: Path, tmp_path: Path,
        upstream: str) -> None:
    stdio = everything_stdio() if upstream == "stdio" else ()
    url = everything_http_server.url if upstream == "http" else None
    with gateway_http(open_policy, stdio, upstream_url=url) as gateway:
        through = conformance(gateway.url, tmp_path)
    summary = [counts("server-everything alone", alone),
               counts(f"through the gateway ({upstream} upstream)", through)]
    print(f"passing through the gateway only: {sorted(passing(through) - passing(alone))}")
    lost = sorted(passing(alone) - passing(through))
    assert lost == [], f"lost through the gateway: {lost}\n" + "\n".join(summary)


def test_a_many_server_gateway_loses_no_conformance_check(
        alone: Results, everything_http_server: Listening, open_policy: Path, tmp_path: Path) -> None:
    """SPEC §12: server-everything with `prefix = ""` beside another server (PyPI mcp-server-time,
    under `time__`, which serves tools and declares resources and prompts) behind one gateway.toml.
    The suite subscribes to a URI nobody lists: it goes to the one server that takes subscriptions."""
    config = write_gateway_toml(tmp_path / "gateway.toml", open_policy, {
        "everything": {"url": everything_http_server.url, "prefix": ""}, "time": clock()})
    with fleet_http(config) as gateway:
        through = conformance(gateway.url, tmp_path / "results")
    summary = [counts("server-everything alone", alone), counts("many-server gateway", through)]
    lost = sorted(passing(alone) - passing(through))
    assert lost == [], f"lost behind a many-server gateway: {lost}\n" + "\n".join(summary)
    assert scenarios_passing(alone) <= scenarios_passing(through)


def test_fastmcp_create_proxy_loses_resource_subscriptions(alone: Results, tmp_path: Path) -> None:
    """The baseline in docs/gateway-conformance.md: fastmcp's proxy, stdio upstream, HTTP listener."""
    with fastmcp_proxy_http(everything_stdio()) as proxy:
        through = conformance(proxy.url, tmp_path)
    counts("through fastmcp create_proxy", through)
    assert passing(alone) - passing(through) == FASTMCP_LOSES
    assert len(passing(through)) == ALONE_PASSING - len(FASTMCP_LOSES)
