"""The `serve` and `demo` subcommands: the guarded mission-control server for real MCP clients, and
a guided run of it with a real MCP client. Argument parsing, wiring and printing only.

Exit codes: 0 done, 2 bad input (message on stderr as `mcp-preconditions: error: ...`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import socket
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any, TextIO

import anyio

from ..client import FilterResult, Knowledge, ToolVerdict
from ..errors import PreconditionsError
from ..files import read_claims
from ..guard import Guard
from ..policy.load import load_policy
from ..policy.reload import PolicyReloader
from ..principal import ANONYMOUS, Credentials, Principal
from ._output import BAD_INPUT, PROG, fail, table

TOKEN_ENV = "MCP_PRECONDITIONS_TOKEN"
WIDTH = 100
DEMO_CLAIMS = "demo-claims.json"  # in mcp_preconditions/data/
# What the demo client declares it knows (its own token's claims, the server's environment).
DEMO_SATISFIED = ("auth:oauth2", "auth:claim:role:mission_control", "auth:scope:mission:write")
DEMO_UNSATISFIABLE = ("env:staging", "feature:telemetry.v2")


# --- serve ----------------------------------------------------------------------------------------
def _stdio_credentials(args: argparse.Namespace) -> Credentials:
    """Over stdio the caller is whoever started the process (MCP: credentials come from the
    environment): trusted claims from --claims, or a bearer token from $MCP_PRECONDITIONS_TOKEN."""
    if args.claims is not None:
        return Credentials(principal=Principal.from_claims(read_claims(args.claims)))
    token = os.environ.get(TOKEN_ENV)
    return Credentials(token=token) if token else ANONYMOUS


def run_serve(args: argparse.Namespace) -> int:
    """`serve`: the guarded mission-control server on stdio or streamable HTTP."""
    from ..examples_server import build_server

    if args.transport == "http" and args.claims is not None:
        return fail("--claims is for --transport stdio only; over HTTP each call's bearer token "
                    "decides who is calling")
    if args.transport == "stdio" and args.step_up:
        return fail("--step-up is for --transport http only: the 403 challenge is an HTTP answer")
    if not 0 <= args.refresh_seconds < math.inf:  # NaN fails this too
        return fail(f"--refresh-seconds must be a finite number, 0 or more, got "
                    f"{args.refresh_seconds:g}")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("mcp_preconditions.decisions").setLevel(logging.INFO)
    guard = Guard(load_policy(args.policy))
    options: dict[str, Any] = {}
    if args.transport == "stdio":
        fixed = _stdio_credentials(args)
        options["credentials"] = lambda _request: fixed
    server = build_server(guard, **options)
    sock = _listen(args.host, args.port) if args.transport == "http" else None
    try:
        anyio.run(_serve, server, args, sock)
    except KeyboardInterrupt:
        return 0
    finally:
        if sock is not None:
            sock.close()
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, before anything is announced: early clients queue instead of failing."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise PreconditionsError(f"--host/--port: cannot listen on {host}:{port}: "
                                 f"{exc.strerror or exc}") from None
    return sock


async def _serve(server: Any, args: argparse.Namespace, sock: socket.socket | None) -> None:
    """Serve until the transport ends. With --refresh-seconds, hot-reload the policy file and
    re-check connected sessions, so reloads and live-fact changes reach them as list_changed."""
    preconditions = server.preconditions
    reloader = PolicyReloader(server.guard, args.policy, interval=args.refresh_seconds or 1.0,
                              on_change=lambda _change: preconditions.refresh())
    async with anyio.create_task_group() as tg:
        if args.refresh_seconds > 0:
            reloader.start()
            tg.start_soon(preconditions.watch, args.refresh_seconds)
        if sock is None:
            await server.run_stdio_async()
        else:
            await _serve_http(server, args, sock)
        reloader.stop()
        tg.cancel_scope.cancel()


async def _serve_http(server: Any, args: argparse.Namespace, sock: socket.socket) -> None:
    import uvicorn

    from ..integrations.step_up import InsufficientScopeChallenge

    app: Any = server.streamable_http_app(host=args.host)
    if args.step_up:
        app = InsufficientScopeChallenge(app, server.preconditions)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"{PROG}: serving {server.name} on http://{shown}:{port}/mcp "
          f"(policy {args.policy}, revision {server.guard.revision})", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


# --- demo -----------------------------------------------------------------------------------------
def run_demo(args: argparse.Namespace) -> int:
    """`demo`: start the server (embedded policy) over stdio, drive it with a real MCP client."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
        try:
            anyio.run(_demo, errlog)
        except Exception as exc:  # the server process failed: show why, never a traceback
            while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            errlog.seek(0)
            detail = errlog.read().strip().splitlines()[-5:]
            return fail(f"demo failed: {type(exc).__name__}: {exc}" +
                        "".join(f"\n  server: {line}" for line in detail))
    return 0


@contextlib.contextmanager
def _data_file(name: str) -> Iterator[Path]:
    with as_file(files("mcp_preconditions").joinpath("data", name)) as path:
        yield path


