"""A real Prometheus scrapes `mcp-preconditions gateway` in front of two servers (tests/fixtures/
gateway_upstream.py, `alpha` over stdio and `beta` over streamable HTTP) during scripted runs: PromQL
through its HTTP API gives the exact allowed and denied calls per server and tool, the unmet
requirements (the confidential one as `(withheld)`) and the exhausted quota; 1,000 random tool names
add no series; `upstream_up` and `upstream_restarts_total` follow a killed server; a broken policy
reload counts a failure and the shipped alert fires. A stdio gateway serves `--metrics-listen`.
"""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from mcp_preconditions.cli import main
from tests.fixtures.gateway_upstream import (
    CLI,
    ROOT,
    UPSTREAM_STDIO,
    Process,
    gateway_http,
    upstream_env,
    upstream_http,
)
from tests.fixtures.ports import free_port
from tests.fixtures.prometheus import Prometheus, Step, prometheus, scripted_calls
from tests.integration.test_metrics_prometheus import _call_names, random_name

pytestmark = pytest.mark.integration

ALERTS = ROOT / "examples" / "prometheus" / "alerts.yml"
POLICY = """
environment = ["production"]
confidential = ["env:staging"]
[quotas.q]
calls = 2
per_seconds = 3600
by = "global"
[tools.alpha__echo]
requirements = ["env:production"]
[tools.alpha__slow]
requirements = ["env:staging"]
[tools.beta__echo]
requirements = ["quota:q"]
[tools.beta__env]
requirements = ["env:production"]
"""
SCRIPT: list[Step] = [
    ("alpha__echo", {}, None, 3),               # allowed
    ("alpha__slow", {"seconds": 0}, None, 2),   # denied: env:staging, confidential
    ("alpha__secret", {}, None, 1),             # denied: the server's own auth:claim:role:admin
    ("beta__echo", {}, None, 5),                # 2 allowed, then the quota is exhausted
    ("beta__env", {}, None, 2),                 # allowed
]
SEEN = {("alpha__echo", "allowed"): 3, ("alpha__slow", "denied"): 2, ("alpha__secret", "denied"): 1,
        ("beta__echo", "allowed"): 2, ("beta__echo", "denied"): 3, ("beta__env", "allowed"): 2}
COUNTED = {("alpha", tool, result): n for (tool, result), n in SEEN.items() if tool.startswith("alpha")}
COUNTED |= {("beta", tool, result): n for (tool, result), n in SEEN.items() if tool.startswith("beta")}
WAIT_SECONDS = 60.0


def files(tmp: Path, beta_url: str) -> tuple[Path, Path]:
    """The policy and a desktop-style servers file: `alpha` over stdio, `beta` at `beta_url`."""
    policy, servers = tmp / "policy.toml", tmp / "servers.json"
    policy.write_text(POLICY, encoding="utf-8")
    servers.write_text(json.dumps({"mcpServers": {
        "alpha": {"command": UPSTREAM_STDIO[0], "args": UPSTREAM_STDIO[1:]},
        "beta": {"url": beta_url}}}), encoding="utf-8")
    return policy, servers


@contextmanager
def two_servers(tmp: Path, *options: str) -> Iterator[tuple[Process, Process, Prometheus]]:
    """`beta` over HTTP, an HTTP gateway in front of it and `alpha`, both servers connected, and a
    Prometheus scraping the gateway (job `gw`) with the shipped alerting rules loaded."""
    with upstream_http(tmp / "beta.jsonl") as beta:
        policy, servers = files(tmp, beta.url)
        with gateway_http(policy, tmp / "alpha.jsonl", "--servers", str(servers), *options) as gw, \
                prometheus({"gw": gw.url + "/metrics"}, [ALERTS]) as prom:
            until(lambda: httpx.get(gw.url + "/readyz", timeout=30).json()["status"], "ready",
                  gw.output)
            yield beta, gw, prom


