"""Policy test files (`mcp-preconditions policy test`): cases of claims, state, flags and environment
with the expected decision per tool, run against the real guard.

A case never mutates the loaded policy: its overrides build a modified copy. Cases ignore the
environment variable that replaces `environment` (MCP_PRECONDITIONS_ENVIRONMENT by default), so a
test file gives the same result on every machine; a case sets `environment = [...]` instead.
"""

from __future__ import annotations

import dataclasses
import datetime
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..approvals import decided_by
from ..errors import InputError, PolicyError, RequirementError
from ..files import read_bounded, read_tools
from ..guard import Guard
from ..namespaces import LiveSources
from ..outcomes import Decision
from ..policy.load import PolicySource, key_path, load_policy
from ..policy.model import FlagValue
from ..principal import ANONYMOUS_IDENTITY, Identity, Principal
from ..resolvers import FixedQuotaStore
from ..resolvers.base import Resolver
from ..wire import raw_requirements

NonEmpty = Annotated[str, Field(min_length=1)]
_TOML_DATES = (datetime.date, datetime.time)  # datetime.datetime is a date


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Expectation(_Strict):
    """What one tool's decision must be. `unmet` compares as a set: order does not matter."""

    allowed: bool
    unmet: list[NonEmpty] | None = None
    withheld: Annotated[int, Field(ge=0)] | None = None


