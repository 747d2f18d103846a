"""A fastmcp user's own virtualenv (SPEC §9, issue 40 item 8): the newest fastmcp and uvicorn from
the registry installed first, then the wheel built from this tree. Alone, the wheel's `gateway` names
in one line what it lacks; with `[fastmcp]` pip replaces neither fastmcp nor uvicorn (0.55, which the
old listener's `uvicorn<0.55` refused), and `gateway` (over stdio and HTTP, in front of a FastMCP
server), `serve --transport http` and `tools` run. Not in the lowest pass: it installs the newest.

Interop: pip installing into fresh virtualenvs, and the installed console script run as a user
runs it, are the components under test; nothing of it can run in the test's process.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from packaging.version import Version

from tests.fixtures.mcp_servers import ROOT
from tests.fixtures.ports import free_port
from tests.integration.test_install_beside_sdks import wheel  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.interop]  # (tests/fixtures/tiers.py)

TINY = '''from fastmcp import FastMCP

app = FastMCP("tiny")


@app.tool
def echo(text: str) -> str:
    """Say it back."""
    return f"echo: {text}"


if __name__ == "__main__":
    app.run(show_banner=False)
'''
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ECHO = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo",
                                                                     "arguments": {"text": "hi"}}}


@dataclass
class FastmcpVenv:
    """A virtualenv as a fastmcp user has one: the newest fastmcp and uvicorn, installed first."""

    root: Path
    tiny: Path

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.root / "bin" / args[0]), *args[1:]], capture_output=True,
                              text=True, timeout=timeout, check=False, cwd=ROOT, env=venv_env())

    def versions(self) -> dict[str, str]:
        listed = self.run("python", "-m", "pip", "list", "--format", "json",
                          "--disable-pip-version-check")
        assert listed.returncode == 0, listed.stderr
        return {normalized(p["name"]): p["version"] for p in json.loads(listed.stdout)}


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares it (pip reports `prometheus_client`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def venv_env() -> dict[str, str]:
    """The environment without this tree on PYTHONPATH: the virtualenv runs its own install."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def fastmcp_venv(tmp_path_factory: pytest.TempPathFactory) -> FastmcpVenv:
    root = tmp_path_factory.mktemp("fastmcp-user") / "venv"
    # work bound, not an event wait: a venv with pip
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    tiny = root.parent / "tiny.py"
    tiny.write_text(TINY, encoding="utf-8")
    venv = FastmcpVenv(root, tiny)
    done = venv.run("python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    # work bound, not an event wait: pip, from the registry
                    "--upgrade", "fastmcp", "uvicorn", timeout=900)
    assert done.returncode == 0, done.stderr
    return venv