def until(read: Callable[[], Any], expected: Any, output: Callable[[], str] = lambda: "") -> Any:
    """Read until it gives `expected` (the machine is shared: no fixed sleeps)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while (found := read()) != expected:
        assert time.monotonic() < deadline, f"{found!r} != {expected!r}\n{output()}"
        time.sleep(0.2)
    return found


def nonzero(prom: Prometheus, promql: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {k: v for k, v in prom.values(promql, *labels).items() if v}


def test_prometheus_counts_each_servers_calls_exactly_and_random_names_add_no_series(
        tmp_path: Path) -> None:
    with two_servers(tmp_path) as (_beta, gw, prom):
        seen = anyio.run(scripted_calls, gw.url + "/mcp", SCRIPT)
        prom.scraped_after(time.time(), "gw")
        counts = nonzero(prom, 'sum by (server, tool, result) (mcp_preconditions_decisions_total'
                               '{job="gw"})', "server", "tool", "result")
        unmet = nonzero(prom, "mcp_preconditions_unmet_total", "requirement")
        quota = prom.values("mcp_preconditions_quota_exhausted_total", "quota")
        upstream = prom.values("mcp_preconditions_upstream_seconds_count", "server")
        up = prom.values("mcp_preconditions_upstream_up", "server")
        listed_zero = prom.values('mcp_preconditions_decisions_total{tool="beta__env"}', "result")

        series = 'count({__name__=~"mcp_preconditions_.+", job="gw"})'
        before = prom.values(series)
        rng = random.Random(2424)
        names = [random_name(rng) for _ in range(1000)]
        anyio.run(_call_names, gw.url + "/mcp", names)
        prom.scraped_after(time.time(), "gw")
        after = prom.values(series)
        unlisted = nonzero(prom, 'mcp_preconditions_decisions_total{result="unlisted"}', "server",
                           "tool")
        text = httpx.get(gw.url + "/metrics", timeout=30).text
    assert seen == SEEN  # what the client saw ...
    assert counts == COUNTED  # ... is what Prometheus counted, per server and tool
    assert unmet == {("(withheld)",): 2, ("auth:claim:role:admin",): 1, ("quota:q",): 3}
    assert quota == {("q",): 3}
    assert upstream == {("alpha",): 3, ("beta",): 4}  # the allowed calls, each timed
    assert up == {("alpha",): 1, ("beta",): 1}
    assert listed_zero == {("allowed",): 2, ("denied",): 0, ("error",): 0}
    assert before == after and before[()] > 40
    assert unlisted == {("(none)", "(unlisted)"): 1000}  # no server lists them: one series
    assert "staging" not in text  # the confidential requirement is never named


def test_upstream_up_and_restarts_follow_killed_servers(tmp_path: Path) -> None:
    with two_servers(tmp_path) as (beta, gw, prom):
        up = 'mcp_preconditions_upstream_up{job="gw"}'
        restarts = 'mcp_preconditions_upstream_restarts_total{job="gw"}'
        until(lambda: prom.values(up, "server"), {("alpha",): 1, ("beta",): 1})
        assert prom.values(restarts, "server") == {("alpha",): 0, ("beta",): 0}

        crashed = anyio.run(_call, gw.url + "/mcp", "alpha__crash")  # the stdio server exits
        assert crashed["isError"] is True
        until(lambda: prom.values(restarts, "server"), {("alpha",): 1, ("beta",): 0}, gw.output)
        until(lambda: prom.values(up, "server"), {("alpha",): 1, ("beta",): 1}, gw.output)

        port = int(beta.url.split(":")[2].split("/")[0])
        beta.stop()  # the HTTP server goes away; the next request (or /readyz) finds out
        httpx.get(gw.url + "/readyz", timeout=30)
        until(lambda: prom.values(up, "server"), {("alpha",): 1, ("beta",): 0}, gw.output)
        pending = until(lambda: prom.values('ALERTS{alertname="MCPPreconditionsUpstreamDown"}',
                                            "server", "alertstate"), {("beta", "pending"): 1})
        with upstream_http(tmp_path / "beta.jsonl", port):
            until(lambda: prom.values(up, "server"), {("alpha",): 1, ("beta",): 1}, gw.output)
            again = prom.values(restarts, "server")
            answer = anyio.run(_call, gw.url + "/mcp", "beta__env")
    assert pending == {("beta", "pending"): 1}  # `for: 1m`: it would fire if beta stayed down
    assert again[("alpha",)] == 1
    assert again[("beta",)] >= 1  # each attempt while it was down is a restart
    assert answer["isError"] is False


async def _call(url: str, tool: str) -> dict[str, Any]:
    async with Client(url, mode="legacy") as client:
        result = await client.call_tool(tool, {})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def test_a_broken_policy_reload_counts_a_failure_and_the_alert_fires(tmp_path: Path) -> None:
    with two_servers(tmp_path, "--policy-poll-seconds", "0.2") as (_beta, gw, prom):
        revision = re.search(r"revision (\w+)", gw.output())
        assert revision is not None
        info = "mcp_preconditions_policy_info == 1"
        reloads = "mcp_preconditions_policy_reloads_total"
        until(lambda: prom.values(reloads, "result"), {("success",): 0, ("failure",): 0,
                                                         ("unusable",): 0})
        (tmp_path / "policy.toml").write_text(POLICY + "[tools.alpha__echo\n", encoding="utf-8")
        firing = until(lambda: prom.values('ALERTS{alertname="MCPPreconditionsPolicyReloadFailing"}',
                                           "alertstate", "job"), {("firing", "gw"): 1}, gw.output)
        failed = prom.values(reloads, "result")
        kept = prom.values(info, "revision")
        still = anyio.run(_call, gw.url + "/mcp", "alpha__echo")
    assert firing == {("firing", "gw"): 1}
    assert failed[("success",)] == 0 and failed[("failure",)] >= 1  # retried at every poll
    assert kept == {(revision.group(1),): 1}  # the old policy stays in force
    assert still["isError"] is False


def test_a_stdio_gateway_serves_its_metrics_on_their_own_listener(tmp_path: Path) -> None:
    metrics_port = free_port()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with upstream_http(tmp_path / "beta.jsonl") as beta, \
            prometheus({"stdio": url}) as prom:
        policy, servers = files(tmp_path, beta.url)
        params = StdioServerParameters(
            command=CLI[0], args=[*CLI[1:], "gateway", "--policy", str(policy), "--servers",
                                  str(servers), "--metrics-listen", f"http://127.0.0.1:{metrics_port}"],
            env=upstream_env(tmp_path / "alpha.jsonl"), cwd=ROOT)
        seen, counts, elsewhere = anyio.run(_stdio_script, params, url, prom)
    assert seen == SEEN
    assert counts == COUNTED
    assert elsewhere == 404


async def _stdio_script(params: StdioServerParameters, url: str, prom: Prometheus
                        ) -> tuple[dict[Any, int], dict[tuple[str, ...], float], int]:
    """The script through the stdio gateway, and what Prometheus scraped while it still runs."""
    seen: dict[Any, int] = {}
    async with Client(params, mode="legacy") as client:
        for tool in ("alpha__echo", "beta__env"):  # both servers listed before the script runs
            await _until_listed(client, tool)
        for tool, arguments, _token, times in SCRIPT:
            for _ in range(times):
                result = await client.call_tool(tool, arguments)
                key = (tool, "denied" if result.is_error else "allowed")
                seen[key] = seen.get(key, 0) + 1
        await anyio.to_thread.run_sync(prom.scraped_after, time.time(), "stdio")
        counts = nonzero(prom, 'sum by (server, tool, result) (mcp_preconditions_decisions_total'
                               '{job="stdio"})', "server", "tool", "result")
        async with httpx.AsyncClient(timeout=30) as http:
            elsewhere = (await http.get(url.removesuffix("/metrics") + "/mcp")).status_code
    return seen, counts, elsewhere


async def _until_listed(client: Client, tool: str) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        while tool not in {t.name for t in (await client.list_tools()).tools}:
            await anyio.sleep(0.2)


def test_metrics_listen_moves_metrics_off_the_http_listener(tmp_path: Path) -> None:
    with upstream_http(tmp_path / "beta.jsonl") as beta:
        policy, servers = files(tmp_path, beta.url)
        with gateway_http(policy, tmp_path / "alpha.jsonl", "--servers", str(servers),
                          "--metrics-listen", "http://127.0.0.1:0") as gw:
            own = until(lambda: bool(re.search(r"metrics on (\S+)", gw.output())), True, gw.output)
            found = re.search(r"metrics on (\S+)", gw.output())
            assert own and found is not None
            main_listener = httpx.get(gw.url + "/metrics", timeout=30).status_code
            page = httpx.get(found.group(1), timeout=30).text
    assert main_listener == 404
    assert 'mcp_preconditions_upstream_up{server="beta"}' in page


@pytest.mark.parametrize(("value", "message"), [
    ("127.0.0.1:9100", "--metrics-listen: expected 'http://HOST:PORT', got '127.0.0.1:9100'"),
    ("http://127.0.0.1:70000", "--metrics-listen: port out of range (0-65535): 70000"),
])
def test_a_bad_metrics_listen_is_one_line(value: str, message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    assert main(["gateway", "--policy", str(policy), "--metrics-listen", value, "--",
                 *UPSTREAM_STDIO]) == 2
    assert capsys.readouterr().err == f"mcp-preconditions: error: {message}\n"


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    with _bound() as port:
        done = subprocess.run([*CLI, "gateway", "--policy", str(policy), "--listen",
                               f"http://127.0.0.1:{free_port()}", "--metrics-listen",
                               f"http://127.0.0.1:{port}", "--", *UPSTREAM_STDIO],
                              capture_output=True, text=True, env=upstream_env(tmp_path / "u.jsonl"),
                              cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr == (f"mcp-preconditions: error: --metrics-listen: cannot listen on "
                           f"127.0.0.1:{port}: Address already in use\n")


@contextmanager
def _bound() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_metrics_need_no_token_where_mcp_does(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY + '[auth]\nissuer = "https://issuer.example"\naudience = "mcp"\n'
                      'jwks_uri = "https://issuer.example/jwks"\n', encoding="utf-8")
    with gateway_http(policy, tmp_path / "u.jsonl") as gw:
        mcp = httpx.post(gw.url + "/mcp", json={}, timeout=30)
        page = httpx.get(gw.url + "/metrics", timeout=30)
    assert mcp.status_code == 401
    assert page.status_code == 200
    assert "mcp_preconditions_upstream_up" in page.text
    assert "issuer.example" not in page.text and "Bearer" not in page.text


def test_a_reload_that_leaves_a_server_unusable_counts_as_unusable_not_success(
        tmp_path: Path) -> None:
    """A near miss of a server's tool (`[tools.Echo]` for `echo`) swaps in, but every call to that
    server is refused: the reload is `unusable`. Fixing it again is a `success`."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.echo]\nrequirements = []\n', encoding="utf-8")
    counts = 'mcp_preconditions_policy_reloads_total{result="%s"} %s'
    with gateway_http(policy, tmp_path / "u.jsonl", "--policy-poll-seconds", "0.2", "--",
                      *UPSTREAM_STDIO, wait="/readyz") as gw:
        until(lambda: httpx.get(gw.url + "/readyz", timeout=30).status_code, 200, gw.output)
        policy.write_text('[tools.Echo]\nrequirements = []\n', encoding="utf-8")
        until(lambda: counts % ("unusable", "1.0") in httpx.get(gw.url + "/metrics", timeout=30).text, True,
              gw.output)
        unusable = httpx.get(gw.url + "/readyz", timeout=30)
        refused = anyio.run(_call, gw.url + "/mcp", "echo")
        policy.write_text('[tools.echo]\nrequirements = []\n', encoding="utf-8")
        until(lambda: counts % ("success", "1.0") in httpx.get(gw.url + "/metrics", timeout=30).text, True,
              gw.output)
        page = httpx.get(gw.url + "/metrics", timeout=30).text
    assert unusable.status_code == 503 and "problem" in unusable.json()["servers"]["upstream"]
    assert refused["isError"] is True
    assert counts % ("unusable", "1.0") in page and counts % ("failure", "0.0") in page
