"""`serve --transport http` counts a scripted run of allowed and denied calls exactly, per tool and
result, on its `/metrics` page (read with prometheus_client's own parser: tests/fixtures/scraped.py).
A caller sending 1,000 random tool names adds no series. `--metrics-listen` serves a stdio server's
metrics, and moves them off the HTTP listener; a bad or taken address is one line and exit 2.

The suite's one real Prometheus scrape is a gateway's (tests/integration/test_gateway_metrics.py).
`serve` still runs as a process here: it is wired in-process once `prepare_serve` lands (branch
b41hosted, tests/fixtures/hosted.py); the bad addresses go through `main()` in this process.
"""

from __future__ import annotations

import random
import re
import socket
import string
import tempfile
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.cli import main
from tests.fixtures.main_levels import restored_logging  # noqa: F401 (a fixture)
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
from tests.fixtures.prometheus import Step, metrics_url, scripted_calls
from tests.fixtures.scraped import Scraped

pytestmark = pytest.mark.integration


def script(token: str) -> list[Step]:
    return [
        ("get_weather", {}, None, 3),                         # allowed: no requirements
        ("launch_rocket", {"vehicle": "Falcon 9"}, token, 2),  # allowed: the token's role, capability
        ("launch_rocket", {"vehicle": "Falcon 9"}, None, 4),   # denied: anonymous
        ("abort_launch", {}, token, 1),                        # allowed: role grant, mission:write
        ("abort_launch", {}, None, 2),                         # denied: anonymous
        ("fuel_status", {}, token, 1),                         # denied: the officer is off duty
        ("fuel_status", {}, None, 1),                          # denied: that, and anonymous
    ]


EXPECTED = {("get_weather", "allowed"): 3, ("launch_rocket", "allowed"): 2,
            ("launch_rocket", "denied"): 4, ("abort_launch", "allowed"): 1,
            ("abort_launch", "denied"): 2, ("fuel_status", "denied"): 2}


def random_name(rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits + '_-./"\\{}=,\n é☃'
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))


def scrape(url: str) -> Scraped:
    page = httpx.get(metrics_url(url), timeout=10)
    assert page.status_code == 200, page.text
    return Scraped(page.text)


DECISIONS = "mcp_preconditions_decisions_total"


def test_serve_counts_each_tools_allowed_and_denied_calls_exactly(
        oidc_server: OidcServer, tmp_path: Path) -> None:
    with serve_http(oidc_policy(tmp_path, oidc_server)) as server:
        seen = anyio.run(scripted_calls, server.url, script(oidc_server.token()))
        page = scrape(server.url)
        announced = re.search(r"revision (\w+)", server.output())
    counts = page.nonzero(DECISIONS, "tool", "result")
    zero = page.values(DECISIONS, "result", tool="read_telemetry")
    unmet = page.values("mcp_preconditions_unmet_total", "requirement")
    revision = page.nonzero("mcp_preconditions_policy_info", "revision")
    assert announced is not None
    assert list(revision) == [(announced.group(1),)]
    assert seen == EXPECTED  # what the clients saw ...
    assert counts == EXPECTED  # ... is what was counted
    assert zero == {("allowed",): 0, ("denied",): 0, ("error",): 0}  # listed, never called
    assert unmet[("auth:oauth2",)] == 7  # the anonymous calls: 4 launches, 2 aborts, 1 fuel check
    assert unmet[("capability:rocket.launch",)] == 4
    assert unmet[("auth:scope:mission:write",)] == 2
    assert unmet[("state:range.safety_officer_on_duty",)] == 2
    assert unmet[("(withheld)",)] == 0  # state:weather.clear is confidential, and was satisfied
    assert not any("weather.clear" in k[0] for k in unmet)


async def _call_names(url: str, names: list[str]) -> None:
    async with Client(streamable_http_client(url, http_client=bearer(None))) as client:
        for start in range(0, len(names), 50):
            async with anyio.create_task_group() as tg:
                for name in names[start:start + 50]:
                    tg.start_soon(client.call_tool, name, {})


def test_a_thousand_random_tool_names_add_no_series(tmp_path: Path) -> None:
    rng = random.Random(24)
    names = [random_name(rng) for _ in range(1000)]
    with serve_http(MISSION_POLICY) as server:
        anyio.run(_call_names, server.url, ["get_weather", "launch_rocket"])  # the series exist
        before = scrape(server.url)
        anyio.run(_call_names, server.url, names)
        after = scrape(server.url)
    unlisted = {"tool": "(unlisted)", "result": "unlisted"}
    assert before.values(DECISIONS, "server", **unlisted) == {("mission-control",): 0}
    assert before.series() == after.series() > 40
    assert after.values(DECISIONS, "server", **unlisted) == {("mission-control",): 1000}
    assert not any(f'tool="{n}"' in after.text for n in names if n not in ("get_weather",))


def test_a_stdio_server_serves_metrics_on_its_own_listener() -> None:
    async def scripted() -> tuple[str, str, int]:
        params = StdioServerParameters(
            command=CLI[0], args=[*CLI[1:], "serve", "--policy", str(MISSION_POLICY),
                                  "--metrics-listen", "http://127.0.0.1:0"],
            env=server_env(), cwd=ROOT)
        with tempfile.TemporaryFile("a+") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                await client.call_tool("get_weather", {})
                await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
                errlog.seek(0)
                url = re.search(r"metrics on (\S+)", errlog.read())
                assert url is not None
                async with httpx.AsyncClient(timeout=10) as http:
                    page = (await http.get(url.group(1))).text
                    elsewhere = (await http.get(url.group(1).removesuffix("/metrics") + "/mcp"))
                return url.group(1), page, elsewhere.status_code
    url, page, elsewhere = anyio.run(scripted)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert ('mcp_preconditions_decisions_total{result="allowed",server="mission-control",'
            'tool="get_weather"} 1.0') in page
    assert ('mcp_preconditions_decisions_total{result="denied",server="mission-control",'
            'tool="launch_rocket"} 1.0') in page
    assert elsewhere == 404


def test_metrics_listen_moves_metrics_off_the_http_listener() -> None:
    with serve_http(MISSION_POLICY, "--metrics-listen", "http://127.0.0.1:0") as server:
        own = re.search(r"metrics on (\S+)", server.output())
        assert own is not None
        assert httpx.get(metrics_url(server.url), timeout=10).status_code == 404
        assert "mcp_preconditions_policy_info" in httpx.get(own.group(1), timeout=10).text


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize(("value", "message"), [
    ("127.0.0.1:9100", "--metrics-listen: expected 'http://HOST:PORT', got '127.0.0.1:9100'"),
    ("http://127.0.0.1:70000", "--metrics-listen: port out of range (0-65535): 70000"),
])
def test_a_bad_metrics_listen_is_one_line(value: str, message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--policy", str(MISSION_POLICY), "--metrics-listen", value]) == 2
    assert capsys.readouterr().err == f"mcp-preconditions: error: {message}\n"


@pytest.mark.usefixtures("restored_logging")
def test_a_metrics_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The command in this process: its listener is bound before anything is served."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = main(["serve", "--policy", str(MISSION_POLICY), "--metrics-listen",
                       f"http://127.0.0.1:{port}"])
    assert status == 2
    assert capsys.readouterr().err == (f"mcp-preconditions: error: --metrics-listen: cannot listen "
                                       f"on 127.0.0.1:{port}: Address already in use\n")
