"""Client side: SEP-2487's strict verdict per tool, and filtering a `tools/list` result (hide, demote,
annotate) without ever hiding a tool on the strength of unknown requirements or garbage. What the
client knows lives in knowledge.py.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .errors import InputError
from .knowledge import (
    ARGUMENT_DEPENDENT_META_KEY,
    DENIAL_ERRORS_META_KEY,
    DENIAL_META_KEY,
    SAT,
    TRANSIENT_META_KEY,
    UNKNOWN,
    UNSAT,
    ClientResolver,
    Knowledge,
    KnowledgeView,
)
from .outcomes import Verdict
from .requirements import check_shape
from .wire import raw_requirements

__all__ = ["ARGUMENT_DEPENDENT_META_KEY", "DENIAL_ERRORS_META_KEY", "DENIAL_META_KEY",
           "TRANSIENT_META_KEY", "ClientResolver", "FilterMode", "FilterResult", "Knowledge",
           "ToolVerdict", "filter_tools", "verdict_for"]


class ToolVerdict(NamedTuple):
    """The strict verdict for one tool: WILL_FAIL only when every requirement is known and at
    least one is unsatisfiable (named in `unsatisfiable`); otherwise PROCEED. `unknown` lists the
    requirements the client knows nothing about. (A NamedTuple: immutable and cheap to build.)"""

    name: str
    verdict: Verdict
    unsatisfiable: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def will_fail(self) -> bool:
        return self.verdict is Verdict.WILL_FAIL

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "verdict": self.verdict.value,
                "unsatisfiable": list(self.unsatisfiable), "unknown": list(self.unknown)}


_PROCEED, _WILL_FAIL = Verdict.PROCEED, Verdict.WILL_FAIL
_new = tuple.__new__  # builds a ToolVerdict without NamedTuple's keyword handling (the hot path)


def _malformed(name: str, raw: Any) -> ToolVerdict:
    """PROCEED with a warning: a client never hides a tool on the strength of garbage."""
    problems = [str(f) for f in check_shape(name, raw)[1]]
    return ToolVerdict(name, _PROCEED,
                       warnings=tuple(f"{p}; proceeding as if absent" for p in problems))


def _odd_tool(tool: Any, index: int) -> tuple[str, Any] | ToolVerdict:
    """(name, raw requirements) of a tool that is not a plain dict, or its verdict if not an object."""
    if not isinstance(tool, Mapping):
        return ToolVerdict(f"#{index}", _PROCEED, warnings=(
            f"tool #{index} is not an object ({type(tool).__name__}); kept as is",))
    name = tool.get("name")
    return (name if isinstance(name, str) else f"#{index}"), raw_requirements(tool)


def _verdicts(tools: Iterable[Any], view: KnowledgeView) -> list[ToolVerdict]:
    """The hot path of filtering: per tool a few dict lookups, per requirement string one more."""
    memo_get, classify, new, tv = view.memo.get, view.classify, _new, ToolVerdict
    sat, unsat_code, unknown_code, proceed, will_fail = SAT, UNSAT, UNKNOWN, _PROCEED, _WILL_FAIL
    out: list[ToolVerdict] = []
    for index, tool in enumerate(tools):
        if type(tool) is dict:  # a plain JSON object: no ABC check
            raw = raw_requirements(tool)
            name = tool.get("name")
            if type(name) is not str:
                name = f"#{index}"
        else:
            odd = _odd_tool(tool, index)
            if isinstance(odd, ToolVerdict):
                out.append(odd)
                continue
            name, raw = odd
        if type(raw) is not list:  # absent (None: proceed, no warning) or garbage
            out.append(new(tv, (name, proceed, (), (), ())) if raw is None else _malformed(name, raw))
            continue
        unsat: list[str] = []
        unknown: list[str] = []
        try:
            for req in raw:
                code = memo_get(req)
                if code is None:
                    code = classify(req)
                if code == sat:
                    continue
                # `not in` on these short lists de-duplicates more cheaply than a dict.
                if code == unsat_code:
                    if req not in unsat:
                        unsat.append(req)
                elif code == unknown_code:
                    if req not in unknown:
                        unknown.append(req)
                else:
                    raise TypeError
        except TypeError:  # a non-string, empty or unhashable element: the field is garbage
            out.append(_malformed(name, raw))
            continue
        verdict = will_fail if unsat and not unknown else proceed
        out.append(new(tv, (name, verdict, tuple(unsat), tuple(unknown), ())))
    return out


def verdict_for(tool: Mapping[str, Any], knowledge: Knowledge | KnowledgeView) -> ToolVerdict:
    """The strict SEP-2487 verdict for one tool definition (requirements read from the wire field,
    else its `_meta` mirror). Warnings from client resolvers are included in the verdict's.

    Give a `knowledge.view()` to ask about many tools, one at a time, against one consistent
    snapshot of the knowledge (a framework that filters a listing tool by tool)."""
    view = knowledge if isinstance(knowledge, KnowledgeView) else KnowledgeView(knowledge)
    warned = len(view.warnings)
    result = _verdicts((tool,), view)[0]
    if len(view.warnings) > warned:
        result = result._replace(warnings=result.warnings + tuple(view.warnings[warned:]))
    return result


class FilterMode(enum.StrEnum):
    """How filtering treats WILL_FAIL tools: drop them, move them last, or only annotate."""

    HIDE = "hide"
    DEMOTE = "demote"
    ANNOTATE = "annotate"


@dataclass(frozen=True, slots=True)
class FilterResult:
    """The outcome of filtering one `tools/list` result.

    `kept`: the tool dicts (unmodified) in presentation order; `kept_index`: each one's position in
    the input. `hidden`: (name, unsatisfiable) of each dropped tool (hide mode only). `verdicts`:
    one per input tool, in input order. `warnings`: malformed fields and resolver failures."""

    mode: FilterMode
    kept: tuple[Any, ...]
    kept_index: tuple[int, ...]
    hidden: tuple[tuple[str, tuple[str, ...]], ...]
    verdicts: tuple[ToolVerdict, ...]
    warnings: tuple[str, ...]

    def to_json(self, mode: FilterMode | str | None = None) -> dict[str, Any]:
        """The CLI's JSON (SPEC §8). `hide`: exactly `{"kept": [names], "hidden": [{"name",
        "unsatisfiable"}]}`. `demote`/`annotate`: `{"kept": [names], "hidden": [], "verdicts":
        [{"name", "verdict", "unsatisfiable", "unknown"}]}`, `verdicts` in the order of `kept`,
        `verdict` "proceed" or "will_fail". `mode` picks the shape; default: this result's mode."""
        shape = self.mode if mode is None else _mode(mode)
        kept = [self.verdicts[i] for i in self.kept_index]
        out: dict[str, Any] = {
            "kept": [v.name for v in kept],
            "hidden": [{"name": n, "unsatisfiable": list(u)} for n, u in self.hidden]}
        if shape is not FilterMode.HIDE:
            out["verdicts"] = [v.to_dict() for v in kept]
        return out


def _mode(mode: FilterMode | str) -> FilterMode:
    try:
        return FilterMode(mode)
    except ValueError:
        raise InputError(f"unknown filter mode {mode!r} (expected 'hide', 'demote' or 'annotate')"
                         ) from None


def filter_tools(tools: Sequence[Any], knowledge: Knowledge,
                 mode: FilterMode | str = FilterMode.HIDE) -> FilterResult:
    """Filter a `tools/list` result (a list of tool dicts) by the strict verdicts.

    `hide` drops WILL_FAIL tools; `demote` keeps all, WILL_FAIL ones last, relative order kept in
    both groups; `annotate` keeps all in order. The knowledge is read once, as one snapshot."""
    chosen = _mode(mode)
    if not isinstance(tools, list | tuple):
        hint = (': pass its "tools" array' if isinstance(tools, Mapping) and "tools" in tools
                else "")
        raise InputError(f"filter_tools: tools must be a list of tool definitions, got "
                         f"{type(tools).__name__}{hint}")
    view = KnowledgeView(knowledge)
    verdicts = _verdicts(tools, view)
    warnings = [w for v in verdicts if v.warnings for w in v.warnings] + view.warnings
    will_fail = _WILL_FAIL  # a local: enum member access through the class is slow in a loop
    failing = [i for i, v in enumerate(verdicts) if v.verdict is will_fail]
    hidden: list[tuple[str, tuple[str, ...]]] = []
    if chosen is FilterMode.ANNOTATE or not failing:
        order: Sequence[int] = range(len(verdicts))
    else:
        failed = set(failing)
        order = [i for i in range(len(verdicts)) if i not in failed]
        if chosen is FilterMode.HIDE:
            hidden = [(verdicts[i].name, verdicts[i].unsatisfiable) for i in failing]
        else:
            order += failing
    return FilterResult(chosen, tuple(map(tools.__getitem__, order)), tuple(order), tuple(hidden),
                        tuple(verdicts), tuple(warnings))
