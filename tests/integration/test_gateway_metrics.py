"""The gateway's metrics (SPEC §13) in front of two servers that log what they receive, `alpha` over
stdio and `beta` over streamable HTTP: the exact allowed and denied calls per server and tool, the
unmet requirements (the confidential one as `(withheld)`) and the exhausted quota; 1,000 random tool
names add no series; `upstream_up` and `upstream_restarts_total` follow a killed server; a broken
policy reload counts a failure, one that leaves a server unusable counts as `unusable`;
`--metrics-listen` moves `/metrics` off the HTTP listener, and serves a stdio gateway's.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, `alpha` in memory, `beta` an SDK server on a socket of this loop (stopped and started again on
its port), the `/metrics` page read with prometheus_client's own parser (tests/fixtures/scraped.py);
each wait is on the event (a log line, a server up or down). The shipped alerts that read these
series are run by promtool on their own unit tests (tests/unit/test_prometheus_rules.py).

Two tests stay interop. A real Prometheus scrapes a real gateway process in front of two server
processes: the exposition as Prometheus itself parses it, the counts as PromQL gives them. And a real
stdio gateway process serves `--metrics-listen`: its stdio listener and that listener of its own are
the command's `_serve`, which no in-process harness runs.
"""

from __future__ import annotations

import random
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from mcp_preconditions.cli import main
from mcp_preconditions.policy.load import revision_of
from mcp_preconditions.telemetry import MetricsListener
from tests.fixtures.gateway_upstream import (
    CLI,
    ROOT,
    UPSTREAM_STDIO,
    Process,
    gateway_http,
    upstream_env,
    upstream_http,
)
from tests.fixtures.inprocess import InProcess, cli_gateway, until
from tests.fixtures.main_levels import restored_logging  # noqa: F401 (a fixture)
from tests.fixtures.memory_upstream import MemoryServers, logging_env
from tests.fixtures.ports import free_port
from tests.fixtures.prometheus import Prometheus, Step, prometheus, scripted_calls
from tests.fixtures.scraped import Scraped
from tests.fixtures.two_servers import POLICY, Beta, files, two_servers
from tests.integration.test_metrics_prometheus import _call_names, random_name

ASYNC = pytest.mark.asyncio(loop_scope="module")
INTEROP = pytest.mark.interop

ALERTS = ROOT / "examples" / "prometheus" / "alerts.yml"
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
DECISIONS, UP = "mcp_preconditions_decisions_total", "mcp_preconditions_upstream_up"
RESTARTS, RELOADS = "mcp_preconditions_upstream_restarts_total", "mcp_preconditions_policy_reloads_total"
RANDOM_NAMES = 200  # in-process; the interop test's real Prometheus sees 1,000
WAIT_SECONDS = 10.0  # the safety net of the interop tests' waits (events decide)


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)  # the gateway's own, here


# -- in-process --------------------------------------------------------------------------------------
async def scrape(gw: InProcess) -> Scraped:
    async with gw.http() as http:
        page = await http.get("/metrics")
    assert page.status_code == 200, page.text
    return Scraped(page.text)


async def scrape_until(gw: InProcess, read: Callable[[Scraped], Any], expected: Any) -> Scraped:
    """The page once `read` of it gives `expected`, looked at again as the gateway's servers
    connect or drop (or its loop steps on)."""
    with anyio.move_on_after(10):
        while read(page := await scrape(gw)) != expected:
            await gw.changed()
    assert read(page) == expected, page.text
    return page


async def script(gw: InProcess, steps: list[Step]) -> Counter[tuple[str, str]]:
    """Every call of `steps` in order on one anonymous client of the gateway's app: what each said."""
    seen: Counter[tuple[str, str]] = Counter()
    async with gw.client() as client:
        for tool, arguments, _token, times in steps:
            for _ in range(times):
                result = await client.call_tool(tool, arguments)
                seen[(tool, "denied" if result.is_error else "allowed")] += 1
    return seen


async def call(gw: InProcess, tool: str) -> dict[str, Any]:
    async with gw.client() as client:
        result = await client.call_tool(tool, {})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


