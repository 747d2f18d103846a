"""The `gateway` subcommand: put the guard in front of an MCP server this library did not build
(SPEC §10). Argument checking, wiring and starting only; the gateway itself lives in gateway/.

Exit codes: 0 done, 2 bad input (one line on stderr as `mcp-preconditions: error: ...`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import InputError
from ..files import read_claims
from ..guard import Guard
from ..principal import ANONYMOUS, Credentials, Principal
from ._output import PROG
from ._resolvers import add_resolver_option, resolvers_from
from ._sockets import http_address, listening_socket
from ._upstream import add_upstream_options, target_from

if TYPE_CHECKING:  # the gateway needs the mcp extra; imported when the command runs
    from ..gateway import Gateway
    from ..gateway.replicas import ReplicaOptions


def run_gateway(args: argparse.Namespace) -> int:
    """`gateway`: check the command line, load the policy, serve until the listener ends."""
    from ..gateway import Gateway, Upstream, replicas
    from ..gateway.run import serve_http, serve_stdio
    from ..integrations._calls import credentials_from_request

    listen = _listen(args.listen)
    if listen is not None and args.claims is not None:
        raise InputError("--claims is for --listen stdio only; over HTTP each call's bearer token "
                         "decides who is calling")
    options = replicas.options_from(args.policy, args.policy_poll_seconds, args.policy_public_key,
                                    args.replica_id)
    source = replicas.load_source(options)
    target = target_from(args, source)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("mcp_preconditions.decisions").setLevel(logging.INFO)
    logging.getLogger("mcp_preconditions.policy").setLevel(logging.INFO)  # reloads, with revisions
    guard = Guard(source, resolvers=resolvers_from(args), labels=replicas.labels(options, target.label))
    if listen is None:
        fixed = _stdio_credentials(args.claims)
        gateway = Gateway(guard, Upstream(target), lambda _ctx: fixed)
        anyio.run(serve_stdio, gateway, *_reloading(guard, gateway, options))
        return 0
    gateway = Gateway(guard, Upstream(target), lambda ctx: credentials_from_request(ctx.request))
    sock = listening_socket(*listen, "--listen")
    try:
        anyio.run(serve_http, gateway, sock,
                  f"{PROG}: gateway for {target.label} on {{url}} (policy {args.policy}, "
                  f"revision {guard.revision}, replica {options.replica()})",
                  *_reloading(guard, gateway, options))
    except KeyboardInterrupt:
        return 0
    finally:
        sock.close()
    return 0


def _reloading(guard: Guard, gateway: Gateway, options: ReplicaOptions
               ) -> list[Callable[[], Coroutine[Any, Any, None]]]:
    """The policy poller as a task for the gateway's task group (none for an unpolled file). After
    a swap the upstream's tools are applied again, so the new policy's name checks see them."""
    from ..gateway import replicas

    reloader = replicas.reloader(guard, options, lambda _change: gateway.tools.reload_quietly())
    return [] if reloader is None else [replicas.keep_current(reloader)]


def _listen(value: str) -> tuple[str, int] | None:
    """None for stdio, else (host, port)."""
    if value == "stdio":
        return None
    return http_address(value, "--listen", "'stdio' or 'http://HOST:PORT'")


def _stdio_credentials(claims: str | None) -> Credentials:
    """Over stdio the caller is whoever started the gateway: trusted --claims, else anonymous."""
    if claims is None:
        return ANONYMOUS
    return Credentials(principal=Principal.from_claims(read_claims(claims)))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `gateway` to the main parser."""
    parser = subparsers.add_parser(
        "gateway", help="guard an MCP server you did not write (stdio command or HTTP URL)",
        usage=f"{PROG} gateway --policy P [--listen stdio | --listen http://HOST:PORT] [--claims C]\n"
              "        [--policy-poll-seconds S] [--policy-public-key FILE] [--replica-id ID]\n"
              "        (--upstream-url URL [--upstream-header NAME=env:VAR ...] | -- COMMAND [ARG ...])",
        description="Serve the upstream MCP server's tools, resources and prompts with every tool call "
                    "decided by the policy first. tools/list shows each tool's requirements (its own "
                    "plus the policy's). The caller's token is never sent upstream.")
    parser.add_argument("--policy", required=True, metavar="P",
                        help="policy file (TOML), or an http(s):// URL of a policy bundle")
    parser.add_argument("--policy-poll-seconds", metavar="S",
                        help="poll the policy every S seconds (default: 10 for a URL; a file is "
                             "not polled unless this is given)")
    parser.add_argument("--policy-public-key", metavar="FILE",
                        help="Ed25519 public key (PEM or 32 raw bytes): a bundle must carry a valid "
                             "detached signature at URL.sig")
    parser.add_argument("--replica-id", metavar="ID",
                        help="this replica's name in every decision record (default: "
                             "$MCP_PRECONDITIONS_REPLICA_ID, else hostname:pid)")
    parser.add_argument("--listen", default="stdio", metavar="stdio|http://HOST:PORT",
                        help="stdio (default) or streamable HTTP at /mcp on HOST:PORT")
    parser.add_argument("--claims", metavar="C",
                        help="stdio only: JSON claims of the local caller (default: anonymous)")
    add_resolver_option(parser)
    add_upstream_options(parser)  # last: the command takes every remaining argument
    parser.set_defaults(func=run_gateway)


__all__ = ["register", "run_gateway"]
