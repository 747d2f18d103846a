"""The `lint` subcommand: malformed or suspicious requirements in a tools file, by file and tool.

It gathers the findings the guard's start-up validation already produces (built non-strict, so every
problem is listed), plus wire-field and policy cross-checks and the tier-schema checks.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from ..analysis import never_match_findings
from ..files import read_tools
from ..guard import EMPTY_POLICY, Guard
from ..policy import PolicySource, load_policy
from ..requirements import Finding, body_of, namespace_of
from ..resolvers import Resolver
from ..wire import META_KEY, raw_requirements
from ._output import FINDINGS, OK, add_format, escape, print_json
from ._resolvers import add_resolver_option, resolvers_from

TierLint = Callable[[list[dict[str, Any]], str], list[Finding]]


def _tier_lint() -> TierLint | None:
    try:
        from ..presentation.tiers import tier_lint_findings
    except ImportError:
        return None
    return tier_lint_findings


def _wire_findings(tool: dict[str, Any], source: str) -> list[Finding]:
    """Suspicious wire shapes the guard cannot see: it only reads the requirements value itself."""
    name: str = tool["name"]
    execution = tool.get("execution")  # a non-object `execution` is a validation error already
    meta = tool.get("_meta")
    if isinstance(execution, dict) and "requirements" in execution and isinstance(meta, dict) \
            and META_KEY in meta and meta[META_KEY] != execution["requirements"]:
        return [Finding("warning", name, f"the _meta mirror '{META_KEY}' differs from "
                                         "execution.requirements (clients see different lists)",
                        None, source)]
    return []


def _attributed(finding: Finding, code: Any, policy: PolicySource | None, tools_path: str) -> Finding:
    """The finding with the file its requirement came from: the tools file or the policy."""
    if finding.source is not None:
        return finding
    in_code = isinstance(code, list) and finding.requirement in code
    entry = policy.policy.tools.get(finding.tool) if policy else None
    from_policy = entry is not None and finding.requirement in entry.requirements and not in_code
    source = policy.source if from_policy and policy else tools_path
    return dataclasses.replace(finding, source=source)


def _unused_quotas(guard: Guard, policy: PolicySource) -> list[Finding]:
    """A `[quotas.NAME]` no tool requires: most likely a typo on one side."""
    used = {body_of(r) for tool in guard.snapshot.tools.values() for r in tool.requirements
            if namespace_of(r) == "quota"}
    return [Finding("warning", f"(policy quotas.{name})", f"no tool requires quota:{name}", None,
                    policy.source) for name in policy.policy.quotas if name not in used]


def lint_findings(tools: list[dict[str, Any]], tools_path: str, policy: PolicySource | None,
                  resolvers: Iterable[Resolver] = ()) -> list[Finding]:
    """Every error and warning about the tools' requirements (and the policy's, when given)."""
    raw = {t["name"]: raw_requirements(t) for t in tools}
    guard = Guard(policy or EMPTY_POLICY, raw, strict=False, resolvers=resolvers)
    found = [_attributed(f, raw.get(f.tool), policy, tools_path) for f in guard.findings]
    for tool in tools:
        found += _wire_findings(tool, tools_path)
    if policy is not None:
        found += [Finding("warning", name, f"the policy's [tools.{name}] names a tool that is not in "
                                           f"{tools_path}", None, policy.source)
                  for name in policy.policy.tools if name not in raw]
        found += never_match_findings(guard.snapshot, tools)
        found += _unused_quotas(guard, policy)
    tier_lint = _tier_lint()
    if tier_lint is not None:
        found += tier_lint(tools, tools_path)
    # Grouped by tool in file order (stable, so each tool's findings keep their order); findings
    # about no tool of the file (policy-only tools, grants) come last.
    order = {name: i for i, name in enumerate(raw)}
    return sorted(found, key=lambda f: order.get(f.tool, len(order)))


def _line(finding: Finding) -> str:
    return escape(f"{finding.source}: {finding.severity}: tool '{finding.tool}': {finding.message}")


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
                    "duplicates), policy entries for unknown tools, rules that can never match "
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