@ASYNC
async def test_each_servers_calls_are_counted_exactly_and_random_names_add_no_series(
        tmp_path: Path) -> None:
    rng = random.Random(2424)
    names = [random_name(rng) for _ in range(RANDOM_NAMES)]
    async with two_servers(tmp_path) as (gw, _servers, _beta):
        seen = await script(gw, SCRIPT)
        first = await scrape(gw)
        async with gw.client() as client:
            for start in range(0, len(names), 50):
                async with anyio.create_task_group() as tg:
                    for name in names[start:start + 50]:
                        tg.start_soon(client.call_tool, name, {})
        after = await scrape(gw)
    assert seen == SEEN  # what the client saw ...
    assert first.nonzero(DECISIONS, "server", "tool", "result") == COUNTED  # ... is what is counted
    assert first.nonzero("mcp_preconditions_unmet_total", "requirement") == {
        ("(withheld)",): 2, ("auth:claim:role:admin",): 1, ("quota:q",): 3}
    assert first.values("mcp_preconditions_quota_exhausted_total", "quota") == {("q",): 3}
    assert first.values("mcp_preconditions_upstream_seconds_count", "server") == {
        ("alpha",): 3, ("beta",): 4}  # the allowed calls, each timed
    assert first.values(UP, "server") == {("alpha",): 1, ("beta",): 1}
    assert first.values(DECISIONS, "result", tool="beta__env") == {
        ("allowed",): 2, ("denied",): 0, ("error",): 0}
    assert first.series() == after.series() > 40
    assert after.nonzero(DECISIONS, "server", "tool", result="unlisted") == {
        ("(none)", "(unlisted)"): RANDOM_NAMES}  # no server lists them: one series
    assert "staging" not in after.text  # the confidential requirement is never named


@ASYNC
async def test_upstream_up_and_restarts_follow_killed_servers(tmp_path: Path) -> None:
    async with two_servers(tmp_path) as (gw, servers, beta):
        started = await scrape(gw)
        crashed = await call(gw, "alpha__crash")  # the stdio server ends, as its process exits
        await until(lambda: servers.starts["alpha"] == 2, "alpha was not started again")
        restarted = await scrape_until(gw, lambda p: p.values(RESTARTS, "server"),
                                       {("alpha",): 1, ("beta",): 0})
        await scrape_until(gw, lambda p: p.values(UP, "server"), {("alpha",): 1, ("beta",): 1})

        await beta.stop()  # the HTTP server goes away; the next request (/readyz) finds out
        await gw.until_ready(lambda body: not body["servers"]["beta"]["connected"])
        down = await scrape_until(gw, lambda p: p.values(UP, "server"),
                                  {("alpha",): 1, ("beta",): 0})
        async with anyio.create_task_group() as tg:
            await tg.start(beta.serve)  # back on its port
            await gw.until_ready()
            again = await scrape_until(gw, lambda p: p.values(UP, "server"),
                                       {("alpha",): 1, ("beta",): 1})
            answer = await call(gw, "beta__env")
            await beta.stop()
    assert started.values(UP, "server") == {("alpha",): 1, ("beta",): 1}
    assert started.values(RESTARTS, "server") == {("alpha",): 0, ("beta",): 0}
    assert crashed["isError"] is True
    assert restarted.values(RESTARTS, "server") == {("alpha",): 1, ("beta",): 0}
    assert down.values(UP, "server") == {("alpha",): 1, ("beta",): 0}  # what the alert reads
    assert again.values(RESTARTS, "server")[("alpha",)] == 1
    assert again.values(RESTARTS, "server")[("beta",)] >= 1  # each attempt while down is a restart
    assert answer["isError"] is False


@ASYNC
async def test_a_broken_policy_reload_counts_a_failure_and_keeps_the_old_policy(
        tmp_path: Path) -> None:
    async with two_servers(tmp_path, "--policy-poll-seconds", "0.1") as (gw, _servers, _beta):
        before = await scrape(gw)
        (tmp_path / "policy.toml").write_text(POLICY + "[tools.alpha__echo\n", encoding="utf-8")
        await gw.logged("policy reload failed, keeping revision")
        failed = await scrape_until(gw, lambda p: p.values(RELOADS, "result")[("failure",)] >= 1,
                                    True)
        still = await call(gw, "alpha__echo")
    assert before.values(RELOADS, "result") == {("success",): 0, ("failure",): 0, ("unusable",): 0}
    assert failed.values(RELOADS, "result")[("success",)] == 0  # what the alert reads
    assert failed.values("mcp_preconditions_policy_info", "revision") == {
        (revision_of(POLICY.encode()),): 1}  # the old policy stays in force
    assert still["isError"] is False


