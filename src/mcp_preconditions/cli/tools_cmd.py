"""The `tools` subcommand: print a live MCP server's `tools/list` (every page) as JSON, so that
`lint`, `check` and `policy test` run against a real server's tools; with `--policy`, each tool
carries the requirements the gateway would list for it. Argument checking and printing only.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from ..drivers.bundle import load_policy_source
from ..errors import RequirementError
from ..guard import Guard
from ..policy.load import PolicySource
from ..requirements import validate
from ..resolvers import Resolver
from ..wire import wire_requirements, with_requirements
from ._output import OK, PROG, print_json
from ._resolvers import add_resolver_option, resolvers_from
from ._upstream import add_upstream_options, target_from


def run_tools(args: argparse.Namespace) -> int:
    """`tools`: list the upstream's tools; with a policy, as the gateway would list them."""
    from ..live_tools import list_tools

    source = load_policy_source(args.policy) if args.policy is not None else None
    target = target_from(args, source)
    resolvers = resolvers_from(args)
    tools = anyio.run(lambda: list_tools(target, timeout=args.timeout))
    if source is not None:
        tools = as_the_gateway_lists(tools, source, resolvers)
    print_json({"tools": tools})
    return OK


def as_the_gateway_lists(tools: list[dict[str, Any]], source: PolicySource,
                         resolvers: list[Resolver]) -> list[dict[str, Any]]:
    """Each tool with its effective requirements (its own ∪ the policy's `[tools.NAME]`) less the
    confidential ones, on the wire and in the `_meta` mirror. A tool whose own requirements the
    gateway would refuse (malformed, or a form no resolver accepts) carries the policy's alone,
    as there."""
    registry = Guard(source, resolvers=resolvers).snapshot.registry
    own: dict[str, list[str]] = {}
    for tool in tools:
        name = tool.get("name")
        if not isinstance(name, str):
            continue
        try:
            reqs = list(wire_requirements(tool))
        except RequirementError:
            continue
        if not any(f.severity == "error" for f in validate(name, reqs, registry)):
            own[name] = reqs
    guard = Guard(source, own, resolvers=resolvers)
    return [with_requirements(t, guard.advertised_for(t["name"])) if isinstance(t.get("name"), str)
            else t for t in tools]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `tools` to the main parser."""
    parser = subparsers.add_parser(
        "tools", help="print a live MCP server's tools/list as JSON",
        usage=f"{PROG} tools [--policy P] [--timeout S]\n"
              "        (--upstream-url URL [--upstream-header NAME=env:VAR ...] | -- COMMAND [ARG ...])",
        description="Start or reach an MCP server (the same upstream options as `gateway`), read its "
                    'whole tools/list (every page) and print it as JSON {"tools": [...]}, ready for '
                    "lint --tools, check --tools and policy test. With --policy, each tool carries "
                    "the requirements the gateway would list: its own plus the policy's, less the "
                    "confidential ones.")
    parser.add_argument("--policy", metavar="P",
                        help="policy file (TOML) or bundle URL: list requirements as the gateway would")
    parser.add_argument("--timeout", type=_seconds, default=30.0, metavar="S",
                        help="give up after S seconds, start-up included (default 30)")
    add_resolver_option(parser)
    add_upstream_options(parser)  # last: the command takes every remaining argument
    parser.set_defaults(func=run_tools)


__all__ = ["as_the_gateway_lists", "register", "run_tools"]
