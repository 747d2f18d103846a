"""The JSON of the page's decision views: who can do what, and one call tried with arguments.

Everything here is presentation: the decisions are the workbench's Guard's, the problems are the
command line's lines. A view compares the edited policy with the file as read, so the page can
highlight what an edit changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..files import arguments_of, parse_json
from ..outcomes import Decision, Outcome
from ..policy import PolicySource
from ..requirements import body_of, namespace_of
from .workbench import OVERRIDABLE, Caller, Compiled, Overrides, Workbench


@dataclass(frozen=True)
class Context:
    """What every view starts from: the policy as edited (and as read, when they differ), the
    caller, and the what-if values."""

    bench: Workbench
    text: str
    compiled: Compiled
    baseline: Compiled | None  # the file as read, under the same what-if values; None: not edited
    caller: Caller | None
    caller_problem: str | None
    overrides: Overrides

    @classmethod
    def of(cls, bench: Workbench, text: str, preset: str | None, claims: str | None,
           overrides: Overrides) -> Context:
        compiled = bench.compile(text, overrides)
        edited = text != bench.inputs.policy_text
        baseline = bench.compile(bench.inputs.policy_text, overrides) if edited else None
        try:
            caller, problem = bench.caller(preset, claims), None
        except InputError as exc:
            caller, problem = None, str(exc)
        return cls(bench, text, compiled, baseline, caller, problem, overrides)

    def head(self) -> dict[str, Any]:
        """The part of every answer that says how the policy and the caller were read."""
        source = self.compiled.source
        return {
            "policy": {"ok": self.compiled.guard is not None, "edited": self.baseline is not None,
                       "revision": source.revision if source is not None else None,
                       "problems": self.compiled.problems, "warnings": self.compiled.warnings},
            "caller": {"ok": self.caller is not None, "problem": self.caller_problem,
                       "label": self.caller.label if self.caller is not None else None},
        }

    async def decisions(self, names: list[str] | None = None,
                        arguments: Mapping[str, Any] | None = None) -> list[Decision] | None:
        guard = self.compiled.guard
        if guard is None or self.caller is None:
            return None
        return await self.bench.decide(guard, self.caller, names, arguments)

    async def before(self, names: list[str] | None = None,
                     arguments: Mapping[str, Any] | None = None) -> dict[str, Decision]:
        """The decisions under the file as read, when the policy was edited (and the file works)."""
        guard = self.baseline.guard if self.baseline is not None else None
        if guard is None or self.caller is None:
            return {}
        return {d.tool: d for d in await self.bench.decide(guard, self.caller, names, arguments)}


def tool_json(decision: Decision, before: Decision | None, own: frozenset[str],
              overrides: Overrides) -> dict[str, Any]:
    """One tool's decision with every outcome, marked: confidential, where the requirement came
    from, whether a what-if value decided it, and what it was before the edit."""
    out: dict[str, Any] = {
        "name": decision.tool, "allowed": decision.allowed, "unmet": list(decision.unmet),
        "errors": list(decision.errors),
        "outcomes": [_outcome_json(o, decision, before, own, overrides) for o in decision.outcomes]}
    if before is not None:
        now = {o.requirement for o in decision.outcomes}
        out["was_allowed"] = before.allowed
        out["removed"] = [o.requirement for o in before.outcomes if o.requirement not in now]
        out["changed"] = (before.allowed != decision.allowed or bool(out["removed"])
                          or any(o["was"] is not None for o in out["outcomes"]))
    return out


def _outcome_json(outcome: Outcome, decision: Decision, before: Decision | None, own: frozenset[str],
                  overrides: Overrides) -> dict[str, Any]:
    requirement = outcome.requirement
    out = outcome.to_dict()
    out["confidential"] = requirement in decision.confidential
    out["from"] = "tool" if requirement in own else "policy"
    out["what_if"] = requirement in overrides
    if before is not None:  # "new": the edit added it; else its status before, when it differs
        was = before.outcome(requirement)
        out["was"] = "new" if was is None else was.status.value if was.status != outcome.status \
            else None
    return out


async def who_can(ctx: Context) -> dict[str, Any]:
    """Every tool, allowed or denied for the caller, with every requirement's outcome."""
    answer = ctx.head()
    decisions = await ctx.decisions()
    if decisions is None:
        return {**answer, "tools": None}
    before = await ctx.before()
    guard = ctx.compiled.guard
    assert guard is not None and ctx.caller is not None  # decisions were made
    # Denied now, but some arguments may be allowed: the guard's own rule (`callable_tools`).
    some = set(await guard.callable_tools(ctx.caller.credentials, ctx.bench.names))
    tools = []
    for decision in decisions:
        row = tool_json(decision, before.get(decision.tool),
                        frozenset(guard.own_requirements(decision.tool)), ctx.overrides)
        row["some_arguments"] = not decision.allowed and decision.tool in some
        tools.append(row)
    source = ctx.compiled.source
    assert source is not None
    return {**answer, "tools": tools, "grants": grants_json(source),
            "facts": facts_json(source, [r for d in decisions for r in guard.requirements_for(d.tool)],
                                ctx.overrides)}


