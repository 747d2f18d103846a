"""The `route` and `present` subcommands: argument parsing and printing only, no decisions.

Exit codes: 0 done, 2 bad input (message on stderr as `mcp-preconditions: error: ...`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

from ..errors import InputError
from ..files import read_tools
from ..presentation import (
    ANGIE,
    STANDARD,
    TIERS,
    Presentation,
    Route,
    RoutingPolicy,
    load_catalog,
    present,
    route_tools,
)
from ..presentation.preferences import is_unit
from ._output import OK, add_format, escape, fail, print_json, table

PRECEDENCES = {"standard": STANDARD, "angie": ANGIE}


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {text!r}") from None
    if not is_unit(value):
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {text!r}")
    return value


def _route_table(routes: list[Route]) -> str:
    lines = table([("TOOL", "MODEL", "REASON")] + [(r.tool, r.model, r.reason) for r in routes])
    out = [lines[0]]
    for line, route in zip(lines[1:], routes, strict=True):
        out.append(line)
        out += [f"    warning: {escape(w)}" for w in route.warnings]
    return "\n".join(out)


def _policy(args: argparse.Namespace) -> RoutingPolicy:
    return dataclasses.replace(PRECEDENCES[args.precedence], max_intelligence=args.max_intelligence,
                               max_cost=args.max_cost, max_speed=args.max_speed)


def run_route(args: argparse.Namespace) -> int:
    """`route`: the model chosen for each tool, and why."""
    try:  # InputErrors are handled here too: tests and embedders call this without main()
        tools = read_tools(args.tools)
        catalog = load_catalog(args.catalog)
        if args.user_model is not None:
            try:
                catalog.require(args.user_model)
            except InputError as exc:
                return fail(f"--user-model: {exc}")
        routes = route_tools(tools, catalog, user_model=args.user_model, policy=_policy(args))
    except InputError as exc:
        return fail(exc.lines())
    if args.format == "json":
        print_json({"routes": [r.to_dict() for r in routes]})
    elif routes:
        print(_route_table(routes))
    else:
        print("no tools")
    return OK


def _params(schema: Any) -> str:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    required = schema.get("required") if isinstance(schema, Mapping) else None
    required = required if isinstance(required, list) else []
    names = list(props) if isinstance(props, Mapping) else []
    return ", ".join(n if n in required else f"{n}?" for n in names)


def _present_table(result: Presentation, total: int) -> str:
    out = [f"tier {result.tier}: {total} tools in {len(result.groups)} groups, "
           f"{result.chars} chars, ~{result.approx_tokens} tokens"]
    shown = iter(result.tools)
    for category, names in result.groups:
        out.append(f"[{category if category is not None else '(no category)'}]")
        for _ in names:
            tool = next(shown)
            description = str(tool.get("description", "")).splitlines()[0:1]
            out.append(f"  {tool['name']}({_params(tool.get('inputSchema'))})"
                       f"  {description[0] if description else ''}".rstrip())
    out += [f"warning: {w}" for w in result.warnings]
    return "\n".join(map(escape, out))


def run_present(args: argparse.Namespace) -> int:
    """`present`: the tool list as one tier sees it, with its size."""
    try:
        tools = read_tools(args.tools)
        result = present(tools, args.tier)
    except InputError as exc:
        return fail(exc.lines())
    if args.format == "json":
        print_json(result.to_dict())
    else:
        print(_present_table(result, len(tools)))
    return OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `route` and `present` subcommands to the main parser."""
    route = subparsers.add_parser(
        "route", help="choose a model per tool from its model preferences (SEP-2417)",
        description="Choose a catalog model for each tool: the user's model, then the tool's hints, "
                    "then the weighted score of its priorities, then the catalog's default.")
    route.add_argument("--tools", required=True, metavar="T",
                       help='tools file: a tools/list result {"tools": [...]} or an array of tools')
    route.add_argument("--catalog", required=True, metavar="M",
                       help='model catalog {"default": NAME, "models": [{"name", "intelligence", '
                            '"cost", "speed"}]}')
    route.add_argument("--user-model", metavar="NAME", help="the user's explicit model (always wins, "
                       "except the default under --precedence angie)")
    route.add_argument("--precedence", choices=tuple(PRECEDENCES), default="standard",
                       help="standard: user > hints > weighted score > default; "
                            "angie: non-default user model > hints[0] > default")
    for name in ("intelligence", "cost", "speed"):
        route.add_argument(f"--max-{name}", type=_unit_float, default=1.0, metavar="P",
                           help=f"client cap on the tools' {name}Priority (0..1, default 1)")
    add_format(route)
    route.set_defaults(func=run_route)

    show = subparsers.add_parser(
        "present", help="show the tool list as a model tier sees it (capabilityHints)",
        description="Present each tool with its tier's description and inputSchema (falling back "
                    "to the top-level ones), grouped by category, ordered by priority, with its size.")
    show.add_argument("--tools", required=True, metavar="T", help="tools file")
    show.add_argument("--tier", required=True, choices=TIERS, help="the model tier")
    add_format(show)
    show.set_defaults(func=run_present)
