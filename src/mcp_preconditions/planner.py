"""Fast plans: a tool's decision from the caller's identity alone, compiled once per snapshot.

A resolver may offer, per requirement, a fast check (`Identity -> Outcome | None`, None meaning
"the full evaluation must decide"). A tool whose every requirement is static or has a fast check
gets a plan, which `Guard.check` runs on every call. The plan is built here, in three forms:

- no fast checks: a constant;
- up to `UNROLL_MAX` fast checks: one straight-line function, generated for the tool's shape.
  A built-in check that describes itself (`Inline` specs below: the `auth:` and `capability:`
  checks) is written into that function instead of being called, and a grant condition that is
  also one of the tool's own requirements is decided once. In a server a decision runs between
  much other work, with cold caches: every frame and object not touched is time saved;
- otherwise: a loop over the checks.

Every form returns exactly what calling the fast checks in order would: the same Outcome objects,
None as soon as one check is undecided, and None when any check raises or returns something that
is not an Outcome (the full evaluation then decides, and fails closed). The generated source holds
generated names only (`o3`, `k7`); every value, requirement text included, is bound as a default of
the function's `k` arguments, so tools of the same shape share one code object.
tests/reliability/test_fast_path.py checks the plans against the full evaluation.
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .outcomes import Outcome, Status
from .principal import Identity

FastCheck = Callable[[Identity], "Outcome | None"]
# A tool's fast plan: (outcomes in tool order, allowed), or None when the full evaluation must decide.
Plan = Callable[[Identity], "tuple[tuple[Outcome, ...], bool] | None"]
UNROLL_MAX = 8  # tools with more fast checks than this use the loop
_SATISFIED = Status.SATISFIED


# -- what a fast check may say about itself (each mirrors one built-in check exactly) -------------
@dataclass(frozen=True, slots=True)
class ByKind:
    """`table.get(principal.kind)` (auth:oauth2)."""

    table: Mapping[str, Outcome]


@dataclass(frozen=True, slots=True)
class ClaimEquals:
    """Claim `name` against `expected` (auth:claim without an alias): `missing` when absent
    (`absent` is the marker `claims.get` returns then), `found`/`lacks` by exact string, other
    values through `matches(value, expected)`."""

    name: str
    expected: str
    found: Outcome
    missing: Outcome
    lacks: Outcome
    absent: object
    matches: Callable[[Any, str], bool]


@dataclass(frozen=True, slots=True)
class HasScope:
    """`held` when the token has `scope`; undecided when a scope of `implied_by` is held; else
    `lacks` (auth:scope)."""

    scope: str
    held: Outcome
    lacks: Outcome
    implied_by: frozenset[str]


@dataclass(frozen=True, slots=True)
class Capability:
    """`by_claim` when `claim` is set and `lists(claims, claim, name)`; else the first grant whose
    conditions (fast checks, in order, stopping at the first not satisfied; each must answer an
    Outcome for its own requirement, else the plan is undecided) all hold gives its outcome; else
    `denial(identity)` (capability:NAME)."""

    claim: str | None
    name: str
    by_claim: Outcome
    lists: Callable[[Any, str, str], bool]
    # (granted outcome, ((condition requirement, its fast check), ...)), per grant that can apply
    grants: tuple[tuple[Outcome, tuple[tuple[str, FastCheck], ...]], ...]
    denial: FastCheck


Inline = ByKind | ClaimEquals | HasScope | Capability


# Where `describe` leaves a spec: on the check itself (so it lives and dies with the check and its
# snapshot), with a weak reference to that very check. A wrapper made with functools.wraps copies
# the attribute, and must not pass for the check it wraps (its own logic would never run): the
# reference does not point to it.
INLINE_ATTR = "__mcp_preconditions_inline__"


def describe(check: FastCheck, spec: Inline) -> FastCheck:
    """Record that `spec` mirrors `check` exactly, so that plans may write it inline."""
    setattr(check, INLINE_ATTR, (weakref.ref(check), spec))
    return check


def _spec_of(check: FastCheck) -> Inline | None:
    """The spec `describe` recorded for this very object, else None (the check is called)."""
    try:
        entry = getattr(check, INLINE_ATTR, None)
        if (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], weakref.ref)
                and entry[0]() is check
                and isinstance(entry[1], ByKind | ClaimEquals | HasScope | Capability)):
            spec: Inline = entry[1]
            return spec
    except Exception:  # an odd callable: it is simply called
        pass
    return None


# -- plans ----------------------------------------------------------------------------------------
def fast_plan(statics: list[Outcome | None], fast: list[tuple[int, str, FastCheck]]) -> Plan:
    """The plan of a tool: `statics` holds each position's static outcome (None where a fast
    check decides), `fast` the (position, requirement, fast check) triples. A called check must
    answer an `Outcome` for its own requirement; anything else leaves the plan undecided."""
    static_ok = all(o.status is _SATISFIED for o in statics if o is not None)
    if not fast:
        fixed = (tuple(o for o in statics if o is not None), bool(statics) and static_ok)
        return lambda identity: fixed
    if len(fast) > UNROLL_MAX:
        return _looping_plan(statics, fast, static_ok)
    inline = any(_spec_of(check) is not None for _, _, check in fast)
    return _generated_plan(statics, fast, static_ok, inline=inline)


def _looping_plan(statics: list[Outcome | None], fast: list[tuple[int, str, FastCheck]],
                  static_ok: bool) -> Plan:
    steps = tuple(fast)

    def plan(identity: Identity) -> tuple[tuple[Outcome, ...], bool] | None:
        outcomes: list[Any] = statics.copy()
        allowed = static_ok
        try:
            for i, requirement, check in steps:
                outcome = check(identity)
                # None (undecided here), not an Outcome, or one for another requirement
                if outcome.__class__ is not Outcome or outcome.requirement != requirement:
                    return None
                if outcome.status is not _SATISFIED:
                    allowed = False
                outcomes[i] = outcome
        except Exception:  # the full evaluation decides, turning the failure into an `error` outcome
            return None
        return tuple(outcomes), allowed
    return plan


class _Source:
    """The generated function's lines, and the values its factory binds to generated names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.values: list[Any] = []
        self._names: dict[int, str] = {}

    def bind(self, value: Any) -> str:
        name = self._names.get(id(value))
        if name is None:
            name = self._names[id(value)] = f"k{len(self.values)}"
            self.values.append(value)
        return name

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def build(self) -> Plan:
        """The plan: one code object per shape (cached), the values as its argument defaults
        (a tuple per tool: no closure cells, and locals are the fastest reads)."""
        header = f"def plan(identity, {', '.join(f'k{i}=None' for i in range(len(self.values)))}):"
        code, namespace = _compiled("\n".join([header, *self.lines]))
        plan: Plan = types.FunctionType(code, namespace, "plan", tuple(self.values))
        return plan


