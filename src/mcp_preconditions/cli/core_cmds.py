"""The `check` and `filter` subcommands: read the files, ask the guard or the client evaluator, print.

No decision logic lives here: `check` asks `Guard`, `filter` asks `client.filter_tools`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ..approvals import ASKS_THE_CALLER, NEEDS_AN_APPROVER, decided_by
from ..client import FilterMode, FilterResult, ToolVerdict, filter_tools
from ..diagnostics import explained_outcomes, start_up_errors
from ..errors import InputError
from ..files import arguments_of, parse_json, read_claims, read_json, read_knowledge, read_line, read_tools
from ..guard import Guard
from ..namespaces import LiveSources
from ..offline import NEEDS_A_CREDENTIAL, OfflineCredentials, credential_offline, verdict
from ..outcomes import Decision
from ..policy import load_policy
from ..principal import ANONYMOUS_IDENTITY, Credentials, Identity, Principal
from ..resolvers import fresh_quota_store
from ..wire import raw_requirements
from ._output import OK, add_format, escape, fail, print_json, table, warn
from ._resolvers import add_resolver_option, resolvers_from


# --- check --------------------------------------------------------------------------------------
def _read_token(value: str) -> str:
    """The token argument; `-` reads it from standard input, keeping it out of the process list."""
    token = read_line(sys.stdin, "--token -: standard input").strip() if value == "-" else value
    if not token:
        raise InputError("--token: the token is empty")
    return token


async def _identity(guard: Guard, args: argparse.Namespace) -> tuple[Identity, str]:
    """The caller to check for, and a line describing it."""
    if args.claims is not None:
        principal = Principal.from_claims(read_claims(args.claims))
        who = f"{principal.subject or '(no sub)'} (claims from {args.claims})"
        return Identity(principal=principal), who
    if args.token is None:
        return ANONYMOUS_IDENTITY, "anonymous (no access token)"
    identity = await guard.authenticate(Credentials(token=_read_token(args.token)))
    if identity.principal is None:
        warn(f"the token was not accepted: {identity.failure}")
        return identity, f"none: {identity.failure}"
    return identity, f"{identity.subject or '(no sub)'} (verified {identity.principal.kind} token)"


def _arguments(value: str | None) -> dict[str, Any] | None:
    """`--arguments`: a JSON object given inline, or `@FILE` naming a file holding one."""
    if value is None:
        return None
    if value.startswith("@"):
        return arguments_of(read_json(value[1:]), value[1:])
    return arguments_of(parse_json(value, "--arguments"), "--arguments")


async def _decide(guard: Guard, names: list[str], args: argparse.Namespace
                  ) -> tuple[list[Decision], str]:
    identity, who = await _identity(guard, args)
    arguments = _arguments(args.arguments)
    decisions = [await guard.check_identity(n, identity, arguments, record=False) for n in names]
    return decisions, who


def _status(status: str) -> str:
    """An outcome's status as the table prints it (what is decided per call, in words)."""
    return (status.replace("_", " ") if status in (ASKS_THE_CALLER, NEEDS_AN_APPROVER,
                                                   NEEDS_A_CREDENTIAL) else status)


# `offline.verdict` as the table prints it: what a person gives per call (an approval) or the
# gateway obtains per call (a credential) is not denied, and `check` cannot give it.
VERDICTS = {"allowed": "ALLOWED", "denied": "DENIED", "needs_approval": "NEEDS APPROVAL",
            "needs_credential": "NEEDS A CREDENTIAL"}


def _verdict(guard: Guard, decision: Decision) -> str:
    return VERDICTS[verdict(decision, guard.snapshot.registry)]


def _marked(guard: Guard | None, decision: Decision, requirement: str) -> str:
    """A requirement as the table shows it; an approval as who decides it, a credential as the
    gateway's, per call (`guard`)."""
    registry = guard.snapshot.registry if guard is not None else None
    who = decided_by(requirement, registry) if registry is not None else None
    if who is None and credential_offline(requirement, registry):
        who = NEEDS_A_CREDENTIAL
    marks = [m for m, on in (("confidential", requirement in decision.confidential),
                             ("error", requirement in decision.errors),
                             ((who or "").replace("_", " "), who is not None)) if on]
    return requirement + "".join(f" ({m})" for m in marks)


def _check_json(guard: Guard, decision: Decision, outcomes: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": decision.tool, "allowed": decision.allowed,
                           "unmet": list(decision.unmet), "errors": list(decision.errors)}
    registry = guard.snapshot.registry
    approvals = {r: who for r in decision.unmet if (who := decided_by(r, registry)) is not None}
    if approvals:  # decided per call, by a person: `check` cannot give them
        out["approvals"] = approvals
    credentials = [r for r in decision.unmet if credential_offline(r, registry)]
    if credentials:  # obtained per call by the gateway, for the caller: `check` cannot obtain them
        out["credentials"] = credentials
    if outcomes:  # a quota of a call refused for something else: `not_asked`
        out["outcomes"] = explained_outcomes(decision, guard.requirements_for(decision.tool),
                                             guard.snapshot.registry)
    return out


def _check_table(guard: Guard, decisions: list[Decision], header: list[str], outcomes: bool) -> str:
    rows = [("TOOL", "DECISION", "UNMET")] + [
        (d.tool, _verdict(guard, d), ", ".join(_marked(guard, d, r) for r in d.unmet))
        for d in decisions]
    lines = [*map(escape, header), "", *table(rows)]  # the principal line holds token claims
    if outcomes:
        for d in decisions:
            lines += ["", f"{d.tool}: {_verdict(guard, d)}"]
            lines += ["  " + line for line in _outcome_rows(guard, d)] or ["  (no requirements)"]
    return "\n".join(lines)