# work bound, not an event wait: a fresh virtualenv: fastmcp and its dependencies from the registry
@pytest.mark.timeout(1200)
def test_fastmcp_alone_runs_gateway_serve_and_tools_and_pip_keeps_the_newest_uvicorn(
        fastmcp_venv: FastmcpVenv, wheel: Path, tmp_path: Path) -> None:  # noqa: F811
    """Issue 40: `[fastmcp]` alone could not run `gateway`, `serve` or `tools`, and adding `[mcp]`
    downgraded uvicorn 0.55.0 (the newest) to 0.54. Here, beside the newest fastmcp and uvicorn:
    the wheel alone names what is missing in one line; with `[fastmcp]` pip replaces neither, and
    every command runs, the gateway in front of a FastMCP server over stdio and over HTTP."""
    venv = fastmcp_venv
    before = venv.versions()
    assert Version(before["uvicorn"]) >= Version("0.55")  # the release the old `<0.55` refused
    core = venv.run("python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    str(wheel), timeout=600)  # work bound, not an event wait: pip installs the wheel
    assert core.returncode == 0, core.stderr
    policy = tmp_path / "policy.toml"
    policy.write_text("[tools.echo]\nrequirements = []\n", encoding="utf-8")
    alone = venv.run("mcp-preconditions", "gateway", "--policy", str(policy), "--",
                     str(venv.root / "bin" / "python"), str(venv.tiny))
    absent = [n for n in ("mcp", "prometheus-client", "httptools", "orjson", "uvicorn")
              if n not in venv.versions()]
    assert absent and "mcp" not in absent  # fastmcp brought mcp, not what the gateway needs
    named = absent[0] if len(absent) == 1 else f"{', '.join(absent[:-1])} and {absent[-1]}"
    assert (alone.returncode, alone.stdout, alone.stderr) == (
        2, "", f"mcp-preconditions gateway: error: needs {named}, which "
               f"{'is' if len(absent) == 1 else 'are'} not installed (the 'mcp' extra brings "
               f"{'it' if len(absent) == 1 else 'them'}): install mcp-preconditions with [mcp] "
               '(README.md, "Install")\n')
    report = venv.run("python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                      # work bound, not an event wait: pip resolves
                      "--report", "-", f"{wheel}[fastmcp]", timeout=600)
    assert report.returncode == 0, report.stderr
    installed = {normalized(i["metadata"]["name"]) for i in json.loads(report.stdout)["install"]}
    assert installed == set(absent), installed  # nothing else replaced
    after = venv.versions()
    assert (after["uvicorn"], after["fastmcp"]) == (before["uvicorn"], before["fastmcp"])
    assert venv.run("mcp-preconditions", "gateway", "--help").returncode == 0
    listed = venv.run("mcp-preconditions", "tools", "--", str(venv.root / "bin" / "python"),
                      str(venv.tiny))
    assert listed.returncode == 0, listed.stderr
    assert [t["name"] for t in json.loads(listed.stdout)["tools"]] == ["echo"]
    assert _stdio_gateway_echo(venv, policy) == "echo: hi"
    assert _http_gateway_echo(venv, policy) == "echo: hi"
    assert _serve_http_initializes(venv) == "mission-control"


def _stdio_gateway_echo(venv: FastmcpVenv, policy: Path) -> str:
    """`gateway` over stdio in front of the FastMCP server: initialize, then call echo."""
    command = [str(venv.root / "bin" / "mcp-preconditions"), "gateway", "--policy", str(policy),
               "--", str(venv.root / "bin" / "python"), str(venv.tiny)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, cwd=ROOT, env=venv_env()) as gateway:
        assert gateway.stdin is not None and gateway.stdout is not None
        try:
            for message in (INITIALIZE, INITIALIZED, ECHO):
                gateway.stdin.write(json.dumps(message).encode() + b"\n")
            gateway.stdin.flush()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ready, _, _ = select.select([gateway.stdout], [], [], 1.0)
                line = gateway.stdout.readline() if ready else b""
                answer = json.loads(line) if line.strip() else {}
                if answer.get("id") == 2:
                    text: str = answer["result"]["content"][0]["text"]
                    return text
            raise AssertionError("the stdio gateway did not answer the call")
        finally:
            gateway.stdin.close()
            gateway.wait(timeout=30)


def _http_gateway_echo(venv: FastmcpVenv, policy: Path) -> str:
    """`gateway --listen http://...` (the project's own HTTP listener) in front of the same server."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(venv.root / "bin" / "mcp-preconditions"), "gateway", "--policy", str(policy),
               "--listen", url, "--", str(venv.root / "bin" / "python"), str(venv.tiny)]
    with _running(command, url + "/readyz"), httpx.Client(base_url=url, timeout=30) as http:
        accept = {"accept": "application/json, text/event-stream"}
        opened = http.post("/mcp", json=INITIALIZE, headers=accept)
        assert opened.status_code == 200, opened.text
        session = {**accept, "mcp-session-id": opened.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-11-25"}
        assert http.post("/mcp", json=INITIALIZED, headers=session).status_code == 202
        called = http.post("/mcp", json=ECHO, headers=session)
        text: str = _json_or_event(called)["result"]["content"][0]["text"]
        return text


def _serve_http_initializes(venv: FastmcpVenv) -> str:
    """`serve --transport http` (on uvicorn's public Server): the example server initializes."""
    port = free_port()
    command = [str(venv.root / "bin" / "mcp-preconditions"), "serve", "--policy",
               "policies/mission-control.toml", "--transport", "http", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with _running(command, None, url), httpx.Client(base_url=url, timeout=30) as http:
        opened = http.post("/mcp", json=INITIALIZE,
                           headers={"accept": "application/json, text/event-stream"})
        assert opened.status_code == 200, opened.text
        name: str = _json_or_event(opened)["result"]["serverInfo"]["name"]
        return name


def _json_or_event(response: httpx.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        found: dict[str, Any] = json.loads(data[-1])
        return found
    answer: dict[str, Any] = response.json()
    return answer


@contextmanager
def _running(command: list[str], probe: str | None, base: str | None = None) -> Iterator[None]:
    """Run `command` until the block ends, once `probe` answers 200 (or `base` accepts a connection)."""
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
                          env=venv_env()) as process:
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, process.stderr.read() if process.stderr else b""
                assert time.monotonic() < deadline, "did not come up"
                try:
                    if probe is not None and httpx.get(probe, timeout=2).status_code == 200:
                        break
                    if probe is None and base is not None:
                        httpx.get(base + "/", timeout=2)
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            yield
        finally:
            process.terminate()
            process.wait(timeout=30)
