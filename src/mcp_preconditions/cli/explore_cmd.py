"""The `explore` subcommand: read the policy, the tools and the presets once, then serve the policy
explorer page (explore/) until interrupted. Argument checking, reading and starting only.

The page is on loopback unless `--allow-remote` says otherwise: it shows the whole policy,
confidential requirements included, to whoever has its URL, which carries a token made for this run.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from ..client import Knowledge
from ..errors import FileReadError, PolicyError, UsageError
from ..files import read_bounded, read_claims, read_json, read_tools
from ._output import PROG, warn
from ._resolvers import add_resolver_option, resolvers_from
from ._sockets import http_address, is_loopback, listening_socket
from ._upstream import add_upstream_options, target_from, upstream_environment
from .core_cmds import TOOLS_HELP

DEFAULT_LISTEN = "http://127.0.0.1:8088"
_UNLOGGED = logging.NullHandler()


def run_explore(args: argparse.Namespace) -> int:
    """`explore`: check the command line, read every input, serve the page until Ctrl-C."""
    import uvicorn

    from ..explore import Inputs, Workbench, build_app
    from ..explore.access import new_token

    host, port = http_address(args.listen, "--listen")
    if not is_loopback(host) and not args.allow_remote:
        raise UsageError(f"--listen: {host} is not a loopback address, and the page shows the whole "
                         "policy, confidential requirements included, to whoever has its URL, whose "
                         "token crosses the network unencrypted; add --allow-remote to serve it to "
                         "other machines anyway")
    tools, tools_label, credentials = tools_from(args)
    inputs = Inputs(policy_path=args.policy, policy_text=_policy_text(args.policy), tools=tools,
                    tools_label=tools_label, presets=_presets(args.claims),
                    knowledge=_knowledge(args.knowledge), logs=tuple(args.log),
                    resolvers=tuple(resolvers_from(args)), credentials=credentials)
    # The page checks each edit's `[tools.NAME]` against the tools as a server does (Guard.know_tools),
    # which logs a name that matches no tool: the page lists it, the terminal would at each keystroke.
    logging.getLogger("mcp_preconditions.policy").addHandler(_UNLOGGED)
    bench = Workbench(inputs)
    for line in bench.compile(inputs.policy_text).problems:  # the page shows them too, to be fixed
        warn(line)
    token = new_token()
    app = build_app(bench, token, ["*"] if args.allow_remote else _loopback_names(host))
    sock = listening_socket(host, port, "--listen")
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"{PROG}: explorer for {args.policy} and {tools_label} ({len(tools)} tools) on "
          f"http://{shown}:{bound_port}/?token={token} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


def tools_from(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str, dict[str, str] | None]:
    """The tools to explore, where they came from, and the servers with credentials by key with
    their kind (a gateway config's; None: not known): the one place a tool source is chosen. A
    tools file; a gateway.toml's servers, or a desktop config's (`gateway --servers`), listed live
    under their visible names with the `credential:KEY` the gateway adds; or one live server
    (`-- COMMAND`, `--upstream-url`), as `mcp-preconditions tools` lists it."""
    live = args.upstream_url is not None or any(c != "--" for c in args.command)
    if [args.tools is not None, args.config is not None, args.servers is not None, live].count(True) != 1:
        raise UsageError("give the tools one way: --tools T, --config gateway.toml, --servers FILE, "
                         "--upstream-url URL, or a command after --")
    if args.tools is not None:
        return read_tools(args.tools), args.tools, None
    import anyio

    from ..live_tools import list_servers_tools, list_tools
    if args.config is not None or args.servers is not None:
        from ..gateway.config import load_config, load_servers
        config = load_config(args.config) if args.config is not None else load_servers(args.servers)
        environment = upstream_environment(None)
        kinds = {s.key: s.credentials.kind for s in config.servers if s.credentials is not None}
        return (anyio.run(lambda: list_servers_tools(config.servers, environment)),
                args.config if args.config is not None else args.servers, kinds)
    target = target_from(args, None)
    return anyio.run(lambda: list_tools(target)), target.label, None


def _policy_text(path: str) -> str:
    """The policy file's text. A file that cannot be read stops here; one that does not validate is
    opened anyway, its problems on the page to be fixed."""
    try:
        data = read_bounded(path)
    except FileReadError as exc:
        raise PolicyError(path, [f"(file): {exc.problem}"]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(path, [f"(file): not UTF-8 ({exc.reason} at byte {exc.start})"]) from None


def _named(paths: list[str]) -> list[tuple[str, str]]:
    """(name, path) per file: its stem, numbered when two files share one."""
    out: list[tuple[str, str]] = []
    for path in paths:
        name, n = Path(path).stem or path, 2
        while any(name == taken for taken, _ in out):
            name, n = f"{Path(path).stem} ({n})", n + 1
        out.append((name, path))
    return out


def _presets(paths: list[str]) -> dict[str, dict[str, Any]]:
    return {name: read_claims(path) for name, path in _named(paths)}


def _knowledge(paths: list[str]) -> dict[str, Any]:
    presets: dict[str, Any] = {}
    for name, path in _named(paths):
        raw = read_json(path)
        Knowledge.from_dict(raw, source=path)  # refused now, not on the page
        presets[name] = raw
    return presets


def _loopback_names(host: str) -> list[str]:
    """The Host headers a loopback page answers: its own address and the loopback names."""
    return ["127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `explore` to the main parser."""
    parser = subparsers.add_parser(
        "explore", help="a local web page: who can do what, try calls, edit the policy, the "
                        "client's view, decision logs",
        description="Serve the policy explorer on a local web page: every tool allowed or denied for "
                    "a caller, with each requirement's outcome and reason; calls tried with "
                    "arguments; the policy edited and re-validated as you type (downloaded, never "
                    "saved); what a strict client would hide; decision logs over time. It reads the "
                    "files once and writes nothing.")
    parser.add_argument("--policy", required=True, metavar="P", help="policy file (TOML)")
    parser.add_argument("--tools", metavar="T",
                        help=TOOLS_HELP + " (or --config, --servers, or a live server)")
    parser.add_argument("--config", metavar="FILE",
                        help="a gateway.toml: its servers' tools, listed live under their visible "
                             "names")
    parser.add_argument("--servers", metavar="FILE",
                        help='a desktop client\'s config JSON, as `gateway --servers` reads it: its '
                             '{"mcpServers": {...}} tools, listed live under their visible names')
    parser.add_argument("--claims", action="append", default=[], metavar="C",
                        help="a caller preset: a JSON object of verified claims (repeatable)")
    parser.add_argument("--knowledge", action="append", default=[], metavar="K",
                        help='a client knowledge preset {"satisfied": [...], "unsatisfiable": [...]} '
                             "(repeatable)")
    parser.add_argument("--log", action="append", default=[], metavar="FILE",
                        help="a JSONL decision log, read again each time the page asks (repeatable)")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="http://HOST:PORT",
                        help=f"where the page is served (default {DEFAULT_LISTEN}; port 0 picks a "
                             "free one); a loopback address unless --allow-remote")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a non-loopback --listen: anyone who has the page's URL sees the "
                             "whole policy, and its token crosses the network unencrypted")
    add_resolver_option(parser)
    add_upstream_options(parser)  # last: the command takes every remaining argument
    parser.set_defaults(func=run_explore)


__all__ = ["register", "run_explore", "tools_from"]