class Case(_Strict):
    """One principal (claims; none = anonymous) in one world (state, flags, environment, quota
    units used), calling every expected tool with the same `arguments` (for grants with argument
    conditions)."""

    name: NonEmpty
    claims: dict[str, Any] | None = None
    arguments: dict[str, Any] | None = None
    state: dict[NonEmpty, bool] = Field(default_factory=dict)
    flags: dict[NonEmpty, FlagValue] = Field(default_factory=dict)
    environment: list[NonEmpty] | None = None
    # quota name -> units already used in the caller's bucket (every tool of the case sees it)
    quota_used: dict[NonEmpty, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    expect: dict[str, Expectation] = Field(min_length=1)

    @field_validator("claims", "arguments")
    @classmethod
    def _json_values(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        where = _toml_date(value)
        if where is not None:
            raise ValueError(f"{where.lstrip('.')}: a TOML date or time is not a JSON value "
                             "(use a number or a string)")
        return value


class PolicyTestSpec(_Strict):
    policy: NonEmpty
    tools: NonEmpty | None = None
    cases: list[Case] = Field(min_length=1)


def _toml_date(value: Any, where: str = "") -> str | None:
    """The key path of the first TOML date/time inside `value`, or None."""
    if isinstance(value, _TOML_DATES):
        return where
    children: list[tuple[str, Any]] = []
    if isinstance(value, Mapping):
        children = [(f"{where}.{key}", item) for key, item in value.items()]
    elif isinstance(value, list):
        children = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    for place, item in children:
        found = _toml_date(item, place)
        if found is not None:
            return found
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyTests:
    """A loaded test file: the policy under test, the tools (name -> raw requirements), the cases."""

    source: str
    policy: PolicySource
    tools: dict[str, Any]
    cases: tuple[Case, ...]
    resolvers: tuple[Resolver, ...] = ()  # custom resolvers given in code or on the command line


@dataclasses.dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    differences: tuple[str, ...]
    # The approvals taken as given (a person decides each call), as lines: `tool: approval:NAME
    # asks the caller` / `needs an approver`.
    approvals: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "passed": self.passed, "differences": list(self.differences)}
        if self.approvals:
            out["approvals"] = list(self.approvals)
        return out


def _invalid(source: str, problems: list[str]) -> InputError:
    """Every problem of a test file, printed as one `<file>: <place>: <problem>` line each."""
    return PolicyError(source, problems, what="invalid policy test file")


def _problems(exc: ValidationError) -> list[str]:
    out: dict[str, None] = {}
    for err in exc.errors(include_url=False):
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (a typo here would silently skip a check)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        out.setdefault(f"{key_path(tuple(err['loc']))}: {msg}", None)
    return list(out)


def parse_test_file(data: bytes, source: str) -> PolicyTestSpec:
    """Validate the bytes of a test file; InputError lists every problem by key path."""
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _invalid(source, [f"(file): not UTF-8 ({exc.reason} at byte {exc.start})"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise _invalid(source, [f"(file): not valid TOML: {exc}"]) from None
    except RecursionError:
        raise _invalid(source, ["(file): not usable TOML: nested too deeply"]) from None
    try:
        return PolicyTestSpec.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(source, _problems(exc)) from None


def _consistency(spec: PolicyTestSpec, tools: list[str], quotas: list[str]) -> list[str]:
    """Problems the schema cannot see: duplicate case names, unknown tools and quotas,
    contradictions."""
    problems: list[str] = []
    defined = ", ".join(repr(q) for q in quotas) or "none"
    seen: dict[str, int] = {}
    known = ", ".join(tools) or "(none)"
    for i, case in enumerate(spec.cases):
        if case.name in seen:
            problems.append(f"cases[{i}].name: duplicate case name {case.name!r} "
                            f"(first at cases[{seen[case.name]}])")
        seen.setdefault(case.name, i)
        for quota in case.quota_used:
            if quota not in quotas:
                problems.append(f"{key_path(('cases', i, 'quota_used', quota))}: the policy defines "
                                f"no such quota (defined quotas: {defined})")
        for tool, exp in case.expect.items():
            where = key_path(("cases", i, "expect", tool))
            if tool not in tools:
                problems.append(f"{where}: unknown tool (known tools: {known})")
            if exp.unmet is not None and len(set(exp.unmet)) != len(exp.unmet):
                problems.append(f"{where}.unmet: lists a requirement more than once")
            if exp.allowed and exp.unmet:
                problems.append(f"{where}: an allowed tool has no unmet requirements")
    return problems


def load_tests(path: str | Path, resolvers: Iterable[Resolver] = ()) -> PolicyTests:
    """Read a test file, the policy and tools it names (paths relative to it), and check them.
    `resolvers` decide custom namespaces in every case."""
    custom = tuple(resolvers)
    p = Path(path)
    spec = parse_test_file(read_bounded(p), str(path))
    policy = load_policy(p.parent / spec.policy)
    tools: dict[str, Any] = {}
    if spec.tools is not None:
        tools = {t["name"]: raw_requirements(t) for t in read_tools(p.parent / spec.tools)}
    try:  # compiling once up front reports invalid requirements before any case runs
        names = Guard(policy, tools, resolvers=custom).tool_names()
    except RequirementError as exc:
        raise PolicyError(str(path), exc.messages,
                          what="the tools under test fail start-up validation") from None
    names += [n for n in policy.policy.tools if n not in tools]
    problems = _consistency(spec, names, list(policy.policy.quotas))
    if problems:
        raise _invalid(str(path), problems)
    return PolicyTests(str(path), policy, tools, tuple(spec.cases), custom)


def case_policy(base: PolicySource, case: Case) -> PolicySource:
    """The policy as one case sees it: overrides on top of the static values, a copy, hermetic."""
    policy = base.policy
    update: dict[str, Any] = {"environment_variable": None}
    if case.state:
        update["state"] = policy.state.model_copy(
            update={"values": {**policy.state.values, **case.state}})
    if case.flags:
        update["features"] = policy.features.model_copy(
            update={"flags": {**policy.features.flags, **case.flags}})
    if case.environment is not None:
        update["environment"] = list(case.environment)
    return dataclasses.replace(base, policy=policy.model_copy(update=update))


def _identity(case: Case) -> Identity:
    if case.claims is None:
        return ANONYMOUS_IDENTITY
    return Identity(principal=Principal.from_claims(case.claims))


def _listed(items: Any) -> str:
    return "[" + ", ".join(items) + "]"


def differences(tool: str, expected: Expectation, decision: Decision) -> list[str]:
    """How one decision differs from what the case expects (empty when it matches)."""
    out: list[str] = []
    got = "allowed" if decision.allowed else f"denied (unmet {_listed(decision.unmet)})"
    if decision.allowed != expected.allowed:
        out.append(f"{tool}: expected {'allowed' if expected.allowed else 'denied'}, got {got}")
    if expected.unmet is not None and set(expected.unmet) != set(decision.unmet):
        missing = [r for r in expected.unmet if r not in decision.unmet]
        extra = [r for r in decision.unmet if r not in expected.unmet]
        detail = "; ".join(part for part in (
            f"expected but met: {_listed(missing)}" if missing else "",
            f"unmet but not expected: {_listed(extra)}" if extra else "") if part)
        out.append(f"{tool}: unmet {_listed(decision.unmet)}, expected {_listed(expected.unmet)} "
                   f"({detail})")
    if expected.withheld is not None and expected.withheld != decision.withheld:
        out.append(f"{tool}: withheld {decision.withheld}, expected {expected.withheld}")
    if out and decision.errors:
        out.append(f"{tool}: resolver errors: {_listed(decision.errors)}")
    return out


def run_case(tests: PolicyTests, case: Case) -> CaseResult:
    # Quotas count from the case's `quota_used`, never from a live store, and keep nothing.
    # Approvals are given per call by a person: taken as given, the call decided on the rest.
    used = FixedQuotaStore(case.quota_used, name="the case's quota_used")
    guard = Guard(case_policy(tests.policy, case), tests.tools, resolvers=tests.resolvers,
                  live=LiveSources(quotas=used, approvals_taken_as_given=True))
    identity = _identity(case)
    found: list[str] = []
    approvals: list[str] = []
    for tool, expected in case.expect.items():
        decision = guard.decide(tool, identity, case.arguments, record=False)
        found += differences(tool, expected, decision)
        approvals += [f"{tool}: {o.requirement} {who.replace('_', ' ')}" for o in decision.outcomes
                      if (who := decided_by(o.requirement, guard.snapshot.registry)) is not None]
    return CaseResult(case.name, tuple(found), tuple(approvals))


def run_tests(tests: PolicyTests) -> list[CaseResult]:
    """Every case's result, in file order."""
    return [run_case(tests, case) for case in tests.cases]


def report(results: list[CaseResult]) -> str:
    """PASS/FAIL per case with the differences, then `N passed, M failed`."""
    lines: list[str] = []
    for result in results:
        lines.append(f"{'PASS' if result.passed else 'FAIL'}  {result.name}")
        lines += [f"      {d}" for d in result.differences]
        lines += [f"      {a} (taken as given: a person decides each call)"
                  for a in result.approvals]
    failed = sum(1 for r in results if not r.passed)
    lines.append(f"{len(results) - failed} passed, {failed} failed")
    return "\n".join(lines)
