"""The systems the gateway bench compares, each started on a free port of 127.0.0.1 in front of npm
server-everything, and what /proc says of each one's process tree: CPU seconds and resident memory.

The peers are installed for `make bench` only (`make bench-peers`): npm mcp-proxy and supergateway
pinned in bench/peers/package-lock.json, PyPI mcp-proxy (it needs mcp<2) in .run/peers/mcp-proxy.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tests.fixtures.mcp_servers import CLI, ROOT, server_env
from tests.fixtures.ports import free_port
from tests.fixtures.upstreams import (
    LOOPBACK_NODE_OPTIONS,
    Listening,
    everything_http,
    everything_stdio,
    fastmcp_proxy_http,
    gateway_http,
    listening,
)

PEERS = ROOT / "bench" / "peers"
NPM_BIN = PEERS / "node_modules" / ".bin"
PYPI_MCP_PROXY = ROOT / ".run" / "peers" / "mcp-proxy" / "bin" / "mcp-proxy"
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
FLEET = 10  # servers behind the gateway of issue 25's goal 6 (SPEC §12)
# A satisfied requirement on echo: the gateway decides every call the bench makes.
POLICY = 'environment = ["production"]\n[tools.echo]\nrequirements = ["env:production"]\n'


@dataclass
class Running:
    """A system serving streamable HTTP at `url`; `pids` are the processes whose CPU is its cost
    (the root and its descendants, plus any named `also`, e.g. an HTTP upstream it calls)."""

    name: str
    url: str
    root: int
    also: tuple[int, ...] = ()
    seen: dict[int, str] = field(default_factory=dict)  # pid: start time, of every process in its tree

    def pids(self) -> list[int]:
        found = descendants(self.root)
        for pid in found:
            self.seen.setdefault(pid, _started(pid))
        return [*found, *(p for a in self.also for p in descendants(a))]

    def cpu_s(self) -> float:
        """CPU seconds of the whole tree so far (a child already reaped counts in its parent)."""
        return sum(_cpu(pid, children=True) for pid in self.pids())

    def own_cpu_s(self) -> float:
        """CPU seconds of the proxy process alone (for direct: the server itself)."""
        return _cpu(self.root, children=False)

    def rss_mb(self) -> float:
        """Resident memory of the proxy process alone, in MB."""
        return _rss(self.root) / 1e6

    def tree_rss_mb(self) -> float:
        """Resident memory of the proxy and its descendants (shared pages counted in each)."""
        return sum(_rss(p) for p in descendants(self.root)) / 1e6

    def reap(self) -> None:
        """Stop any process of its tree still running after the root stopped: ours, by pid, and
        only if that pid is still the process we saw (same start time), not a reused one."""
        for pid, start in self.seen.items():
            if start and _started(pid) == start:
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


def _stat(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return text[text.rindex(")") + 2:].split()  # fields from 3 (state) on; the name may hold spaces


def _started(pid: int) -> str:
    fields = _stat(pid)
    return fields[19] if fields else ""  # starttime (field 22), in ticks since boot


def _cpu(pid: int, *, children: bool) -> float:
    fields = _stat(pid)
    if not fields:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: reaped children
    return ticks / TICK


def _rss(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[21]) * PAGE if fields else 0  # rss, in pages (field 24)


def descendants(root: int) -> list[int]:
    """`root` and every process below it, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields:
                parents.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, ()))
    return out


# --- how each system is started -----------------------------------------------------------------------
def _upstream_line() -> str:
    return shlex.join(everything_stdio())


def _loopback_env() -> dict[str, str]:
    return server_env(NODE_OPTIONS=LOOPBACK_NODE_OPTIONS)


def npm_mcp_proxy() -> AbstractContextManager[Listening]:
    """npm mcp-proxy 6.7 (streamable HTTP only, at /mcp), one stdio upstream per session."""
    port = free_port()
    return listening([str(_peer(NPM_BIN / "mcp-proxy")), "--host", "127.0.0.1", "--port", str(port),
                      "--server", "stream", "--", *everything_stdio()], port, _loopback_env())


