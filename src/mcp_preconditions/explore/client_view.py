"""The client's view: the tools as the server lists them (each with the requirements it advertises:
the tool's own plus the policy's, less the confidential ones), filtered by `client.filter_tools` with
a knowledge set, and why each is kept, demoted or hidden, next to what the server decides.
"""

from __future__ import annotations

from typing import Any

from ..client import FilterMode, Knowledge, ToolVerdict, filter_tools
from ..errors import InputError
from ..files import parse_json
from ..integrations._calls import denial_meta
from ..knowledge import SAT, UNSAT
from ..outcomes import Decision
from ..wire import with_requirements
from .views import Context

NOTHING = "(nothing known)"
LEARNED = "(learned from this caller's denials)"


def knowledge_of(ctx: Context, preset: str | None, text: str | None,
                 decisions: list[Decision] | None) -> Knowledge:
    """The knowledge set: typed on the page, a built-in or a `--knowledge` preset."""
    if text is not None and text.strip():
        return Knowledge.from_dict(parse_json(text, "knowledge"), source="knowledge")
    if preset in (None, "", NOTHING):
        return Knowledge()
    if preset == LEARNED:
        return learned(decisions or [])
    if preset not in ctx.bench.inputs.knowledge:
        raise InputError(f"knowledge: no preset named {preset!r}")
    return Knowledge.from_dict(ctx.bench.inputs.knowledge[preset], source=preset)


def learned(decisions: list[Decision]) -> Knowledge:
    """What a strict client learns from these denials, as the MCP adapters send them: the disclosed
    unmet requirements, except those that ended as `error` or that the arguments decided."""
    knowledge = Knowledge()
    for decision in decisions:
        if not decision.allowed:
            knowledge.learn_denial(decision.denial_payload(), meta=denial_meta(decision))
    return Knowledge(unsatisfiable=sorted(knowledge.learned()))


def why(verdict: ToolVerdict, requirements: list[str]) -> str:
    """The SEP-2487 rule, applied to one tool, in words."""
    if verdict.warnings:
        return "proceeds: its requirements are malformed, and a client never hides a tool on garbage"
    unsat, unknown = ", ".join(verdict.unsatisfiable), len(verdict.unknown)
    if verdict.will_fail:
        return f"will fail: every requirement is known, and {unsat} is unsatisfiable"
    if unsat:
        return (f"proceeds: {unsat} is unsatisfiable, but {unknown} requirement(s) unknown (a tool "
                "is hidden only when every requirement is known)")
    if unknown:
        return f"proceeds: {unknown} requirement(s) unknown to the client"
    return "proceeds: every requirement is satisfied" if requirements else "proceeds: no requirements"


async def client_view(ctx: Context, preset: str | None, text: str | None, mode: FilterMode
                      ) -> dict[str, Any]:
    answer = ctx.head()
    guard = ctx.compiled.guard
    if guard is None:
        return {**answer, "client": None}
    decisions = await ctx.decisions()
    try:
        knowledge = knowledge_of(ctx, preset, text, decisions)
    except InputError as exc:
        return {**answer, "client": {"problem": str(exc)}}
    listed = [with_requirements(t, guard.advertised_for(t["name"])) for t in ctx.bench.inputs.tools]
    result = filter_tools(listed, knowledge, mode)
    server = {d.tool: d.allowed for d in decisions or []}
    kept = set(result.kept_index)
    view = knowledge.view()
    rows = []
    order = [*result.kept_index, *(i for i in range(len(listed)) if i not in kept)]
    for position, i in enumerate(order, start=1):
        verdict, requirements = result.verdicts[i], list(guard.advertised_for(result.verdicts[i].name))
        states = [{"requirement": r, "known": _known(view.classify(r))} for r in requirements]
        fate = "hidden" if i not in kept else "demoted" if (
            verdict.will_fail and mode is FilterMode.DEMOTE) else "kept"
        withheld = len(guard.requirements_for(verdict.name)) - len(requirements)
        rows.append({"name": verdict.name, "verdict": verdict.verdict.value, "fate": fate,
                     "position": position if i in kept else None, "requirements": states,
                     "withheld": withheld,
                     "why": why(verdict, requirements), "server_allows": server.get(verdict.name)})
    return {**answer, "client": {"mode": mode.value, "tools": rows, "warnings": list(result.warnings),
                                 "knowledge": knowledge.to_dict(), "filtered": result.to_json()}}


def _known(code: int) -> str:
    return "satisfied" if code == SAT else "unsatisfiable" if code == UNSAT else "unknown"