async def try_call(ctx: Context, tool: str, arguments_text: str) -> dict[str, Any]:
    """One call of one tool with the arguments typed on the page: its decision, explained, and the
    denial the caller would be sent (confidential requirements counted, not named)."""
    answer = ctx.head()
    if tool not in ctx.bench.names:
        return {**answer, "call": {"problem": f"tool: no tool named {tool!r}"}}
    try:
        arguments = (arguments_of(parse_json(arguments_text, "arguments"), "arguments")
                     if arguments_text.strip() else None)
    except InputError as exc:
        return {**answer, "call": {"problem": str(exc)}}
    decisions = await ctx.decisions([tool], arguments)
    if decisions is None:
        return {**answer, "call": None}
    decision = decisions[0]
    before = (await ctx.before([tool], arguments)).get(tool)
    own = frozenset(ctx.compiled.guard.own_requirements(tool)) if ctx.compiled.guard else frozenset()
    return {**answer, "call": {
        "tool": tool, "arguments": arguments,
        "decision": tool_json(decision, before, own, ctx.overrides),
        "denial": None if decision.allowed else decision.denial_payload(),
        "denial_text": None if decision.allowed else decision.denial_text()}}


def grants_json(source: PolicySource) -> dict[str, Any]:
    """The policy's capability grants, for the page to show next to a `capability:` outcome."""
    capabilities = source.policy.capabilities
    return {"claim": capabilities.claim,
            "grants": [{"index": i, "capabilities": g.capabilities, "when": g.when,
                        "arguments": g.arguments} for i, g in enumerate(capabilities.grants)]}


def facts_json(source: PolicySource, requirements: list[str], overrides: Overrides
               ) -> list[dict[str, Any]]:
    """Every state and flag the tools and grants depend on (or the policy sets), with where its
    value comes from and the page's what-if value, if any."""
    policy = source.policy
    found = dict.fromkeys(r for r in requirements if r.startswith(OVERRIDABLE))
    found.update(dict.fromkeys(c for g in policy.capabilities.grants for c in g.when
                               if c.startswith(OVERRIDABLE)))
    found.update(dict.fromkeys(f"state:{k}" for k in policy.state.values))
    found.update(dict.fromkeys(f"feature:{k}" for k in policy.features.flags))
    return [{"requirement": r, "configured": _configured(source, r), "what_if": overrides.get(r)}
            for r in found if body_of(r)]


def _configured(source: PolicySource, requirement: str) -> str:
    """Where a state or flag value comes from, in the policy as written."""
    policy, key = source.policy, body_of(requirement)
    if namespace_of(requirement) == "state":
        if key in policy.state.values:
            return f"{str(policy.state.values[key]).lower()} (policy)"
        if key in policy.state.callables:
            return "live (callable)"
        return "live (Redis)" if policy.state.redis is not None else "not set"
    if key in policy.features.flags:
        return f"{str(policy.features.flags[key]).lower()} (policy)"
    return "live (OpenFeature)" if policy.features.openfeature is not None else "not set"