def _outcome_rows(guard: Guard, decision: Decision) -> list[str]:
    explained = explained_outcomes(decision, guard.requirements_for(decision.tool),
                                   guard.snapshot.registry)
    if not explained:
        return []
    return table([("STATUS", "REQUIREMENT", "REASON")] + [
        (_status(o["status"]), _marked(None, decision, o["requirement"]), o["reason"])
        for o in explained])


def run_check(args: argparse.Namespace) -> int:
    """`check`: the guard's decision for each tool, for one principal."""
    source = load_policy(args.policy)
    tools = read_tools(args.tools)
    names = [t["name"] for t in tools]
    if args.tool is not None and args.tool not in names:
        return fail(f"--tool: no tool named {args.tool!r} in {args.tools} (tools: {', '.join(names)})")
    # Quotas count from a fresh store that remembers nothing: `check` says whether a caller may
    # call, never how many calls they made elsewhere (and never touches a live Redis).
    # A tools list the gateway showed carries `credential:KEY`: obtained per call, never here.
    guard = Guard(source, {t["name"]: raw_requirements(t) for t in tools}, strict=False,
                  resolvers=[*resolvers_from(args), OfflineCredentials()],
                  live=LiveSources(quotas=fresh_quota_store()))
    problems = start_up_errors(guard, args.tools)
    if problems:
        return fail(problems)
    selected = [args.tool] if args.tool is not None else names
    decisions, who = asyncio.run(_decide(guard, selected, args))
    outcomes = args.tool is not None
    if args.format == "json":
        print_json({"tools": [_check_json(guard, d, outcomes) for d in decisions]})
    else:
        header = [f"policy: {args.policy} (revision {guard.revision})", f"principal: {who}"]
        if source.policy.quotas:
            header.append(f"quotas: counted in {fresh_quota_store().name}")
        print(_check_table(guard, decisions, header, outcomes))
    return OK


# --- filter -------------------------------------------------------------------------------------
def _why(verdict: ToolVerdict) -> str:
    parts = [f"{label}: {', '.join(items)}" for label, items in
             (("unsatisfiable", verdict.unsatisfiable), ("unknown", verdict.unknown)) if items]
    return "; ".join(parts)


def _filter_table(result: FilterResult) -> str:
    kept = set(result.kept_index)
    rows: list[tuple[str, str, str]] = [("TOOL", "VERDICT", "WHY")]
    order = [*result.kept_index, *(i for i in range(len(result.verdicts)) if i not in kept)]
    for i in order:
        v = result.verdicts[i]
        label = "proceed" if not v.will_fail else "will fail" + (
            " (hidden)" if i not in kept else " (demoted)" if result.mode is FilterMode.DEMOTE else "")
        rows.append((v.name, label, _why(v)))
    return "\n".join(table(rows))


def run_filter(args: argparse.Namespace) -> int:
    """`filter`: the client's strict SEP-2487 verdicts over a tools list."""
    tools = read_tools(args.tools)
    knowledge = read_knowledge(args.knowledge)
    result = filter_tools(tools, knowledge, args.mode)
    for message in result.warnings:
        warn(f"{args.tools}: {message}")
    if args.format == "json":
        print_json(result.to_json(args.mode))
    else:
        print(_filter_table(result))
    return OK


# --- parsers ------------------------------------------------------------------------------------
TOOLS_HELP = 'tools file: a tools/list result {"tools": [...]} or an array of tool definitions'


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `check` and `filter` to the main parser."""
    check = subparsers.add_parser(
        "check", help="evaluate each tool's requirements against a policy for one principal",
        description="Evaluate each tool's requirements (its own plus the policy's) for one caller. "
                    "Tools whose requirements fail start-up validation make check exit 2.")
    check.add_argument("--policy", required=True, metavar="P", help="policy file (TOML)")
    check.add_argument("--tools", required=True, metavar="T", help=TOOLS_HELP)
    who = check.add_mutually_exclusive_group()
    who.add_argument("--claims", metavar="C", help="JSON object: the claims of an already-verified "
                     "token (offline check; auth:oauth2 holds)")
    who.add_argument("--token", metavar="JWT", help="an access token, verified as the policy's [auth] "
                     "says ('-' reads it from standard input); neither flag: anonymous")
    check.add_argument("--tool", metavar="NAME", help="only this tool, with every requirement's "
                       "outcome and reason")
    check.add_argument("--arguments", metavar="JSON", help="the call's arguments, a JSON object "
                       "(or @FILE): capability grants with argument conditions read them")
    add_resolver_option(check)
    add_format(check)
    check.set_defaults(func=run_check)

    flt = subparsers.add_parser(
        "filter", help="the client-side strict verdicts (SEP-2487) over a tools list",
        description="Filter a tools list by what the client knows: a tool will fail only when every "
                    "requirement is known and at least one is unsatisfiable; otherwise it proceeds.")
    flt.add_argument("--tools", required=True, metavar="T", help=TOOLS_HELP)
    flt.add_argument("--knowledge", required=True, metavar="K",
                     help='knowledge file {"satisfied": [...], "unsatisfiable": [...]}')
    flt.add_argument("--mode", choices=[m.value for m in FilterMode], default="hide",
                     help="hide: drop tools that will fail; demote: move them last; annotate: keep "
                          "all (default: hide)")
    add_format(flt, default="json")
    flt.set_defaults(func=run_filter)
