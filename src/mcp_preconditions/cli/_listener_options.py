"""The gateway's HTTP listener options (SPEC §10; docs/gateway.md): the flags of its bounds, and
the `Limits` they make, each flag checked as typed (a bad one is one line and exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:  # the gateway needs the mcp extra; imported when the command runs
    from ..gateway.downstream.listener import Limits


def add_http_options(parser: argparse.ArgumentParser) -> None:
    """The HTTP listener's bounds (SPEC §10; docs/gateway.md)."""
    parser.add_argument("--header-timeout-seconds", default="10", metavar="S",
                        help="HTTP: close a connection whose request headers are not complete "
                             "within S seconds (default 10)")
    parser.add_argument("--max-connections", default="1000", metavar="N",
                        help="HTTP: at most N connections and requests at once; beyond that only "
                             "/healthz and /readyz are answered, the rest get 503 (default 1000)")
    parser.add_argument("--max-sessions", default="10000", metavar="N",
                        help="HTTP: at most N open 2025-11-25 sessions in all; more get 503 "
                             "(default 10000)")
    parser.add_argument("--max-sessions-per-principal", default="64", metavar="N",
                        help="HTTP: at most N open 2025-11-25 sessions per caller (issuer and "
                             "subject; anonymous callers share one bound); the caller's least "
                             "recently used idle session ends to make room, else 429 (default 64)")
    parser.add_argument("--max-streams-per-principal", default="16", metavar="N",
                        help="HTTP: at most N long-lived streams (GET, subscriptions/listen) per "
                             "caller; more get 429 (default 16)")
    parser.add_argument("--sse-poll-seconds", default=None, metavar="S",
                        help="HTTP: close a 2025-11-25 call's stream when it has run S seconds "
                             "without its answer, for the client to resume it with GET and "
                             "Last-Event-ID (SSE polling, SEP-1699); default: only when the "
                             "server behind closes its own")


def listener_limits(args: argparse.Namespace) -> Limits:
    """The HTTP listener's bounds, each flag checked as typed (SPEC §10)."""
    from ..gateway.downstream.listener import Limits

    return Limits(_positive(args.header_timeout_seconds, "--header-timeout-seconds", float),
                  int(_positive(args.max_connections, "--max-connections", int)),
                  int(_positive(args.max_sessions, "--max-sessions", int)),
                  int(_positive(args.max_sessions_per_principal, "--max-sessions-per-principal", int)),
                  int(_positive(args.max_streams_per_principal, "--max-streams-per-principal", int)),
                  poll_seconds=(None if args.sse_poll_seconds is None else
                                _positive(args.sse_poll_seconds, "--sse-poll-seconds", float)))


def _positive(value: str | None, option: str, kind: Callable[[str], float]) -> float:
    if value is None:
        raise InputError(f"{option}: missing")
    try:
        number = kind(value)
    except ValueError:
        number = -1.0
    if not number > 0 or number == float("inf"):
        raise InputError(f"{option}: expected a positive number, got {value!r}")
    return number
