"""The problem lines the command line prints and the explorer page shows, written once: a policy's
own requirement problems by key path (`policy validate`), the requirements that refuse start-up
(`check`), and the findings of `lint` (the guard's start-up validation, built non-strict so every
problem is listed, plus wire-field and policy cross-checks and the tier-schema checks), and the
outcomes `check --tool` and the page explain a decision with (`explained_outcomes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .analysis import never_match_findings
from .approvals import ASKS_THE_CALLER, NEEDS_AN_APPROVER, decided_by
from .guard import EMPTY_POLICY, Guard
from .names import check_tool_names, near_miss_message
from .offline import NEEDS_A_CREDENTIAL, credential_offline, verdict
from .outcomes import Decision, Status
from .policy import PolicySource
from .policy.load import key_path
from .requirements import Finding, FormChecker, body_of, lint, namespace_of, validate
from .resolvers import Registry, Resolver
from .visible import hidden_characters
from .wire import META_KEY, raw_requirements


def requirement_problems(source: PolicySource, registry: FormChecker) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the policy's own requirement strings, by key path."""
    errors: list[str] = []
    warnings: list[str] = []
    for name, entry in source.policy.tools.items():
        odd = hidden_characters(name)
        if odd or name != name.strip():
            what = ", ".join(odd) if odd else "leading or trailing white space"
            warnings.append(f"{key_path(('tools', name))}: the tool name holds characters a reader "
                            f"cannot see ({what}); it applies only to a tool named exactly so")
        reqs = entry.requirements
        for kind, found in ((errors, validate(name, reqs, registry)), (warnings, lint(name, reqs))):
            for f in found:
                index = reqs.index(f.requirement) if f.requirement in reqs else None
                path = ("tools", name, "requirements") + ((index,) if index is not None else ())
                kind.append(f"{key_path(path)}: {f.message}")
    for i, grant in enumerate(source.policy.capabilities.grants):
        for j, req in enumerate(grant.when):
            problem = registry.check_form(req)
            if problem is not None:
                errors.append(f"capabilities.grants[{i}].when[{j}]: requirement {req!r}: {problem}")
    return errors, warnings


def start_up_errors(guard: Guard, tools_path: str) -> list[str]:
    """One line per requirement that would refuse to start, blamed on the file it came from: the
    policy for a requirement its `[tools.X]` added (the finding's `source`), else the tools file."""
    return [f"{f.source or tools_path}: tool '{f.tool}': {f.message}"
            for f in guard.findings if f.severity == "error"]


# A requirement the decision has no outcome for: a quota of a call the other requirements refuse
# (no quota store is asked, docs/quotas.md). Neither satisfied nor unsatisfied, and never unmet.
NOT_ASKED = "not_asked"
NOT_ASKED_REASON = "not asked: the call is refused for another requirement"


def explained_outcomes(decision: Decision, requirements: Sequence[str],
                       registry: Registry | None = None) -> list[dict[str, Any]]:
    """Every requirement of a decided call's tool (`requirements`: `Guard.requirements_for`), in
    the tool's order, as `Outcome.to_dict`; one the decision has no outcome for is `not_asked`.
    With the guard's `registry`, what is decided per call is shown as what it is, never satisfied
    or unsatisfied here: an approval, by a person (`asks_the_caller`, `needs_an_approver`), also
    when only a credential obtained first kept the call from it; a credential, at the gateway
    (`needs_a_credential`, offline.py)."""
    rows = []
    after_credential = registry is not None and verdict(decision, registry) == "needs_credential"
    for requirement in requirements:
        outcome = decision.outcome(requirement)
        who = decided_by(requirement, registry) if registry is not None else None
        if outcome is None:
            if who is not None and after_credential:
                rows.append({"requirement": requirement, "status": who, "reason": APPROVAL_REASONS[who]
                             + ", once the caller's credential is obtained"})
            else:
                rows.append({"requirement": requirement, "status": NOT_ASKED,
                             "reason": NOT_ASKED_REASON})
            continue
        row = outcome.to_dict()
        if outcome.status is Status.UNSATISFIED:
            if who is not None:
                row["status"], row["reason"] = who, APPROVAL_REASONS[who]
            elif credential_offline(requirement, registry):
                row["status"] = NEEDS_A_CREDENTIAL
        rows.append(row)
    return rows


APPROVAL_REASONS = {
    ASKS_THE_CALLER: "decided per call, by a person: the caller is asked to confirm the call",
    NEEDS_AN_APPROVER: "decided per call, by a person: an approver approves the call on the "
                       "gateway's approval page"}


def finding_line(finding: Finding) -> str:
    """A lint finding as `lint` prints it: `<file>: <severity>: tool 'NAME': <message>`."""
    return f"{finding.source}: {finding.severity}: tool '{finding.tool}': {finding.message}"


TierLint = Callable[[list[dict[str, Any]], str], list[Finding]]


def _tier_lint() -> TierLint | None:
    try:
        from .presentation.tiers import tier_lint_findings
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


def lint_findings(tools: list[dict[str, Any]], tools_path: str, policy: PolicySource | None,
                  resolvers: Iterable[Resolver] = (), guard: Guard | None = None) -> list[Finding]:
    """Every error and warning about the tools' requirements (and the policy's, when given). `guard`:
    one already built, non-strict, from these tools and policy (else one is built here)."""
    raw = {t["name"]: raw_requirements(t) for t in tools}
    if guard is None:
        guard = Guard(policy or EMPTY_POLICY, raw, strict=False, resolvers=resolvers)
    found = [_attributed(f, raw.get(f.tool), policy, tools_path) for f in guard.findings]
    for tool in tools:
        found += _wire_findings(tool, tools_path)
    if policy is not None:
        found += _name_findings(policy, list(raw), tools_path)
        found += never_match_findings(guard.snapshot, tools)
        found += _unused_quotas(guard, policy)
    tier_lint = _tier_lint()
    if tier_lint is not None:
        found += tier_lint(tools, tools_path)
    # Grouped by tool in file order (stable, so each tool's findings keep their order); findings
    # about no tool of the file (policy-only tools, grants) come last.
    order = {name: i for i, name in enumerate(raw)}
    return sorted(found, key=lambda f: order.get(f.tool, len(order)))


def _unused_quotas(guard: Guard, policy: PolicySource) -> list[Finding]:
    """A `[quotas.NAME]` or `[pdp.NAME]` no tool requires: most likely a typo on one side."""
    found = []
    for namespace, section, names in (("quota", "quotas", policy.policy.quotas),
                                      ("pdp", "pdp", policy.policy.pdp)):
        used = {body_of(r) for tool in guard.snapshot.tools.values() for r in tool.requirements
                if namespace_of(r) == namespace}
        found += [Finding("warning", f"(policy {section}.{name})",
                          f"no tool requires {namespace}:{name}", None, policy.source)
                  for name in names if name not in used]
    return found


def _name_findings(policy: PolicySource, tools: list[str], tools_path: str) -> list[Finding]:
    """The policy's `[tools.NAME]` keys against the file's tools: a near miss of one (what a
    hosted server or the gateway would refuse to run with) is an error naming both, a name that
    matches nothing a warning."""
    names = check_tool_names(policy.policy.tools, tools)
    found = [Finding("error", tool, near_miss_message(name, tool), None, policy.source)
             for name, tool in names.near_misses]
    found += [Finding("warning", name, f"the policy's [tools.{name}] names a tool that is not in "
                                       f"{tools_path}", None, policy.source)
              for name in names.unmatched]
    return found
