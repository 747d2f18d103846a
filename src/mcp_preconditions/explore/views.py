"""The JSON of the page's decision views: who can do what, and one call tried with arguments.

Everything here is presentation: the decisions are the workbench's Guard's, the problems are the
command line's lines. A view compares the edited policy with the file as read, so the page can
highlight what an edit changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..denials import denial_text
from ..diagnostics import explained_outcomes
from ..errors import InputError
from ..files import arguments_of, parse_json
from ..offline import verdict
from ..outcomes import Decision
from ..policy import PolicySource
from ..requirements import body_of, namespace_of
from ..resolvers import Registry
from .workbench import OVERRIDABLE, Caller, Compiled, Overrides, Workbench

# A decision and its tool's effective requirements (`Guard.requirements_for`) under the same guard:
# a quota of a call refused for something else is required but has no outcome (not asked).
Decided = tuple[Decision, tuple[str, ...]]
PER_CALL = ("needs_approval", "needs_credential")


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
                     arguments: Mapping[str, Any] | None = None) -> dict[str, Decided]:
        """The decisions under the file as read, when the policy was edited (and the file works)."""
        guard = self.baseline.guard if self.baseline is not None else None
        if guard is None or self.caller is None:
            return {}
        return {d.tool: (d, guard.requirements_for(d.tool))
                for d in await self.bench.decide(guard, self.caller, names, arguments)}


def tool_json(decided: Decided, before: Decided | None, own: frozenset[str],
              overrides: Overrides, registry: Registry | None = None) -> dict[str, Any]:
    """One tool's decision with every requirement's outcome (or `not_asked`), marked: confidential,
    where the requirement came from, whether a what-if value decided it, and what it was before the
    edit. What the edit added or removed comes from the requirement lists, never from outcomes."""
    decision, requirements = decided
    out: dict[str, Any] = {
        "name": decision.tool, "allowed": decision.allowed, "unmet": list(decision.unmet),
        "errors": list(decision.errors),
        # what `check` says: a credential or an approval decided per call is not denied here
        "verdict": verdict(decision, registry) if registry is not None else
        ("allowed" if decision.allowed else "denied"),
        "outcomes": [_outcome_json(row, decision, before, own, overrides)
                     for row in explained_outcomes(decision, requirements, registry)]}
    if before is not None:
        was, was_requiring = before
        out["was_allowed"] = was.allowed
        out["removed"] = [r for r in was_requiring if r not in requirements]
        out["changed"] = (was.allowed != decision.allowed or bool(out["removed"])
                          or any(o["was"] is not None for o in out["outcomes"]))
    return out


def _outcome_json(row: dict[str, Any], decision: Decision, before: Decided | None,
                  own: frozenset[str], overrides: Overrides) -> dict[str, Any]:
    requirement = row["requirement"]
    out = {**row, "confidential": requirement in decision.confidential,
           "from": "tool" if requirement in own else "policy", "what_if": requirement in overrides}
    if before is not None:
        out["was"] = _was(requirement, decision, before)
    return out


def _was(requirement: str, decision: Decision, before: Decided) -> str | None:
    """"new" when the edit added the requirement; else its status before the edit, when both
    decisions have an outcome for it and the status differs (a quota not asked on either side is
    compared with nothing)."""
    was, was_requiring = before
    if requirement not in was_requiring:
        return "new"
    now, then = decision.outcome(requirement), was.outcome(requirement)
    if now is None or then is None or now.status == then.status:
        return None
    return then.status.value


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
        row = tool_json((decision, guard.requirements_for(decision.tool)), before.get(decision.tool),
                        frozenset(guard.own_requirements(decision.tool)), ctx.overrides,
                        guard.snapshot.registry)
        row["some_arguments"] = row["verdict"] == "denied" and decision.tool in some
        tools.append(row)
    source = ctx.compiled.source
    assert source is not None
    return {**answer, "tools": tools, "access": await access_changes(ctx), "grants": grants_json(source),
            "facts": facts_json(source, [r for d in decisions for r in guard.requirements_for(d.tool)],
                                ctx.overrides)}


async def access_changes(ctx: Context) -> list[dict[str, Any]] | None:
    """Who gains or loses a tool with the edit, for every caller the page offers (anonymous and
    each preset, whichever is selected): the tools each is allowed under the file as read and under
    the edit. None when the policy is not edited, or either one cannot be used."""
    now = ctx.compiled.guard
    then = ctx.baseline.guard if ctx.baseline is not None else None
    if now is None or then is None:
        return None
    bench, changes = ctx.bench, []
    for preset in (None, *bench.inputs.presets):
        caller = bench.caller(preset, None)
        after, before = await bench.decide(now, caller), await bench.decide(then, caller)
        gained = [a.tool for a, b in zip(after, before, strict=True) if a.allowed and not b.allowed]
        lost = [a.tool for a, b in zip(after, before, strict=True) if b.allowed and not a.allowed]
        if gained or lost:
            changes.append({"preset": preset, "label": caller.label, "gained": gained, "lost": lost})
    return changes


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
    decision, guard = decisions[0], ctx.compiled.guard
    assert guard is not None  # decisions were made
    before = (await ctx.before([tool], arguments)).get(tool)
    return {**answer, "call": {
        "tool": tool, "arguments": arguments,
        "decision": tool_json((decision, guard.requirements_for(tool)), before,
                              frozenset(guard.own_requirements(tool)), ctx.overrides,
                              guard.snapshot.registry),
        "denial": None if decision.allowed else decision.denial_payload(),
        "denial_text": None if decision.allowed else denial_text(decision),
        # A credential or an approval: what the caller is sent then says what to do (connect an
        # account, wait for an approver), which only the gateway, at the call, can say.
        "decided_per_call": verdict(decision, guard.snapshot.registry) in PER_CALL}}


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
