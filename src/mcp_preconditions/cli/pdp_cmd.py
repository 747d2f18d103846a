"""The `pdp` subcommand: a policy served as an AuthZEN Access Evaluation API 1.0 decision point
(SPEC §16, docs/authzen.md), its policy file watched (hot reload). Parsing, wiring and printing only:
the answers are `authzen/`'s, the decisions the guard's.

Exit codes: 0 done, 2 bad input (message on stderr as `mcp-preconditions: error: ...`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys

from ..drivers.bundle import DEFAULT_FILE_POLL_SECONDS, poll_interval, poll_seconds
from ..drivers.reload import PolicyReloader
from ..guard import Guard
from ..policy.load import load_policy
from ._output import PROG
from ._resolvers import add_resolver_option, resolvers_from
from ._sockets import http_address, listening_socket

CONNECTIONS = 1000  # connections and requests under way at once; beyond, 503 and closed


def run_pdp(args: argparse.Namespace) -> int:
    """`pdp`: answer AuthZEN requests on `--listen` until interrupted."""
    host, port = http_address(args.listen, "--listen")
    watch = poll_interval(args.policy, poll_seconds(args.policy_poll_seconds))
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    guard = Guard(load_policy(args.policy), resolvers=resolvers_from(args))
    sock = listening_socket(host, port, "--listen")
    try:
        asyncio.run(_serve(guard, args.policy, sock, watch))
    except KeyboardInterrupt:
        return 0
    finally:
        sock.close()
    return 0


async def _serve(guard: Guard, policy: str, sock: socket.socket, watch: float | None) -> None:
    import uvicorn

    from ..authzen import DecisionPoint
    from ..authzen.app import AuthzenApp
    from ..rebinding import Security

    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    app = AuthzenApp(DecisionPoint(guard), url, Security.for_host(host))
    reloader = PolicyReloader(guard, policy, interval=watch or 1.0)
    if watch is not None:
        reloader.start()
    print(f"{PROG}: AuthZEN decision point on {url} (policy {policy}, revision {guard.revision})",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", http="httptools",
                            access_log=False, server_header=False, limit_concurrency=CONNECTIONS)
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        reloader.stop()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pdp` to the main parser."""
    pdp = subparsers.add_parser(
        "pdp", help="answer AuthZEN access evaluation requests with a policy (a decision point)",
        description="Serve the OpenID AuthZEN Access Evaluation API 1.0 from a policy: POST "
                    "/access/v1/evaluation, POST /access/v1/evaluations and GET "
                    "/.well-known/authzen-configuration. A request is read as a call of one of the "
                    "policy's tools and decided exactly as the guard decides it (docs/authzen.md). "
                    "When the policy's [auth] verifies tokens, the calling enforcement point needs "
                    "a bearer token it accepts.")
    pdp.add_argument("--policy", required=True, metavar="P", help="policy file (TOML)")
    pdp.add_argument("--listen", required=True, metavar="http://HOST:PORT",
                     help="where to listen (port 0 picks a free one; the address is printed on "
                          "stderr)")
    pdp.add_argument("--policy-poll-seconds", metavar="S",
                     help=f"re-read the policy file every S seconds when it changed (default "
                          f"{DEFAULT_FILE_POLL_SECONDS:g}; 0 turns watching off)")
    add_resolver_option(pdp)
    pdp.set_defaults(func=run_pdp)


__all__ = ["register", "run_pdp"]