async def _demo(errlog: TextIO) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from ..examples_server import DEFAULT_POLICY
    from ..integrations.client_mcp import RequirementsClient

    with _data_file(DEFAULT_POLICY) as policy, _data_file(DEMO_CLAIMS) as claims:
        command = [sys.executable, "-c", "import sys; from mcp_preconditions.cli import main; "
                   "sys.exit(main())", "serve", "--policy", str(policy), "--transport", "stdio",
                   "--claims", str(claims), "--refresh-seconds", "0"]
        params = StdioServerParameters(command=command[0], args=command[1:])
        _print_intro(read_claims(claims), load_policy(policy).revision)
        async with Client(stdio_client(params, errlog=errlog)) as client:
            print(f"  client  mcp.Client over stdio, protocol {client.protocol_version}")
            knowledge = Knowledge(DEMO_SATISFIED, DEMO_UNSATISFIABLE)
            await _demo_steps(RequirementsClient(client, knowledge, mode="hide"))


async def _demo_steps(client: Any) -> None:
    tools = await client.list_tools()
    _section(1, "tools/list with execution.requirements (as the client reads them: the _meta mirror)")
    width = max(len(str(t["name"])) for t in tools.tools) + 5
    for tool in tools.tools:
        reqs = ", ".join(_requirements(tools, tool)) or "(none)"
        print(textwrap.fill(reqs, WIDTH, initial_indent=f"   {tool['name']}".ljust(width),
                            subsequent_indent=" " * width, break_on_hyphens=False))
    _section(2, "The client's verdicts (SEP-2487 strict rule, mode hide)")
    print(f"   knowledge: satisfied {', '.join(DEMO_SATISFIED)}\n"
          f"              unsatisfiable {', '.join(DEMO_UNSATISFIABLE)}")
    _print_verdicts(tools.filtered)
    _section(3, 'Allowed call: launch_rocket {"vehicle": "Falcon 9"}')
    ok = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
    print(f"   -> {_text(ok)}")
    _section(4, "Denied call: fuel_status {}")
    denied = await client.call_tool("fuel_status", {})
    print(f"   -> isError={str(denied.is_error).lower()}: {_text(denied)}\n"
          f"      structuredContent: {json.dumps(denied.structured_content)}\n"
          f"      unmet requirements: {', '.join(denied.structured_content['unmet'])}\n"
          f"   The guard refused before the tool ran. The client learned: "
          f"{', '.join(client.learned())}")
    _section(5, "The client's verdicts after learning from the denial")
    _print_verdicts((await client.list_tools()).filtered)


def _requirements(tools: Any, tool: dict[str, Any]) -> list[str]:
    raw = tools.requirements(tool["name"])
    return [str(r) for r in raw] if isinstance(raw, list) else []


def _print_intro(claims: dict[str, Any], revision: str) -> None:
    who = ", ".join(f"{k}={claims[k]}" for k in ("role", "scope") if k in claims)
    print("mcp-preconditions demo: SEP-2487 execution.requirements on a real MCP connection\n")
    print(f"  server  mission-control: `{PROG} serve --transport stdio` as a subprocess\n"
          f"          embedded policy mission-control.toml (revision {revision})\n"
          f"          caller: {claims.get('sub', '?')} ({who}); stdio carries no bearer token, so\n"
          f"          the demo starts the server with --claims (over HTTP, tokens are verified)")


def _print_verdicts(result: FilterResult) -> None:
    hidden = {name for name, _ in result.hidden}
    rows = [("   " + v.name, _verdict_word(v), _why(v, v.name in hidden)) for v in result.verdicts]
    print("\n".join(table(rows)))
    print(f"   shown to the model: {len(result.kept)} of {len(result.verdicts)} tools")


def _verdict_word(v: ToolVerdict) -> str:
    return "WILL FAIL" if v.will_fail else "proceed"


def _why(v: ToolVerdict, hidden: bool) -> str:
    if v.will_fail:
        return f"unsatisfiable: {', '.join(v.unsatisfiable)}" + ("  -> hidden" if hidden else "")
    if v.unknown:
        return f"{len(v.unknown)} unknown: proceed as if the field were absent"
    return ""


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content).strip()


def _section(number: int, title: str) -> None:
    print(f"\n{number}. {title}")


# --- parsers --------------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `serve` and `demo` to the main parser."""
    serve = subparsers.add_parser(
        "serve", help="run the guarded example mission-control MCP server",
        description="Serve SEP-2487's mission-control example with every call guarded by the policy. "
                    f"Over HTTP each call's bearer token is verified as the policy's [auth] says; over "
                    f"stdio the caller is given by --claims or the ${TOKEN_ENV} token.")
    serve.add_argument("--policy", required=True, metavar="P", help="policy file (TOML)")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                       help="stdio (default) or streamable HTTP")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000,
                       help="HTTP port (default 8000; 0 picks a free one, printed on stderr)")
    serve.add_argument("--claims", metavar="C", help="stdio only: JSON claims of the caller, trusted "
                       "as already verified (for local use and the demo)")
    serve.add_argument("--step-up", action="store_true",
                       help="HTTP only: answer a call that only lacks scopes with 403 and "
                            'WWW-Authenticate: Bearer error="insufficient_scope", scope="..."')
    serve.add_argument("--refresh-seconds", type=float, default=2.0, metavar="S",
                       help="every S seconds re-read a changed policy and re-check connected "
                            "sessions, sending tools/list_changed when their tools change "
                            "(default 2; 0 turns it off)")
    serve.set_defaults(func=run_serve)

    demo = subparsers.add_parser(
        "demo", help="see the guard and the strict client at work on a real MCP connection",
        description="Start the mission-control server with the embedded default policy, connect a "
                    "real MCP client over stdio, and show tools/list with requirements, the client's "
                    "verdicts, one allowed call and one denied call with its unmet requirements.")
    demo.set_defaults(func=run_demo)


__all__ = ["BAD_INPUT", "register", "run_demo", "run_serve"]