@ASYNC
async def test_metrics_listen_moves_metrics_off_the_http_listener(tmp_path: Path) -> None:
    async with two_servers(tmp_path, "--metrics-listen", "http://127.0.0.1:0") as (gw, _s, _b):
        async with gw.http() as http:
            main_listener = (await http.get("/metrics")).status_code
        metrics = gw.gateway.telemetry.metrics
        assert metrics is not None and gw.prepared.metrics_at == ("127.0.0.1", 0)
        listener = MetricsListener(metrics, *gw.prepared.metrics_at)  # what the command starts
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                page = (await http.get(listener.url)).text
        finally:
            listener.close()
    assert main_listener == 404
    assert 'mcp_preconditions_upstream_up{server="beta"} 1.0' in page


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


@pytest.mark.usefixtures("restored_logging")
def test_a_metrics_port_in_use_is_one_line(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The command in this process: it binds its listeners before anything starts, and the second
    one fails (no server is started: the gateway's servers start when it runs)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    with _bound() as port:
        status = main(["gateway", "--policy", str(policy), "--listen",
                       f"http://127.0.0.1:{free_port()}", "--metrics-listen",
                       f"http://127.0.0.1:{port}", "--", *UPSTREAM_STDIO])
    assert status == 2
    assert capsys.readouterr().err == (f"mcp-preconditions: error: --metrics-listen: cannot listen "
                                       f"on 127.0.0.1:{port}: Address already in use\n")


@contextmanager
def _bound() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@asynccontextmanager
async def one_server(policy: Path, log: Path, *options: str) -> AsyncIterator[InProcess]:
    """`gateway --policy P --listen http://... OPTIONS -- UPSTREAM` in-process, the logging
    upstream in memory (not waited for: a gateway whose policy is unusable is never ready)."""
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.logging_upstream(**logging_env(log))
        async with cli_gateway(["--policy", str(policy), "--listen", "http://127.0.0.1:0",
                                *options, "--", *upstream]) as gw:
            yield gw


@ASYNC
async def test_metrics_need_no_token_where_mcp_does(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY + '[auth]\nissuer = "https://issuer.example"\naudience = "mcp"\n'
                      'jwks_uri = "https://issuer.example/jwks"\n', encoding="utf-8")
    async with one_server(policy, tmp_path / "u.jsonl") as gw, gw.http() as http:
        await gw.until_ready()
        mcp = await http.post("/mcp", json={})
        page = await http.get("/metrics")
    assert mcp.status_code == 401
    assert page.status_code == 200
    assert "mcp_preconditions_upstream_up" in page.text
    assert "issuer.example" not in page.text and "Bearer" not in page.text


@ASYNC
async def test_a_reload_that_leaves_a_server_unusable_counts_as_unusable_not_success(
        tmp_path: Path) -> None:
    """A near miss of a server's tool (`[tools.Echo]` for `echo`) swaps in, but every call to that
    server is refused: the reload is `unusable`. Fixing it again is a `success`."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.echo]\nrequirements = []\n', encoding="utf-8")
    async with one_server(policy, tmp_path / "u.jsonl", "--policy-poll-seconds", "0.1") as gw, \
            gw.http() as http:
        await gw.until_ready()
        policy.write_text('[tools.Echo]\nrequirements = []\n', encoding="utf-8")
        await scrape_until(gw, lambda page: page.values(RELOADS, "result")[("unusable",)], 1)
        unusable = await http.get("/readyz")
        refused = await call(gw, "echo")
        policy.write_text('[tools.echo]\nrequirements = []\n', encoding="utf-8")
        page = await scrape_until(gw, lambda page: page.values(RELOADS, "result")[("success",)], 1)
    assert unusable.status_code == 503 and "problem" in unusable.json()["servers"]["upstream"]
    assert refused["isError"] is True
    assert page.values(RELOADS, "result") == {("success",): 1, ("failure",): 0, ("unusable",): 1}


# -- interop -----------------------------------------------------------------------------------------
@contextmanager
def processes(tmp: Path) -> Iterator[tuple[Process, Prometheus]]:
    """`beta` over HTTP, an HTTP gateway process in front of it and `alpha`, both servers
    connected, and a Prometheus scraping the gateway (job `gw`) with the shipped alerting rules."""
    with upstream_http(tmp / "beta.jsonl") as beta:
        policy, servers = files(tmp, beta.url)
        with gateway_http(policy, tmp / "alpha.jsonl", "--servers", str(servers)) as gw, \
                prometheus({"gw": gw.url + "/metrics"}, [ALERTS]) as prom:
            eventually(lambda: httpx.get(gw.url + "/readyz", timeout=10).json()["status"], "ready",
                       gw.output)
            yield gw, prom


def eventually(read: Callable[[], Any], expected: Any, output: Callable[[], str] = lambda: "") -> Any:
    """Read until it gives `expected` (the machine is shared: no fixed sleeps)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while (found := read()) != expected:
        assert time.monotonic() < deadline, f"{found!r} != {expected!r}\n{output()}"
        time.sleep(0.1)
    return found


def nonzero(prom: Prometheus, promql: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {k: v for k, v in prom.values(promql, *labels).items() if v}


@INTEROP
def test_prometheus_counts_each_servers_calls_exactly_and_random_names_add_no_series(
        tmp_path: Path) -> None:
    """Interop: Prometheus itself scrapes and parses a gateway process's exposition, and PromQL
    counts what the in-process tests read from the page."""
    with processes(tmp_path) as (gw, prom):
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
        text = httpx.get(gw.url + "/metrics", timeout=10).text
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


@INTEROP
@ASYNC
async def test_a_stdio_gateway_serves_its_metrics_on_their_own_listener(tmp_path: Path) -> None:
    """Interop: a real stdio gateway process (its stdio listener, and `--metrics-listen`'s listener
    beside it, both started by the command); `beta` is an SDK server on a socket of this loop."""
    metrics_port = free_port()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    beta = Beta(tmp_path)
    policy, servers = files(tmp_path, beta.url)
    params = StdioServerParameters(
        command=CLI[0], args=[*CLI[1:], "gateway", "--policy", str(policy), "--servers",
                              str(servers), "--metrics-listen", f"http://127.0.0.1:{metrics_port}"],
        env=upstream_env(tmp_path / "alpha.jsonl"), cwd=ROOT)
    seen: Counter[tuple[str, str]] = Counter()
    async with anyio.create_task_group() as tg:
        await tg.start(beta.serve)
        told = Told()
        async with Client(params, mode="legacy", message_handler=told) as client:
            await told.until_listed(client, {"alpha__echo", "beta__env"})  # both servers listed
            for tool, arguments, _token, times in SCRIPT:
                for _ in range(times):
                    result = await client.call_tool(tool, arguments)
                    seen[(tool, "denied" if result.is_error else "allowed")] += 1
            async with httpx.AsyncClient(timeout=10) as http:
                page = Scraped((await http.get(url)).text)
                elsewhere = (await http.get(url.removesuffix("/metrics") + "/mcp")).status_code
        await beta.stop()
    assert seen == SEEN
    assert page.nonzero(DECISIONS, "server", "tool", "result") == COUNTED
    assert elsewhere == 404


class Told:
    """A client's message handler: each `tools/list_changed` wakes `until_listed`."""

    def __init__(self) -> None:
        self._changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._changed.set()

    async def until_listed(self, client: Client, tools: set[str]) -> None:
        """Until the client's listing holds `tools`, listing again each time it is told of a
        change (a server listed after the first listing was shown)."""
        with anyio.fail_after(WAIT_SECONDS):
            while not tools <= {t.name for t in (await client.list_tools()).tools}:
                await self._changed.wait()
                self._changed = anyio.Event()
