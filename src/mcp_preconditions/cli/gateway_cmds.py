"""The `gateway` subcommand: put the guard in front of MCP servers this library did not build
(SPEC §10, §12): one server (`-- COMMAND`, `--upstream-url`), a desktop client's `mcpServers`
(`--servers`), or a gateway.toml (`--config`). Argument checking, wiring and starting only; the
gateway itself lives in gateway/.

Exit codes: 0 done, 2 bad input (one line on stderr as `mcp-preconditions: error: ...`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio

from ..decision_sinks import JsonlRecorder, build_recorder
from ..decisions import (
    DecisionRecorder,
    FanOutRecorder,
    ToolLabels,
    caller_record,
    decision_record,
)
from ..errors import InputError
from ..files import read_claims
from ..guard import Guard
from ..namespaces import LiveSources
from ..policy.load import PolicySource
from ..principal import ANONYMOUS, Credentials, Principal
from . import _approvals as approvals
from . import _credentials as credentials
from . import _pages
from ._listener_options import add_http_options, listener_limits
from ._output import PROG
from ._resolvers import add_resolver_option, resolvers_from
from ._sockets import http_address, listening_socket
from ._upstream import add_upstream_options, target_from, upstream_environment

if TYPE_CHECKING:  # the gateway needs the mcp extra; imported when the command runs
    from ..gateway import Gateway, GatewayConfig
    from ..gateway.downstream.app import Pages
    from ..gateway.replicas import ReplicaOptions
    from ..telemetry import Metrics

SINGLE_KEY = "upstream"  # the one server of the single-upstream forms
SERVICE_NAME = "mcp-preconditions-gateway"  # in traces, unless OTEL_SERVICE_NAME names another


@dataclass
class Prepared:
    """A gateway wired as its command line says, not serving yet (`run_gateway` serves it; the
    in-process tests serve its ASGI app themselves: tests/fixtures/inprocess.py)."""

    gateway: Gateway
    listen: tuple[str, int] | None  # None: stdio
    metrics_at: tuple[str, int] | None  # --metrics-listen
    tasks: list[Callable[[], Coroutine[Any, Any, None]]]  # the policy poller, the pages' listener
    announce: str
    pages: Pages | None
    tracing: Any  # what to shut down at the end (None: tracing is off)


def run_gateway(args: argparse.Namespace) -> int:
    """`gateway`: check the command line, load the policy, serve until the listener ends."""
    prepared = prepare_gateway(args)
    try:
        return _serve(args, prepared.gateway, prepared.listen, prepared.metrics_at, prepared.tasks,
                      prepared.announce, prepared.pages)
    except KeyboardInterrupt:
        return 0
    finally:
        if prepared.tracing is not None:
            prepared.tracing.shutdown()  # the spans still queued are exported now


def prepare_gateway(args: argparse.Namespace) -> Prepared:
    """Check the command line, load the policy and wire the gateway (InputError: bad input)."""
    from ..gateway import Gateway, replicas
    from ..telemetry import Metrics, configure_tracing
    from ..telemetry.gateway import GatewayTelemetry

    config, policy = _servers(args)
    listen = _listen(args.listen or config.listen or "stdio")
    claims = args.claims if args.claims is not None else config.claims
    if listen is not None and claims is not None:
        raise InputError("--claims is for --listen stdio only; over HTTP each call's bearer token "
                         "decides who is calling")
    metrics_at = (http_address(args.metrics_listen, "--metrics-listen")
                  if args.metrics_listen is not None else None)
    options = replicas.options_from(policy, args.policy_poll_seconds, args.policy_public_key,
                                    args.replica_id)
    source = replicas.load_source(options)
    _logging(_log_level(args.log_level))
    tracing = configure_tracing(service_name=SERVICE_NAME)  # an unusable OTEL_* setting: exit 2 now
    label = _single_label(args) if args.config is None and args.servers is None else None
    gateways: list[Gateway] = []  # the gateway names each decision's server; it is made next
    recorder = _recorder(args.decision_log, source, listen is None, replicas.labels(options, label),
                         lambda tool: gateways[0].server_labels(tool))
    metrics = Metrics()
    wired = credentials.wire(args, config, source, listen, metrics)  # SPEC §14; none: nothing
    live = LiveSources(approvals_url=approvals.pages_url(args, source, listen))  # SPEC §15
    guard = Guard(source, resolvers=[*resolvers_from(args), *([wired.resolver] if wired.resolver
                                                             else [])], recorder=recorder, live=live)
    pages = _pages.pages(args, wired, guard, source, listen,  # SPEC §14, §15; none: nothing
                         lambda tool: approvals.tool_facts(gateways[0], tool) if gateways else None)
    if listen is not None:  # SPEC §16: the policy's decision point beside /mcp, when it says so
        pages = _pages.with_decision_point(pages, guard, args.public_url)
    gateway = Gateway(guard, config.servers, _credentials(listen, claims),
                      environment=wired.environment(upstream_environment(source)),
                      telemetry=GatewayTelemetry(metrics))
    gateways.append(gateway)
    credentials.listing_accounts(wired, gateway)  # SPEC §17: a server that lists only to an account
    tasks = _reloading(guard, gateway, options, metrics, approvals.reload_check(args, listen))
    names = ", ".join(s.key for s in config.servers)
    announce = (f"{PROG}: gateway for {label or names} on {{url}} (policy {policy}, revision "
                f"{guard.revision}, replica {options.replica()})")
    if wired.pages_sock is not None and pages is not None:
        from ..gateway.downstream.listener import pages_task

        tasks.append(pages_task(pages, wired.pages_sock, listener_limits(args)))
        print(f"{PROG}: pages on {wired.base_url}", file=sys.stderr, flush=True)
    return Prepared(gateway, listen, metrics_at, tasks, announce, pages, tracing)


def _serve(args: argparse.Namespace, gateway: Gateway, listen: tuple[str, int] | None,
           metrics_at: tuple[str, int] | None, tasks: list[Callable[[], Coroutine[Any, Any, None]]],
           announce: str, pages: Pages | None = None) -> int:
    """Serve on stdio or HTTP until the listener ends; `/metrics` on the HTTP listener, or on a
    listener of its own (`--metrics-listen`); the pages on the HTTP listener (a stdio gateway's
    are a task of their own). The exit status (128 + a signal that stopped a stdio gateway)."""
    from ..gateway.downstream.listener import Limits, serve_http, serve_stdio

    metrics = gateway.telemetry.metrics
    assert metrics is not None
    sock = listener = None
    try:
        limits = Limits()
        if listen is not None:
            limits = listener_limits(args)
            sock = listening_socket(*listen, "--listen")
        if metrics_at is not None:
            from ..telemetry import MetricsListener  # (Starlette and a WSGI server: only then)

            listener = MetricsListener(metrics, *metrics_at)
            print(f"{PROG}: metrics on {listener.url}", file=sys.stderr, flush=True)
        if sock is None:
            status = anyio.run(serve_stdio, gateway, *tasks)
            return status if isinstance(status, int) else 0
        http = sock
        anyio.run(lambda: serve_http(gateway, http, announce, *tasks, limits=limits,
                                     metrics=metrics if listener is None else None, pages=pages))
        return 0
    finally:
        if sock is not None:
            sock.close()
        if listener is not None:
            listener.close()


def _servers(args: argparse.Namespace) -> tuple[GatewayConfig, str]:
    """The servers and the policy the command line names, in one of its three forms."""
    from ..gateway import HttpTarget, ServerSpec, config

    single = bool(args.upstream_url is not None or [c for c in args.command if c != "--"])
    if args.config is not None:
        if args.policy is not None or args.servers is not None or single:
            raise InputError("--config names the policy and the servers: give no --policy, "
                             "--servers, --upstream-url or command with it")
        found = config.load_config(args.config)
        assert found.policy is not None
        return found, found.policy
    if args.policy is None:
        raise InputError("no policy: give --policy P (or --config gateway.toml)")
    if args.servers is not None:
        if single:
            raise InputError("--servers names the servers: give no --upstream-url or command with it")
        return config.load_servers(args.servers), args.policy
    target = target_from(args, None)
    spec = (ServerSpec(SINGLE_KEY, "", url=target.url, headers=dict(target.headers))
            if isinstance(target, HttpTarget) else
            ServerSpec(SINGLE_KEY, "", command=target.command, args=tuple(target.args)))
    return config.single_server(spec), args.policy


def _recorder(log_file: str | None, source: PolicySource, stdio: bool, labels: dict[str, str],
              tool_labels: ToolLabels) -> DecisionRecorder:
    """Where decisions are recorded: the policy's `[decision_log]`, plus `--decision-log FILE`
    (JSON lines, the operator's whole record). Over stdio the records on stderr are the caller's
    view (`caller_record`): a desktop client shows the gateway's stderr to its user, who is the
    caller, so it names no confidential requirement (docs/gateway.md). Lines are held until the
    loop's step ends, never past the answer (`decisions._hold`): off the call's path."""
    sink = build_recorder(source, labels, tool_labels,
                          logged=caller_record if stdio else decision_record, held=True)
    if log_file is None:
        return sink
    try:
        operator = JsonlRecorder(log_file, labels, tool_labels, held=True)
    except OSError as exc:
        raise InputError(f"--decision-log: cannot open '{log_file}' for appending: "
                         f"{exc.strerror or exc}") from None
    return FanOutRecorder(sink, operator)


def _single_label(args: argparse.Namespace) -> str:
    """The `upstream` label of a single-upstream gateway's records: its URL or command line."""
    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
    return str(args.upstream_url) if args.upstream_url is not None else " ".join(command)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(value: str) -> int:
    """`--log-level`, checked as typed (any case)."""
    if value.upper() not in LOG_LEVELS:
        raise InputError(f"--log-level: expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
    level: int = getattr(logging, value.upper())
    return level


def _logging(level: int) -> None:
    """The gateway's logs on stderr at `level` (`--log-level`: why a token, an exchange, a
    refresh, a connection or a secret was refused is WARNING). Other libraries stay at WARNING;
    the records (a decision per call, policy reloads with their revisions, who decided an
    approval) are printed whatever the level."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    # A decision record per call: its log record needs none of what logging gathers by default
    # (the format is name and message), and finding the caller's frame cost the gateway 2 µs a call.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    logging.getLogger("mcp_preconditions").setLevel(level)
    records = min(level, logging.INFO)
    logging.getLogger("mcp_preconditions.decisions").setLevel(logging.INFO)
    logging.getLogger("mcp_preconditions.policy").setLevel(records)  # reloads, with revisions
    logging.getLogger("mcp_preconditions.approvals").setLevel(records)  # who decided a request


def _credentials(listen: tuple[str, int] | None, claims: str | None) -> Callable[[Any], Credentials]:
    """Who is calling: over HTTP each request's bearer token (the raw header: the guard verifies
    it, and its cache makes every later call of the same token one lookup); over stdio whoever
    started the gateway (trusted --claims, else anonymous)."""
    if listen is None:
        fixed = _stdio_credentials(claims)
        return lambda _call: fixed
    from ..auth.header import credentials_from_authorization_header

    def of(call: Any) -> Credentials:
        return credentials_from_authorization_header(call.authorization)
    return of


def _reloading(guard: Guard, gateway: Gateway, options: ReplicaOptions, metrics: Metrics,
               check: Callable[[PolicySource], None]
               ) -> list[Callable[[], Coroutine[Any, Any, None]]]:
    """The policy poller as a task for the gateway's task group (none when not watched). A new
    policy this gateway cannot serve (`check`) is refused; after a swap the servers' tool names
    are checked against the new policy and clients list again; every attempt counts in
    `policy_reloads_total`, a swap that leaves some server's policy unusable (a near miss of one
    of its tools) as `unusable`."""
    from ..gateway import replicas
    from ..telemetry import watch_policy

    reloader = replicas.reloader(guard, options)
    if reloader is None:
        return []
    reloader.add_check(check)

    async def applied(_change: Any) -> Literal["success", "unusable"]:
        await gateway.policy_changed()
        return "unusable" if any(m.problem is not None for m in gateway.fleet) else "success"

    watch_policy(metrics, reloader, applied)
    return [replicas.keep_current(reloader)]


def _listen(value: str) -> tuple[str, int] | None:
    """None for stdio, else (host, port). (A gateway.toml's `listen` was checked with the file.)"""
    from ..gateway.config import listen_address

    try:
        return listen_address(value)
    except ValueError as exc:
        raise InputError(f"--listen: {exc}") from None


def _stdio_credentials(claims: str | None) -> Credentials:
    """Over stdio the caller is whoever started the gateway: trusted --claims, else anonymous."""
    if claims is None:
        return ANONYMOUS
    return Credentials(principal=Principal.from_claims(read_claims(claims)))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `gateway` to the main parser."""
    parser = subparsers.add_parser(
        "gateway", help="guard MCP servers you did not write (stdio commands or HTTP URLs)",
        usage=f"{PROG} gateway --policy P [--listen stdio | --listen http://HOST:PORT] [--claims C]\n"
              "        [--policy-poll-seconds S] [--policy-public-key FILE] [--replica-id ID]\n"
              "        [--metrics-listen http://HOST:PORT] [--pages-listen http://127.0.0.1:PORT]\n"
              "        [--public-url URL] [--log-level LEVEL]\n"
              "        (--upstream-url URL [--upstream-header NAME=env:VAR ...] | -- COMMAND [ARG ...]\n"
              "         | --servers DESKTOP_CONFIG.json)\n"
              f"   or: {PROG} gateway --config gateway.toml [--listen ...] [options]",
        description="Serve the servers' tools, resources and prompts with every tool call decided by "
                    "the policy first. tools/list shows each tool's requirements (its own plus the "
                    "policy's, less the confidential ones). Several servers' names carry a prefix "
                    "(KEY__ by default). The caller's token is never sent to a server. Prometheus "
                    "metrics are at GET /metrics on the HTTP listener, with no token asked (they "
                    "name no caller, token or confidential requirement); on a public listener, or "
                    "for stdio, serve them with --metrics-listen on an address your network "
                    "keeps private. Traces: the OTEL_* variables (extra otel).")
    parser.add_argument("--policy", metavar="P",
                        help="policy file (TOML), or an http(s):// URL of a policy bundle")
    parser.add_argument("--config", metavar="FILE",
                        help="a gateway.toml naming the policy, the listener and the servers")
    parser.add_argument("--servers", metavar="FILE",
                        help='a desktop client\'s config JSON: its {"mcpServers": {...}} are guarded')
    parser.add_argument("--policy-poll-seconds", metavar="S",
                        help="re-read the policy every S seconds (default: 2 for a file, 10 for "
                             "a URL; 0 turns watching off)")
    parser.add_argument("--policy-public-key", metavar="FILE",
                        help="Ed25519 public key (PEM or 32 raw bytes): a bundle must carry a valid "
                             "detached signature at URL.sig")
    parser.add_argument("--replica-id", metavar="ID",
                        help="this replica's name in every decision record (default: "
                             "$MCP_PRECONDITIONS_REPLICA_ID, else hostname:pid)")
    parser.add_argument("--listen", default=None, metavar="stdio|http://HOST:PORT",
                        help="stdio (default) or streamable HTTP at /mcp on HOST:PORT")
    parser.add_argument("--metrics-listen", metavar="http://HOST:PORT",
                        help="serve GET /metrics on a listener of its own (a stdio gateway has no "
                             "other; over HTTP it moves /metrics off the main listener, which then "
                             "answers 404 there)")
    parser.add_argument("--decision-log", metavar="FILE",
                        help="append every decision record to FILE as JSON lines, whole (over "
                             "stdio the records on stderr are what the caller may see: a desktop "
                             "client shows stderr to its user)")
    parser.add_argument("--claims", metavar="C",
                        help="stdio only: JSON claims of the local caller (default: anonymous)")
    parser.add_argument("--pages-listen", metavar="http://127.0.0.1:PORT",
                        help="stdio only: serve the gateway's pages (connect links for kind = "
                             "\"oauth\" credentials, docs/credentials.md; approval pages, "
                             "docs/approvals.md) on this address")
    parser.add_argument("--log-level", default="WARNING", metavar="LEVEL",
                        help="the gateway's own logs on stderr: DEBUG, INFO, WARNING (default: every "
                             "refused token, exchange, refresh, connection and per-subject secret, "
                             "with its reason) or ERROR; decision records are printed whatever it is")
    parser.add_argument("--public-url", metavar="URL",
                        help="where browsers reach the gateway's pages when it is not the listener's "
                             "own address (a proxy in front): connect links, approval links and "
                             "the sign-in's redirects are made with it")
    add_http_options(parser)
    add_resolver_option(parser)
    add_upstream_options(parser)  # last: the command takes every remaining argument
    parser.set_defaults(func=run_gateway)


__all__ = ["register", "run_gateway"]
