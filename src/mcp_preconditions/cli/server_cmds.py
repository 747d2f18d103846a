"""The `serve` subcommand: the guarded mission-control server for real MCP clients, on stdio or
streamable HTTP, its policy file watched (hot reload). Argument parsing, wiring and printing only.

Exit codes: 0 done, 2 bad input (message on stderr as `mcp-preconditions: error: ...`).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import socket
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ..drivers.bundle import DEFAULT_FILE_POLL_SECONDS, poll_interval, poll_seconds
from ..drivers.reload import PolicyReloader
from ..errors import InputError
from ..files import read_claims
from ..guard import Guard
from ..policy.load import load_policy
from ..principal import ANONYMOUS, Credentials, Principal
from ._output import PROG
from ._resolvers import add_resolver_option, resolvers_from
from ._sockets import http_address, listening_socket

if TYPE_CHECKING:  # the server and its telemetry need the mcp extra, imported when `serve` runs
    from ..integrations.mcp_sdk import GuardedMCPServer
    from ..telemetry import Metrics, MetricsListener, Tracing

TOKEN_ENV = "MCP_PRECONDITIONS_TOKEN"


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (pick a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number 0..65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0..65535, got {value}")
    return value


# --- serve ----------------------------------------------------------------------------------------
def _stdio_credentials(args: argparse.Namespace) -> Credentials:
    """Over stdio the caller is whoever started the process (MCP: credentials come from the
    environment): trusted claims from --claims, or a bearer token from $MCP_PRECONDITIONS_TOKEN."""
    if args.claims is not None:
        return Credentials(principal=Principal.from_claims(read_claims(args.claims)))
    token = os.environ.get(TOKEN_ENV)
    return Credentials(token=token) if token else ANONYMOUS


@dataclass
class PreparedServe:
    """`serve` wired as its command line says, not serving yet (`run_serve` serves it; the
    in-process tests serve it themselves: tests/fixtures/hosted.py)."""

    server: GuardedMCPServer
    metrics: Metrics
    metrics_at: tuple[str, int] | None  # --metrics-listen
    reloader: PolicyReloader  # watches the policy file when `watch` is not None
    watch: float | None  # seconds between looks at the policy file (None: not watched)
    tracing: Tracing | None  # what to shut down at the end (None: tracing is off)


def run_serve(args: argparse.Namespace) -> int:
    """`serve`: the guarded mission-control server on stdio or streamable HTTP."""
    from ..telemetry import MetricsListener

    prepared = prepare_serve(args)
    sock: socket.socket | None = None
    listener: MetricsListener | None = None
    try:
        if args.transport == "http":
            sock = listening_socket(args.host, args.port, "--host/--port")
        if prepared.metrics_at is not None:
            listener = MetricsListener(prepared.metrics, *prepared.metrics_at)
            print(f"{PROG}: metrics on {listener.url}", file=sys.stderr, flush=True)
        anyio.run(_serve, prepared, args, sock)
    except KeyboardInterrupt:
        return 0
    finally:
        _close(sock, listener, prepared.tracing)
    return 0


def prepare_serve(args: argparse.Namespace) -> PreparedServe:
    """Check the command line, load the policy and wire the server (InputError: bad input)."""
    from ..examples_server import build_server
    from ..telemetry import Metrics, configure_tracing, watch_policy

    if args.transport == "http" and args.claims is not None:
        raise InputError("--claims is for --transport stdio only; over HTTP each call's bearer "
                         "token decides who is calling")
    if args.transport == "stdio" and args.no_step_up:
        raise InputError("--no-step-up is for --transport http only: the 403 challenge is an HTTP "
                         "answer")
    if not 0 <= args.refresh_seconds < math.inf:  # NaN fails this too
        raise InputError(f"--refresh-seconds must be a finite number, 0 or more, got "
                         f"{args.refresh_seconds:g}")
    metrics_at = (http_address(args.metrics_listen, "--metrics-listen")
                  if args.metrics_listen is not None else None)
    watch = poll_interval(args.policy, poll_seconds(args.policy_poll_seconds))
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("mcp_preconditions.decisions").setLevel(logging.INFO)
    tracing = configure_tracing()  # first: an unusable OTEL_* setting is bad input, said at once
    guard = Guard(load_policy(args.policy), resolvers=resolvers_from(args))
    options: dict[str, Any] = {}
    if args.transport == "stdio":
        fixed = _stdio_credentials(args)
        options["credentials"] = lambda _request: fixed
    metrics = Metrics()
    if args.transport == "http" and metrics_at is None:  # /metrics on the HTTP listener
        options["metrics"] = metrics
    server = build_server(guard, **options)
    server.know_tools()  # a policy name that nearly matches a tool: exit 2 now, naming both
    if metrics_at is not None:  # counted for a listener of its own (stdio: nobody else could ask)
        server.preconditions.enable_metrics(metrics)
    preconditions = server.preconditions
    # Reloads and live-fact changes reach connected sessions as list_changed.
    reloader = PolicyReloader(guard, args.policy, interval=watch or 1.0,
                              on_change=lambda _change: preconditions.refresh())
    watch_policy(metrics, reloader)
    return PreparedServe(server, metrics, metrics_at, reloader, watch, tracing)


def _close(sock: socket.socket | None, listener: MetricsListener | None, tracing: Tracing | None
           ) -> None:
    if sock is not None:
        sock.close()
    if listener is not None:
        listener.close()
    if tracing is not None:
        tracing.shutdown()  # the spans still queued are exported now


async def _serve(prepared: PreparedServe, args: argparse.Namespace, sock: socket.socket | None
                 ) -> None:
    """Serve until the transport ends, watching the policy file (unless it is not watched) and,
    with --refresh-seconds, re-checking connected sessions."""
    server = prepared.server
    async with anyio.create_task_group() as tg:
        if prepared.watch is not None:
            prepared.reloader.start()
        if args.refresh_seconds > 0:
            tg.start_soon(server.preconditions.watch, args.refresh_seconds)
        if sock is None:
            await server.run_stdio_async()
        else:
            await _serve_http(prepared, args, sock)
        prepared.reloader.stop()
        tg.cancel_scope.cancel()


def http_app(prepared: PreparedServe, args: argparse.Namespace, url: str) -> Any:
    """The ASGI app `serve --transport http` serves at `url` (its /mcp): the server's streamable
    HTTP app, in the 403 step-up (unless --no-step-up) and the 401 sign-in challenge."""
    from ..integrations.step_up import InsufficientScopeChallenge, SignInChallenge

    server = prepared.server
    app: Any = server.streamable_http_app(host=args.host)
    if not args.no_step_up:  # SPEC §15: a call more scopes alone would allow is the 403 challenge
        app = InsufficientScopeChallenge(app, server.preconditions)
    # SPEC §15: a call that only lacks a token is the 401 challenge, at every protocol version.
    return SignInChallenge(app, server.preconditions, url)


async def _serve_http(prepared: PreparedServe, args: argparse.Namespace, sock: socket.socket
                      ) -> None:
    import uvicorn

    server = prepared.server
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/mcp"
    app = http_app(prepared, args, url)
    print(f"{PROG}: serving {server.name} on {url} "
          f"(policy {args.policy}, revision {server.guard.revision})", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


# --- parsers --------------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `serve` to the main parser."""
    serve = subparsers.add_parser(
        "serve", help="run the guarded example mission-control MCP server",
        description="Serve SEP-2487's mission-control example with every call guarded by the policy. "
                    f"Over HTTP each call's bearer token is verified as the policy's [auth] says; over "
                    f"stdio the caller is given by --claims or the ${TOKEN_ENV} token.")
    serve.add_argument("--policy", required=True, metavar="P", help="policy file (TOML)")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                       help="stdio (default) or streamable HTTP")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    serve.add_argument("--port", type=port_number, default=8000,
                       help="HTTP port (default 8000; 0 picks a free one, printed on stderr)")
    serve.add_argument("--claims", metavar="C", help="stdio only: JSON claims of the caller, trusted "
                       "as already verified (for local use and the demo)")
    serve.add_argument("--no-step-up", action="store_true",
                       help="HTTP only: answer a call that only lacks scopes in-band (a tool error "
                            "with its envelope) instead of the default 403 with WWW-Authenticate: "
                            'Bearer error="insufficient_scope", scope="..."')
    serve.add_argument("--policy-poll-seconds", metavar="S",
                       help=f"re-read the policy file every S seconds when it changed: a change "
                            f"is in force within S seconds (default {DEFAULT_FILE_POLL_SECONDS:g}; "
                            f"0 turns watching off)")
    serve.add_argument("--refresh-seconds", type=float, default=2.0, metavar="S",
                       help="every S seconds re-check connected sessions (live state and flags), "
                            "sending tools/list_changed when their tools change (default 2; 0 "
                            "turns it off); a policy reload notifies them at once")
    serve.add_argument("--metrics-listen", metavar="URL",
                       help="serve GET /metrics on a listener of its own, http://HOST:PORT (for "
                            "stdio; over HTTP it moves /metrics off the main listener)")
    add_resolver_option(serve)
    serve.set_defaults(func=run_serve)


__all__ = ["PreparedServe", "http_app", "prepare_serve", "register", "run_serve"]