@functools.lru_cache(maxsize=4096)
def _compiled(source: str) -> tuple[types.CodeType, dict[str, Any]]:
    """The code of one plan shape, and the globals it runs with. The source names no value, so
    every tool of the same shape (kinds of check, in order) shares it; only the defaults differ."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "<mcp-preconditions plan>", "exec"), namespace)
    code: types.CodeType = namespace.pop("plan").__code__
    return code, namespace


def _generated_plan(statics: list[Outcome | None], fast: list[tuple[int, str, FastCheck]],
                    static_ok: bool, *, inline: bool) -> Plan:
    """One straight-line function; with `inline`, described checks are written in."""
    src = _Source()
    outcome, satisfied = src.bind(Outcome), src.bind(_SATISFIED)
    src.emit(1, "try:")
    if inline:
        # Every described check defers a caller without a principal (returns None), and one None
        # makes the whole plan None: so does this, at once.
        src.emit(2, "p = identity.principal")
        src.emit(2, "if p is None:")
        src.emit(3, "return None")
        src.emit(2, "claims = p.claims")
    done: dict[int, str] = {}  # fast check (by id) -> the variable holding its outcome
    for i, requirement, check in fast:
        spec = _spec_of(check) if inline else None
        if spec is None:  # called: it must answer an Outcome for its own requirement
            src.emit(2, f"o{i} = {src.bind(check)}(identity)")
            src.emit(2, f"if o{i}.__class__ is not {outcome} or o{i}.requirement != "
                        f"{src.bind(requirement)}:")
        else:  # written in: its outcomes are the spec's own (None when undecided)
            _emit_spec(src, 2, f"o{i}", spec, done)
            src.emit(2, f"if o{i}.__class__ is not {outcome}:")
        src.emit(3, "return None")
        done[id(check)] = f"o{i}"
    items = ", ".join(f"o{i}" if o is None else src.bind(o) for i, o in enumerate(statics))
    allowed = " and ".join([str(static_ok), *(f"o{i}.status is {satisfied}" for i, _, _ in fast)])
    src.emit(2, f"return ({items},), {allowed}")
    src.emit(1, "except Exception:")
    src.emit(2, "return None")
    return src.build()


def _emit_spec(src: _Source, depth: int, target: str, spec: Inline, done: Mapping[int, str]) -> None:
    """Code setting `target` to what the described check returns (inside `try`, `p`/`claims` set)."""
    if isinstance(spec, ByKind):
        src.emit(depth, f"{target} = {src.bind(spec.table)}.get(p.kind)")
    elif isinstance(spec, ClaimEquals):
        absent, expected = src.bind(spec.absent), src.bind(spec.expected)
        found, lacks = src.bind(spec.found), src.bind(spec.lacks)
        src.emit(depth, f"v = claims.get({src.bind(spec.name)}, {absent})")
        src.emit(depth, f"if v is {absent}:")
        src.emit(depth + 1, f"{target} = {src.bind(spec.missing)}")
        src.emit(depth, "elif v.__class__ is str:")
        src.emit(depth + 1, f"{target} = {found} if v == {expected} else {lacks}")
        src.emit(depth, "else:")
        src.emit(depth + 1, f"{target} = {found} if {src.bind(spec.matches)}(v, {expected}) "
                            f"else {lacks}")
    elif isinstance(spec, HasScope):
        scope, implied = src.bind(spec.scope), src.bind(spec.implied_by)
        src.emit(depth, "s = p.scopes")
        src.emit(depth, f"if {scope} in s:")
        src.emit(depth + 1, f"{target} = {src.bind(spec.held)}")
        src.emit(depth, f"elif {implied} and not {implied}.isdisjoint(s):")
        src.emit(depth + 1, f"{target} = None")
        src.emit(depth, "else:")
        src.emit(depth + 1, f"{target} = {src.bind(spec.lacks)}")
    else:
        _emit_capability(src, depth, target, spec, done)


def _emit_capability(src: _Source, depth: int, target: str, spec: Capability,
                     done: Mapping[int, str]) -> None:
    if spec.claim is not None:
        claim = src.bind(spec.claim)
        src.emit(depth, f"if claims.get({claim}) is not None and "
                        f"{src.bind(spec.lists)}(claims, {claim}, {src.bind(spec.name)}):")
        src.emit(depth + 1, f"{target} = {src.bind(spec.by_claim)}")
        src.emit(depth, "else:")
        depth += 1
    src.emit(depth, f"{target} = None")
    satisfied = src.bind(_SATISFIED)
    outcome = src.bind(Outcome)
    for granted, conditions in spec.grants:
        src.emit(depth, f"if {target} is None:")
        src.emit(depth + 1, "g = True")
        for n, (requirement, condition) in enumerate(conditions):
            inner = depth + 1
            if n:  # a condition is checked only while the grant's earlier ones held
                src.emit(inner, "if g:")
                inner += 1
            known = done.get(id(condition))  # also a requirement of the tool: decided already
            if known is not None:
                src.emit(inner, f"c = {known}")  # an Outcome: the plan returned on anything else
            else:
                nested = _spec_of(condition)
                if nested is None or isinstance(nested, Capability):
                    src.emit(inner, f"c = {src.bind(condition)}(identity)")
                    src.emit(inner, f"if c.__class__ is not {outcome} or c.requirement != "
                                    f"{src.bind(requirement)}:")
                else:
                    _emit_spec(src, inner, "c", nested, done)
                    src.emit(inner, "if c is None:")
                src.emit(inner + 1, "return None")
            src.emit(inner, f"if c.status is not {satisfied}:")
            src.emit(inner + 1, "g = False")
        src.emit(depth + 1, "if g:")
        src.emit(depth + 2, f"{target} = {src.bind(granted)}")
    src.emit(depth, f"if {target} is None:")
    src.emit(depth + 1, f"{target} = {src.bind(spec.denial)}(identity)")
