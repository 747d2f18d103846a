"""The `policy validate|schema|test` subcommands: check a policy file, export its JSON Schema, and run
a policy test file.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..diagnostics import requirement_problems
from ..drivers.policy_tests import load_tests, report, run_tests
from ..errors import PolicyError
from ..guard import Guard
from ..policy import load_policy, policy_schema
from ._output import FINDINGS, OK, add_format, fail, print_json, warn
from ._resolvers import add_resolver_option, resolvers_from


def _validate_json(path: str, revision: str | None, errors: list[str],
                   warnings: list[str]) -> dict[str, Any]:
    return {"policy": path, "valid": not errors, "revision": revision, "errors": errors,
            "warnings": warnings}


def run_validate(args: argparse.Namespace) -> int:
    """`policy validate`: exit 0 with `OK: P (revision R)`, else 2 with every problem by key path,
    one line each. With --format json the same verdict is also a JSON document on stdout."""
    resolvers = resolvers_from(args)
    try:
        source = load_policy(args.policy)
        guard = Guard(source, {}, strict=False, resolvers=resolvers)
    except PolicyError as exc:
        if args.format == "json":
            print_json(_validate_json(args.policy, None, exc.problems, []))
        raise
    errors, warnings = requirement_problems(source, guard.snapshot.registry)
    if args.format == "json":
        print_json(_validate_json(args.policy, source.revision, errors, warnings))
    if errors:
        return fail(PolicyError(args.policy, errors).lines())
    for message in warnings:
        warn(f"{args.policy}: {message}")
    if args.format != "json":
        print(f"OK: {args.policy} (revision {source.revision})")
    return OK


def run_schema(args: argparse.Namespace) -> int:
    """`policy schema`: the policy format's JSON Schema, for editors."""
    print_json(policy_schema())
    return OK


def run_test(args: argparse.Namespace) -> int:
    """`policy test`: run every case; exit 1 if any fails."""
    results = run_tests(load_tests(args.tests, resolvers_from(args)))
    failed = sum(1 for r in results if not r.passed)
    if args.format == "json":
        print_json({"cases": [r.to_dict() for r in results], "passed": len(results) - failed,
                    "failed": failed})
    else:
        print(report(results))
    return FINDINGS if failed else OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `policy` and its own subcommands to the main parser."""
    policy = subparsers.add_parser("policy", help="validate a policy, print its JSON Schema, run "
                                   "its tests", description="Work with policy files (TOML).")
    sub = policy.add_subparsers(dest="policy_command", required=True, metavar="COMMAND")
    check = sub.add_parser("validate", help="validate a policy file",
                           description="Validate a policy file: every problem by key path, including "
                                       "requirements in its [tools] and grants that no resolver "
                                       "accepts. Exit 0 when valid, 2 otherwise.")
    check.add_argument("policy", metavar="P", help="policy file (TOML)")
    add_resolver_option(check)
    add_format(check)
    check.set_defaults(func=run_validate)
    schema = sub.add_parser("schema", help="print the policy format's JSON Schema",
                            description="Print the JSON Schema of the policy format (for editors).")
    schema.set_defaults(func=run_schema)
    test = sub.add_parser(
        "test", help="run a policy test file",
        description="Run a policy test file: each case (claims, state, flags, environment) against "
                    "the expected decision per tool. Exit 1 if any case fails.")
    test.add_argument("tests", metavar="P", help="policy test file (TOML), e.g. "
                      "policies/mission-control.tests.toml")
    add_resolver_option(test)
    add_format(test)
    test.set_defaults(func=run_test)
