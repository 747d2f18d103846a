"""Compile a policy plus tool definitions into an immutable Snapshot, and evaluate calls against it.

Compiling validates every requirement once and pre-decides the ones fixed for the snapshot (env
labels, static flags and state, through each resolver's own `static_outcome`). Evaluating runs the
rest, always through the resolver's `resolve`: sync resolvers inline, async ones concurrently, each
under a timeout. Anything but a clean `satisfied` never allows a call.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from .arguments import ArgumentCondition
from .compiled import Check, CompiledTool, Staged, being_cancelled, coerce, short_reason
from .errors import RequirementError
from .late import LateCall, Sidecar, late_resolver
from .memo import CallerMemo, reads_of
from .namespaces import LiveSources, build_registry
from .outcomes import MALFORMED_REQUIREMENTS, Outcome, Ruling, ruling
from .policy.load import PolicySource
from .principal import Identity
from .requirements import Finding, check_shape, lint, merge, namespace_of, validate
from .resolvers import Registry, Resolver
from .resolvers.base import CallContext, Dependencies
from .staged import merged_one, settle

_NO_ARGUMENTS: Mapping[str, Any] = MappingProxyType({})
# `LateCall(...)` without the NamedTuple's own `__new__` (a Python frame on every staged call).
_late_call = tuple.__new__

class Snapshot:
    """One compiled policy revision. Immutable after construction; swapped whole on reload."""

    def __init__(self, source: PolicySource, tools: Mapping[str, Any], *,
                 custom: Iterable[Resolver] = (), live: LiveSources | None = None,
                 entry_points: bool = True, strict: bool = True,
                 previous: Snapshot | None = None) -> None:
        """`previous`: the snapshot this one replaces. When it compiled the same policy source
        (only the tools changed, e.g. a gateway's upstream listed again), its resolvers, compiled
        checks and every unchanged tool are reused: a listing of 1,500 tools with one new tool
        compiles one tool, and no resolver (a Redis client, a flag provider) is built again."""
        self.source = source
        self.revision = source.revision
        self.timeout = source.policy.guard.lookup_timeout_seconds
        self.confidential = frozenset(source.policy.confidential)
        self._options = (tuple(custom), live, entry_points, strict)
        base = previous if previous is not None and previous.source is source and \
            previous._options == self._options else None
        self.findings: list[Finding] = []
        self.memo = CallerMemo()
        self._raw: dict[str, Any] = {}  # each tool's own requirements, as compiled
        self._tool_findings: dict[str, list[Finding]] = {}
        if base is None:
            self.registry: Registry = build_registry(source, self.evaluate_one, custom=custom,
                                                     live=live, entry_points=entry_points)
            self._checks: dict[str, Check] = {}  # one per distinct string: tools share them
            self._check_grants(strict)
            self._check_resolvers()
            self._grant_findings = list(self.findings)
        else:
            self.registry = base.registry
            self._checks = dict(base._checks)
            self._grant_findings = base._grant_findings
            self.findings.extend(self._grant_findings)
        self.tools: dict[str, CompiledTool] = {}
        for name in merge(tools, source.policy.tools):
            raw = tools.get(name)
            if base is not None and name in base._raw and base._raw[name] == raw:
                compiled: CompiledTool | None = base.tools.get(name)
                found = base._tool_findings.get(name, [])
            else:
                before = len(self.findings)
                compiled = self._compile(name, raw, strict)
                found = self.findings[before:]
                del self.findings[before:]
            self._raw[name] = raw
            if found:
                self._tool_findings[name] = found
                self.findings.extend(found)
            if compiled is not None and compiled.requirements:
                self.tools[name] = compiled
        # The tools whose late stages may ask their caller, and how many questions at most (one
        # per `self` approval, SPEC §15): an adapter that can ask carries a sidecar for them.
        # And the tools a late stage leaves something for whatever the adapter (`carries`: what to
        # do once the call finished, say): every adapter carries a sidecar for them.
        self.asking: dict[str, int] = {}
        carrying = set()
        for name, compiled_tool in self.tools.items():
            stages = compiled_tool.late.stages if compiled_tool.late is not None else ()
            asks = sum(getattr(stage, "asks", 0) for stage in stages)
            if asks:
                self.asking[name] = asks
            if any(getattr(stage, "carries", False) for stage in stages):
                carrying.add(name)
        self.carrying = frozenset(carrying)
        # The tools with late stages at all: for any other, nothing is left beside a call's decision
        # (an adapter that forwards a sidecar need not make one: the gateway's `Decide.call`).
        self.late = frozenset(n for n, t in self.tools.items() if t.late is not None)
        errors = [str(f) for f in self.findings if f.severity == "error"]
        if errors and strict:
            raise RequirementError(errors)

    # -- compile ---------------------------------------------------------------------------------
    def _check_grants(self, strict: bool) -> None:
        for i, grant in enumerate(self.source.policy.capabilities.grants):
            if not grant.when:
                self.findings.append(Finding(
                    "warning", f"(policy capabilities.grants[{i}])",
                    f"grant of {', '.join(grant.capabilities)} has no 'when' conditions: it applies to "
                    "every caller, anonymous ones included", None, self.source.source))
            for req in grant.when:
                problem = self.registry.check_form(req)
                late = late_resolver(self.registry.for_requirement(req))
                if late is not None:  # a grant only looks: it would never take a unit, obtain...
                    problem = late.not_a_condition
                self._check(req)
                if problem:
                    self.findings.append(Finding("error", f"(policy capabilities.grants[{i}].when)",
                                                 f"requirement {req!r}: {problem}", req,
                                                 self.source.source))

    def _check_resolvers(self) -> None:
        """What each resolver finds wrong in the part of the policy it was built from, once per
        registry (`policy_findings(registry)`: an approver requirement of an unknown namespace, say)."""
        for namespace in self.registry.namespaces():
            findings = getattr(self.registry.get(namespace), "policy_findings", None)
            if callable(findings):
                self.findings.extend(findings(self.registry))

    def _compile(self, name: str, raw: Any, strict: bool) -> CompiledTool:
        code, shape_errors = check_shape(name, raw)
        policy_reqs = self.source.policy.tools.get(name)
        from_policy = [r for r in (policy_reqs.requirements if policy_reqs else ()) if r not in code]
        reqs = merge(code, from_policy)
        self.findings.extend(shape_errors)
        self.findings.extend(validate(name, code, self.registry))
        self.findings.extend(lint(name, code))
        if policy_reqs:  # a problem with a requirement the policy added is the policy file's
            self.findings.extend(replace(f, source=self.source.source) for f in
                                 [*validate(name, from_policy, self.registry),
                                  *lint(name, policy_reqs.requirements)])
        if shape_errors and not strict:
            # Garbage in the tool's own field must never open it: deny the tool outright.
            bad = Check(MALFORMED_REQUIREMENTS, Outcome.unsatisfied(
                MALFORMED_REQUIREMENTS, "the tool's requirements are not a list of strings"), None)
            shown = (*reqs, bad.requirement)
            return CompiledTool(name, shown, (*map(self._check, reqs), bad), True,
                                self._advertised(shown))
        checks = tuple(self._check(r) for r in reqs)
        if any(late_resolver(c.resolver) is not None for c in checks):
            return self._staged(name, reqs, checks)
        return self._compiled(name, reqs, checks)

    def _compiled(self, name: str, reqs: tuple[str, ...], checks: tuple[Check, ...]
                  ) -> CompiledTool:
        dynamic = any(c.static is None for c in checks)
        reads = [self._caller_reads(c, frozenset()) for c in checks]
        caller_only = dynamic and None not in reads
        return CompiledTool(name, reqs, checks, dynamic, self._advertised(reqs),
                            reads_of(r for rs in reads if rs for r in rs) if caller_only else None)

    def _staged(self, name: str, reqs: tuple[str, ...], checks: tuple[Check, ...]) -> CompiledTool:
        """A tool with late requirements (late.py): its other checks compiled as a tool of their
        own, plus one stage per late namespace, in the order they are decided."""
        groups: dict[int, list[int]] = {}
        resolvers = {}
        for i, check in enumerate(checks):
            late = late_resolver(check.resolver)
            if late is not None:
                groups.setdefault(id(late), []).append(i)
                resolvers[id(late)] = late
        order = sorted(groups, key=lambda k: resolvers[k].order)
        stages = tuple(resolvers[k].stage([checks[i].requirement for i in groups[k]]) for k in order)
        positions = tuple(tuple(groups[k]) for k in order)
        late_positions = {i for group in positions for i in group}
        others = tuple(c for i, c in enumerate(checks) if i not in late_positions)
        rest = self._compiled(name, tuple(c.requirement for c in others), others)
        last = len(stages) == 1 and positions[0] == tuple(range(len(others), len(checks)))
        quick = getattr(stages[0], "quick", None) if len(stages) == 1 else None
        return CompiledTool(name, reqs, checks, True, self._advertised(reqs), None,
                            Staged(rest, stages, positions, len(checks), last,
                                   quick if callable(quick) else None))

    def _advertised(self, requirements: tuple[str, ...]) -> tuple[str, ...]:
        """What a listing may show of a tool's requirements: the confidential ones left out."""
        confidential = self.confidential
        if not confidential.intersection(requirements):
            return requirements  # the common case shares the tuple
        return tuple(r for r in requirements if r not in confidential)

    def _caller_reads(self, check: Check, seen: frozenset[str]) -> tuple[ArgumentCondition, ...] | None:
        """The argument conditions a check reads when the caller alone decides it (a static check
        reads none), else None: its resolver does not declare `dependencies` for it, or one of the
        requirements it depends on is not decided by the caller alone."""
        if check.static is not None:
            return ()
        declared = getattr(check.resolver, "dependencies", None)
        if declared is None or check.requirement in seen:
            return None
        try:
            deps = declared(check.requirement)
        except Exception:
            return None
        if not isinstance(deps, Dependencies) or not all(
                isinstance(a, ArgumentCondition) for a in deps.arguments):
            return None
        reads = list(deps.arguments)
        for requirement in deps.requirements:
            inner = self._caller_reads(self._check(requirement), seen | {check.requirement})
            if inner is None:
                return None
            reads.extend(inner)
        return tuple(reads)

    def _check(self, requirement: str) -> Check:
        """The compiled check of a requirement string, built once per snapshot."""
        check = self._checks.get(requirement)
        if check is None:
            check = self._checks[requirement] = self._new_check(requirement)
        return check

    def _new_check(self, requirement: str) -> Check:
        resolver = self.registry.for_requirement(requirement)
        if resolver is None:
            ns = namespace_of(requirement)
            why = f"no resolver for namespace '{ns}'" if ns else "requirement has no namespace"
            return Check(requirement, Outcome.unsatisfied(requirement, why), None)
        if self.registry.check_form(requirement) is not None:
            return Check(requirement, Outcome.unsatisfied(requirement, "form rejected by resolver"),
                         None)
        static = getattr(resolver, "static_outcome", None)
        if static is not None:
            try:
                pre = static(requirement)
            except Exception as exc:
                pre = Outcome.error(requirement,
                                    f"resolver '{resolver.namespace}' raised {short_reason(exc)}")
            if pre is not None:
                return Check(requirement, coerce(requirement, pre, resolver.namespace), None)
        return Check(requirement, None, resolver)

    def check_of(self, requirement: str) -> Check | None:
        """The compiled check of a requirement some tool or grant of this snapshot names."""
        return self._checks.get(requirement)

    # -- evaluate --------------------------------------------------------------------------------
    def evaluate_one(self, requirement: str, context: CallContext) -> Outcome | Awaitable[Outcome]:
        """Decide one requirement for a call (used by capability grants for their conditions)."""
        # Strings first seen at call time are compiled but not kept: they may come from arguments.
        check = self._checks.get(requirement)
        return self._run(check if check is not None else self._new_check(requirement), context)

    def _run(self, check: Check, context: CallContext) -> Outcome | Awaitable[Outcome]:
        if check.static is not None:
            return check.static
        resolver = check.resolver
        assert resolver is not None
        try:
            result = resolver.resolve(check.requirement, context)
        except (Exception, asyncio.CancelledError) as exc:
            # A sync resolver cannot be cancelled by the call: a CancelledError it raises is its own
            # failure, and must still end in a decision (a denial), like any other exception.
            return Outcome.error(check.requirement,
                                 f"resolver '{resolver.namespace}' raised {short_reason(exc)}")
        if not isinstance(result, Outcome) and inspect.isawaitable(result):
            return self._guarded(check.requirement, resolver.namespace, result)
        return coerce(check.requirement, result, resolver.namespace)

    async def _guarded(self, requirement: str, namespace: str, pending: Awaitable[Any]) -> Outcome:
        result, failure = await self._bounded(namespace, pending)
        if failure is not None:
            return Outcome.error(requirement, failure)
        return coerce(requirement, result, namespace)

    async def _bounded(self, namespace: str, pending: Awaitable[Any], timeout: float | None = None
                       ) -> tuple[Any, str | None]:
        """An awaited lookup under `timeout` (default: the snapshot's lookup timeout): (its result,
        None), or (None, why it failed)."""
        limit = self.timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(limit) as deadline:  # no extra task, unlike wait_for
                result = await pending
            if deadline.expired():  # it swallowed the cancellation and answered late: not trusted
                raise TimeoutError
        except TimeoutError:
            return None, f"resolver '{namespace}' timed out after {limit:g} s"
        except asyncio.CancelledError:
            if being_cancelled():
                raise  # the call itself is being cancelled: let it go
            # A resolver's own CancelledError (a backend client cancelling its work) is a failure
            # of this lookup, not of the call: it must still end in a decision, a denial.
            return None, f"resolver '{namespace}' was cancelled"
        except Exception as exc:
            return None, f"resolver '{namespace}' raised {short_reason(exc)}"
        return result, None

    def evaluate(self, tool: CompiledTool, identity: Identity, arguments: Mapping[str, Any] | None,
                 sidecar: Sidecar | None = None) -> Ruling | Awaitable[Ruling]:
        """The call's ruling: every requirement's outcome, in the tool's order, and whether they
        allow it; awaitable only if some lookup is async. A tool the caller alone decides answers
        from its memo after the first call. A tool's late requirements (late.py) are decided
        last, each stage only when every other requirement and every earlier stage holds
        (`staged.settle`); `sidecar` is what the call carries beside its decision."""
        late = tool.late
        if late is not None:
            others = self.evaluate(late.rest, identity, arguments)
            if others.__class__ is not tuple:
                return self._settled_later(late, others, _late_call(  # type: ignore[arg-type]
                    LateCall, (tool.name, identity, arguments, self.revision, sidecar)))
            allowed, outcomes = others
            if outcomes and not allowed:  # refused without its late outcomes (`_settled_later`)
                return allowed, outcomes
            quick = late.quick  # the one stage's answer at once (what it holds already): no call
            if quick is not None:
                try:
                    found = quick(identity, sidecar)
                except Exception:  # the stage's own `decide` decides (and says why)
                    found = None
                if found is not None:
                    slot = late.merged  # (`merged_one`'s first look, inline: every such call)
                    seen = slot[0] if slot else None
                    if seen is not None and seen[0] is outcomes and seen[1] is found:
                        return seen[2]
                    return merged_one(late, outcomes, found)
            return settle(late, outcomes, _late_call(
                LateCall, (tool.name, identity, arguments, self.revision, sidecar)), self._bounded)
        if not tool.dynamic:  # every outcome fixed for the snapshot
            return ruling(tuple(c.static for c in tool.checks))  # type: ignore[misc]
        reads, principal = tool.reads, identity.principal
        if reads is not None and principal is not None:
            memo = self.memo
            name = reads.argument
            value = arguments.get(name) if name is not None and arguments.__class__ is dict else None
            # A listed string of the one top-level argument read (a grant's usual condition): the
            # key `memo.key` makes, made inline (0.2 µs of a call, bench_mcp).
            key = ((tool.name, id(principal), value)
                   if value.__class__ is str and value in reads.listed
                   else memo.key(tool.name, reads, principal, arguments))
            if key is not None:
                entry = memo.entries.get(key)  # `memo.lookup`, inline: 0.2 µs a call (bench_mcp)
                if entry is not None and entry[0] is principal:
                    return entry[1]
                decided = self._run_checks(tool, identity, arguments)
                if decided.__class__ is tuple:  # only sync answers are remembered
                    memo.keep(key, principal, decided)
                return decided
        return self._run_checks(tool, identity, arguments)

    def _run_checks(self, tool: CompiledTool, identity: Identity, arguments: Mapping[str, Any] | None
                    ) -> Ruling | Awaitable[Ruling]:
        context = CallContext(tool.name, identity, arguments or _NO_ARGUMENTS, self.evaluate_one)
        results: list[Any] = []
        pending = False
        for check in tool.checks:
            result = check.static if check.static is not None else self._run(check, context)
            pending = pending or result.__class__ is not Outcome
            results.append(result)
        return self._gather(results) if pending else ruling(tuple(results))

    async def _settled_later(self, late: Staged, pending: Awaitable[Ruling], call: LateCall
                             ) -> Ruling:
        """A tool's late stages once its other requirements' awaited ruling is in. A call they
        refuse is refused without its late outcomes: no stage is asked, and none is reported (a
        quota not checked is neither satisfied nor used up, nothing is obtained)."""
        allowed, others = await pending
        if others and not allowed:
            return allowed, others
        decided = settle(late, others, call, self._bounded)
        return decided if isinstance(decided, tuple) else await decided

    @staticmethod
    async def _gather(results: list[Outcome | Awaitable[Outcome]]) -> Ruling:
        pending = [r for r in results if not isinstance(r, Outcome)]
        done = iter(await asyncio.gather(*pending))
        return ruling(tuple(r if isinstance(r, Outcome) else next(done) for r in results))