def supergateway() -> AbstractContextManager[Listening]:
    """supergateway 4.0, stdio to streamable HTTP, stateful (stateless starts a server per request)."""
    port = free_port()
    return listening([str(_peer(NPM_BIN / "supergateway")), "--stdio", _upstream_line(),
                      "--outputTransport", "streamableHttp", "--stateful", "--port", str(port),
                      "--logLevel", "none"], port, _loopback_env())


def pypi_mcp_proxy() -> AbstractContextManager[Listening]:
    """PyPI mcp-proxy 0.13 (the MCP SDK 1.x's server) in front of the stdio command."""
    port = free_port()
    return listening([str(_peer(PYPI_MCP_PROXY)), "--host", "127.0.0.1", "--port", str(port),
                      "--pass-environment", "--", *everything_stdio()], port)


def gateway_fleet(policy: Path, upstream: Sequence[str]) -> AbstractContextManager[Listening]:
    """The gateway in front of FLEET servers: `upstream` with no prefix (its `echo` is the one the
    bench calls) and FLEET - 1 of the tests' logging upstream over stdio (prefixes s1__, ...), idle."""
    from tests.fixtures.fleet import write_gateway_toml
    from tests.fixtures.gateway_upstream import UPSTREAM_STDIO

    servers: dict[str, dict[str, object]] = {
        "everything": {"command": upstream[0], "args": list(upstream[1:]), "prefix": ""}}
    for i in range(1, FLEET):
        servers[f"s{i}"] = {"command": UPSTREAM_STDIO[0], "args": list(UPSTREAM_STDIO[1:])}
    config = write_gateway_toml(policy.parent / "fleet.toml", policy, servers)
    port = free_port()
    return listening([*CLI, "gateway", "--config", str(config), "--listen", f"http://127.0.0.1:{port}"],
                     port)


def custom(template: str, policy: Path, direct: str) -> AbstractContextManager[Listening]:
    """A system named on the command line (`--with NAME=COMMAND`): COMMAND is split like a shell
    line; {port} is a free port, {upstream} the stdio command, {direct} the URL of server-everything
    over HTTP, {policy} the bench's policy file, {python} this interpreter, {gateway} the gateway's
    command line."""
    port = free_port()
    values = {"port": str(port), "python": sys.executable, "upstream": _upstream_line(), "direct": direct,
              "policy": str(policy), "gateway": shlex.join([*CLI, "gateway"])}
    return listening(shlex.split(template.format(**values)), port)


def _peer(path: Path) -> Path:
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `make bench-peers` in {ROOT}")
    return path


@contextmanager
def started(name: str, server: AbstractContextManager[Listening],
            also: Sequence[int] = ()) -> Iterator[Running]:
    with server as listening_:
        running = Running(name, listening_.url, listening_.process.pid, tuple(also))
        running.pids()
        try:
            yield running
        finally:
            listening_.stop()
            running.reap()


@contextmanager
def everything(policy: Path, extra: dict[str, str], only: Sequence[str] = ()) -> Iterator[dict[str, Running]]:
    """Every system of the HTTP table (or those named in `only`, and direct), started once."""
    upstream = everything_stdio()
    servers: dict[str, Callable[[], AbstractContextManager[Listening]]] = {
        "gateway": lambda: gateway_http(policy, upstream),
        "gateway_httpup": lambda: gateway_http(policy, upstream_url=direct.url),
        "gateway_fleet": lambda: gateway_fleet(policy, upstream),
        "fastmcp": lambda: fastmcp_proxy_http(upstream),
        "pypi_mcp_proxy": pypi_mcp_proxy,
        "npm_mcp_proxy": npm_mcp_proxy,
        "supergateway": supergateway,
    }
    with ExitStack() as stack:
        direct = stack.enter_context(started("direct", everything_http()))
        systems = {"direct": direct}
        for name, template in extra.items():
            servers[name] = partial(custom, template, policy, direct.url)
        for name, server in servers.items():
            if only and name not in only and name not in extra:
                continue
            calls_direct = name == "gateway_httpup" or "{direct}" in extra.get(name, "")
            also = [direct.root] if calls_direct else []
            systems[name] = stack.enter_context(started(name, server(), also))
        yield systems
