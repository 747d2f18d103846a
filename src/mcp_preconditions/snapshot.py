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
from .compiled import Check, CompiledTool, Metered, being_cancelled, coerce, short_reason
from .errors import RequirementError
from .memo import CallerMemo, reads_of
from .outcomes import MALFORMED_REQUIREMENTS, Outcome, Ruling, Status, ruling
from .policy.load import PolicySource
from .principal import Identity
from .requirements import Finding, check_shape, lint, merge, namespace_of, validate
from .resolvers import LiveSources, Registry, Resolver, build_registry
from .resolvers.base import CallContext, Dependencies
from .resolvers.quota import QuotaResolver

_NO_ARGUMENTS: Mapping[str, Any] = MappingProxyType({})

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
                if namespace_of(req) == "quota":  # a grant only looks: it would never take a unit
                    problem = ("a quota is not a grant condition: put it in the tool's requirements, "
                               "where an allowed call takes a unit")
                self._check(req)
                if problem:
                    self.findings.append(Finding("error", f"(policy capabilities.grants[{i}].when)",
                                                 f"requirement {req!r}: {problem}", req,
                                                 self.source.source))

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
        positions = tuple(i for i, c in enumerate(checks) if isinstance(c.resolver, QuotaResolver))
        if positions:
            return self._metered(name, reqs, checks, positions)
        return self._compiled(name, reqs, checks)

    def _compiled(self, name: str, reqs: tuple[str, ...], checks: tuple[Check, ...]
                  ) -> CompiledTool:
        dynamic = any(c.static is None for c in checks)
        reads = [self._caller_reads(c, frozenset()) for c in checks]
        caller_only = dynamic and None not in reads
        return CompiledTool(name, reqs, checks, dynamic, self._advertised(reqs),
                            reads_of(r for rs in reads if rs for r in rs) if caller_only else None)

    def _metered(self, name: str, reqs: tuple[str, ...], checks: tuple[Check, ...],
                 positions: tuple[int, ...]) -> CompiledTool:
        """A tool with quotas: its other checks compiled as a tool of their own, plus the plan
        that takes the quotas' units."""
        quotas = tuple(checks[i] for i in positions)
        others = tuple(c for i, c in enumerate(checks) if i not in positions)
        rest = self._compiled(name, tuple(c.requirement for c in others), others)
        resolver = quotas[0].resolver
        assert isinstance(resolver, QuotaResolver)  # how `positions` were chosen
        plan = resolver.plan([c.requirement for c in quotas])
        last = positions == tuple(range(len(others), len(checks)))
        return CompiledTool(name, reqs, checks, True, self._advertised(reqs), None,
                            Metered(rest, quotas, positions, plan, last))

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

    async def _bounded(self, namespace: str, pending: Awaitable[Any]) -> tuple[Any, str | None]:
        """An awaited lookup under the snapshot's timeout: (its result, None), or (None, why it
        failed)."""
        try:
            async with asyncio.timeout(self.timeout) as deadline:  # no extra task, unlike wait_for
                result = await pending
            if deadline.expired():  # it swallowed the cancellation and answered late: not trusted
                raise TimeoutError
        except TimeoutError:
            return None, f"resolver '{namespace}' timed out after {self.timeout:g} s"
        except asyncio.CancelledError:
            if being_cancelled():
                raise  # the call itself is being cancelled: let it go
            # A resolver's own CancelledError (a backend client cancelling its work) is a failure
            # of this lookup, not of the call: it must still end in a decision, a denial.
            return None, f"resolver '{namespace}' was cancelled"
        except Exception as exc:
            return None, f"resolver '{namespace}' raised {short_reason(exc)}"
        return result, None

    def evaluate(self, tool: CompiledTool, identity: Identity, arguments: Mapping[str, Any] | None
                 ) -> Ruling | Awaitable[Ruling]:
        """The call's ruling: every requirement's outcome, in the tool's order, and whether they
        allow it; awaitable only if some lookup is async. A tool the caller alone decides answers
        from its memo after the first call. A tool's quotas are decided last, and only when every
        other requirement holds: then one unit of each is taken, or none."""
        if tool.metered is not None:
            return self._metered_ruling(tool.metered, identity, arguments)
        if not tool.dynamic:  # every outcome fixed for the snapshot
            return ruling(tuple(c.static for c in tool.checks))  # type: ignore[misc]
        reads, principal = tool.reads, identity.principal
        if reads is not None and principal is not None:
            memo = self.memo
            key = memo.key(tool.name, reads, principal, arguments)
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

    def _metered_ruling(self, metered: Metered, identity: Identity,
                        arguments: Mapping[str, Any] | None) -> Ruling | Awaitable[Ruling]:
        others = self.evaluate(metered.rest, identity, arguments)
        if others.__class__ is tuple:
            return self._settled(metered, others, identity)
        return self._settled_later(metered, others, identity)  # type: ignore[arg-type]

    async def _settled_later(self, metered: Metered, pending: Awaitable[Ruling], identity: Identity
                             ) -> Ruling:
        decided = self._settled(metered, await pending, identity)
        return decided if isinstance(decided, tuple) else await decided

    def _settled(self, metered: Metered, others: Ruling, identity: Identity
                 ) -> Ruling | Awaitable[Ruling]:
        """The quotas' outcomes merged into the others' (tool order), and the one rule on them.
        A call the other requirements refuse is refused without its quotas: no store is asked (a
        caller without a token costs no Redis round trip) and no quota outcome is reported, as a
        quota that was not checked is neither satisfied nor used up."""
        allowed, outcomes = others
        if outcomes and not allowed:
            return others
        quotas: tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]
        try:
            quotas = metered.plan.take(identity)
        except Exception as exc:  # a failing store is `error` for every quota (fail closed)
            quotas = _errors(metered.plan.requirements, f"resolver 'quota' raised {short_reason(exc)}")
        if isinstance(quotas, tuple):
            slot = metered.merged
            seen = slot[0] if slot else None  # one slot, replaced whole: threads may race
            if seen is not None and seen[0] is others and seen[1] is quotas:
                return seen[2]
            decided = _merged(metered, outcomes, quotas)
            slot[:] = [(others, quotas, decided)]
            return decided
        return self._taken_later(metered, outcomes, quotas)

    async def _taken_later(self, metered: Metered, others: tuple[Outcome, ...],
                           pending: Awaitable[tuple[Outcome, ...]]) -> Ruling:
        """`_settled` for a store that must be awaited (Redis), under the snapshot's timeout."""
        taken, failure = await self._bounded("quota", pending)
        return _merged(metered, others, taken if failure is None else
                       _errors(metered.plan.requirements, failure))

    @staticmethod
    async def _gather(results: list[Outcome | Awaitable[Outcome]]) -> Ruling:
        pending = [r for r in results if not isinstance(r, Outcome)]
        done = iter(await asyncio.gather(*pending))
        return ruling(tuple(r if isinstance(r, Outcome) else next(done) for r in results))


def _merged(metered: Metered, others: tuple[Outcome, ...], quotas: tuple[Outcome, ...]) -> Ruling:
    """Every outcome in the tool's order (each quota back at its place), ruled by the one rule."""
    if metered.last:  # the usual order: the quotas after every other requirement
        return ruling(others + quotas)
    merged = list(others)
    for position, outcome in zip(metered.positions, quotas, strict=True):
        merged.insert(position, outcome)  # positions ascend: each lands at its final index
    return ruling(tuple(merged))


def _errors(requirements: tuple[str, ...], reason: str) -> tuple[Outcome, ...]:
    return tuple(Outcome(r, Status.ERROR, reason, transient=True) for r in requirements)
