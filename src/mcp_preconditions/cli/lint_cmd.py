"""The `lint` subcommand: malformed or suspicious requirements in a tools file, by file and tool.
Argument parsing and printing only: the findings are diagnostics.lint_findings.
"""

from __future__ import annotations

import argparse

from ..diagnostics import finding_line, lint_findings
from ..files import read_tools
from ..policy import load_policy
from ..requirements import Finding
from ._output import FINDINGS, OK, add_format, escape, print_json
from ._resolvers import add_resolver_option, resolvers_from


def _line(finding: Finding) -> str:
    return escape(finding_line(finding))


def run_lint(args: argparse.Namespace) -> int:
    """`lint`: exit 1 when any error-severity finding (with --strict, any finding at all)."""
    policy = load_policy(args.policy) if args.policy is not None else None
    tools = read_tools(args.tools)
    findings = lint_findings(tools, args.tools, policy, resolvers_from(args))
    errors = sum(1 for f in findings if f.severity == "error")
    warnings = len(findings) - errors
    if args.format == "json":
        print_json({"findings": [f.to_dict() for f in findings], "errors": errors,
                    "warnings": warnings})
    else:
        for finding in findings:
            print(_line(finding))
        print(f"{errors} error(s), {warnings} warning(s) in {len(tools)} tool(s)")
    return FINDINGS if errors or (args.strict and warnings) else OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `lint` to the main parser."""
    lint = subparsers.add_parser(
        "lint", help="report malformed or suspicious requirements, with file and tool",
        description="Report requirements that would refuse start-up (errors: shape, namespace, form) "
                    "and suspicious ones (warnings: whitespace, invisible characters, mixed scripts, "
                    "duplicates), policy entries that nearly match a tool's name (errors: case, "
                    "look-alikes, separators, one edit) or match no tool, rules that can never match "
                    "(tools no caller can be allowed, grants that never apply, argument conditions "
                    "the inputSchema rules out), and tier schemas that are not callable against the "
                    "full schema. Exit 1 when there is any error (with --strict, any warning too).")
    lint.add_argument("--tools", required=True, metavar="T",
                      help='tools file: a tools/list result {"tools": [...]} or an array of tools')
    lint.add_argument("--policy", metavar="P", help="policy file: its namespaces, forms and [tools] "
                      "requirements (default: the built-in namespaces, an empty policy)")
    lint.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    add_resolver_option(lint)
    add_format(lint)
    lint.set_defaults(func=run_lint)
