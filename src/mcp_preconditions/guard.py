"""The server-side guard: compile tools against a policy once, then decide, enforce and record calls.

`Guard.check()` is the one entry point adapters call before a tool's handler. A tool with no
requirements costs a dictionary lookup. Each decision reads one Snapshot, never a mix: a reload
compiles a new Snapshot and swaps the reference atomically.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Awaitable, Coroutine, Iterable, Mapping
from time import perf_counter_ns
from typing import Any, Literal

from .auth import Authenticator, build_authenticator
from .auth.base import (
    CANCELLED,
    AuthenticateNow,
    failed_identity,
    named_now,
    not_an_identity,
)
from .compiled import CompiledTool, being_cancelled
from .decision_sinks import build_recorder, quiet_now
from .decisions import DecisionRecorder, ToolLabels
from .envelope import context_id_for, echoed, new_context_id
from .late import Sidecar
from .namespaces import LiveSources
from .outcomes import (
    MALFORMED_REQUIREMENTS,
    POLICY_UNUSABLE,
    Decision,
    Outcome,
    Refusal,
    Refused,
    Ruling,
    Status,
    new_decision,
)
from .policy.load import PolicySource, parse_policy
from .principal import ANONYMOUS, Credentials, Identity
from .resolvers import Resolver
from .snapshot import Snapshot
from .tool_registry import ToolRegistry, _State, _state, listed

log = logging.getLogger("mcp_preconditions.guard")
Pending = Coroutine[Any, Any, Decision]  # a decision that awaits a lookup first
_NOTHING: frozenset[str] = frozenset()  # a tool without requirements has nothing confidential
EMPTY_POLICY = parse_policy(b"", "(empty policy)")


class Guard(ToolRegistry):
    """Decides tool calls by a policy snapshot.

    `tools` maps each tool name to the requirements declared in its own definition (code); the
    policy's `[tools.NAME]` lists are merged in. Invalid requirements raise RequirementError here,
    at start-up, naming the tool, the requirement and the known namespaces.
    """

    def __init__(self, policy: PolicySource | None = None, tools: Mapping[str, Any] | None = None, *,
                 resolvers: Iterable[Resolver] = (), live: LiveSources | None = None,
                 authenticator: Authenticator | None = None,
                 recorder: DecisionRecorder | None = None, entry_points: bool = True,
                 strict: bool = True, labels: Mapping[str, str] | None = None,
                 tool_labels: ToolLabels | None = None) -> None:
        source = policy or EMPTY_POLICY
        self._tools: dict[str, Any] = dict(tools or {})
        # A token replaced (a new object) whenever any tool's own requirements change: compare it
        # by identity to know that `own_requirements` answers as before. Read-only; an attribute,
        # not a property, because adapters read it on every call.
        self.registration: object = self._tools
        self._custom = tuple(resolvers)
        self._live = live if live is not None else LiveSources()  # its memory quotas outlive reloads
        self._entry_points = entry_points
        self._strict = strict
        self._own_authenticator = authenticator is None
        self._lock = threading.Lock()  # guards the swap of (_state, _tools); never held to compile
        # The tools the host actually has, once it says (`know_tools`): policy names are checked
        # against them at every reload.
        self._host_tools: tuple[str, ...] | None = None
        # `labels` (replica, upstream) go into every decision record.
        self.recorder = (recorder if recorder is not None
                         else build_recorder(source, labels, tool_labels))
        # The snapshot and the authenticator built from the same policy travel together: a decision
        # reads the pair once, so it never verifies under one policy and decides under another.
        self._state = _state(self._compile(source, self._tools),
                                     authenticator or build_authenticator(source))
        self.snapshot = self._state[0]

    def _compile(self, source: PolicySource, tools: Mapping[str, Any],
                 previous: Snapshot | None = None) -> Snapshot:
        return Snapshot(source, tools, custom=self._custom, live=self._live,
                        entry_points=self._entry_points, strict=self._strict, previous=previous)

    # -- decisions -------------------------------------------------------------------------------
    async def authenticate(self, credentials: Credentials,
                           authenticator: Authenticator | None = None) -> Identity:
        """The caller's identity; a failing authenticator yields an `error` identity (fail closed)."""
        try:
            identity = await (authenticator or self._state[1]).authenticate(credentials)
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            return CANCELLED
        except Exception as exc:
            return failed_identity(exc)
        return identity if isinstance(identity, Identity) else not_an_identity(identity)

    @property
    def live(self) -> LiveSources:
        """The live sources this guard's snapshots share (their memory stores, and the metric
        callbacks an owner that counts them sets)."""
        return self._live

    async def check(self, tool: str, credentials: Credentials = ANONYMOUS,
                    arguments: Mapping[str, Any] | None = None, *, record: bool = True,
                    sidecar: Sidecar | None = None, echo: object = None) -> Decision:
        """Decide one call. The handler may run only if `decision.allowed`. `sidecar`: what the
        call carries beside its decision (late.py: what its late stages hold for it), for the
        adapter that runs or forwards it. `echo`: the context ID the request echoed
        (`envelope.echo_of`): recorded when well formed; it grants nothing."""
        decided = self.check_now(tool, credentials, arguments, record=record, sidecar=sidecar,
                                 echo=echo)
        return decided if isinstance(decided, Decision) else await decided

    def check_now(self, tool: str, credentials: Credentials = ANONYMOUS,
                  arguments: Mapping[str, Any] | None = None, *, record: bool = True,
                  sidecar: Sidecar | None = None, echo: object = None) -> Decision | Pending:
        """`check`, answered at once when no lookup needs awaiting (a cached or host-verified caller,
        synchronous resolvers): the Decision, else a coroutine to await for it. For adapters on the
        hot path of every call; `await guard.check(...)` is the same decision."""
        if echo is not None:  # a retry: decided afresh like any call, its record names the echo
            return self._echoed(self.check_now(tool, credentials, arguments, record=False,
                                               sidecar=sidecar), echo, record)
        snap, authenticator, now = state = self._state
        if sidecar is not None:
            sidecar.token = credentials.token  # what a late stage presents (a token exchange)
        compiled = snap.tools.get(tool)
        start = perf_counter_ns()
        if compiled is None or not compiled.dynamic:
            return self._static_now(tool, snap, compiled, credentials, authenticator, now, start,
                                    record)
        return self._dynamic_now(state, compiled, credentials, arguments, start, record, sidecar,
                                 False)  # type: ignore[return-value]

    def allow_now(self, tool: str, credentials: Credentials, arguments: Mapping[str, Any] | None,
                  spans: bool = True) -> Decision | Pending | Literal[True]:
        """`check_now` (no sidecar, no echo) for an adapter that only runs an allowed call: True
        when it is allowed at once and its record would go nowhere (`quiet_now`; `spans=False`: the
        adapter saw that no span records): no Decision built for nobody to read (most of the guard's
        cost in an in-process call, bench_mcp). Else `check_now`'s answer, recorded."""
        compiled = (state := self._state)[0].tools.get(tool)
        if compiled is None or not compiled.dynamic:
            return self.check_now(tool, credentials, arguments)
        return self._dynamic_now(state, compiled, credentials, arguments, perf_counter_ns(), True,
                                 None, quiet_now(self.recorder, spans))

    def _dynamic_now(self, state: _State, compiled: CompiledTool, credentials: Credentials,
                     arguments: Mapping[str, Any] | None, start: int, record: bool,
                     sidecar: Sidecar | None, quiet: bool) -> Decision | Pending | Literal[True]:
        """`check_now` of a call whose outcomes depend on its caller or arguments; `quiet`: an
        allowed call answered at once is True, no Decision built (`allow_now`)."""
        snap, authenticator, now = state
        try:  # the authenticator's synchronous answer (host-verified, anonymous, cached caller)
            identity = now(credentials) if now is not None else None
        except Exception as exc:  # a failing fast path is an `error` identity (fail closed)
            identity = failed_identity(exc)
        if identity is None:  # it must be awaited
            return self._authenticate_then_evaluate(snap, compiled, credentials, authenticator,
                                                    arguments, start, record, sidecar)
        if identity.__class__ is not Identity and not isinstance(identity, Identity):
            identity = not_an_identity(identity)  # a lying fast path too
        # `_evaluate`, inline (0.2 µs of a call, bench_mcp), and its first step for a caller the memo
        # knows by a listed string of the one argument read (`Snapshot.evaluate`; 0.3 µs more).
        reads, principal = compiled.reads, identity.principal
        decided: Ruling | Awaitable[Ruling] | None = None
        if reads is not None and principal is not None and arguments.__class__ is dict:
            value = arguments.get(reads.argument)
            if value.__class__ is str and value in reads.listed:
                entry = snap.memo.entries.get((compiled.name, id(principal), value))
                if entry is not None and entry[0] is principal:
                    decided = entry[1]
        if decided is None:
            decided = snap.evaluate(compiled, identity, arguments, sidecar)
        if decided.__class__ is not tuple:
            return self._finish_later(compiled, identity, decided, snap, start,  # type: ignore[arg-type]
                                      record, sidecar)
        allowed, outcomes = decided
        if quiet and allowed:
            return True
        if sidecar is not None:
            return self._finish(compiled, identity, decided, snap, start, record, sidecar)
        # `_finish` without a sidecar, inline: a hosted call's path (0.1 µs of one, bench_mcp).
        decision = new_decision(compiled.name, allowed, outcomes,
                                principal.subject if principal is not None else None,
                                snap.revision, perf_counter_ns() - start, snap.confidential, None,
                                None, None if allowed else _context_id(compiled, outcomes))
        if record:
            self.recorder.record(decision)
        return decision

    def _static_now(self, tool: str, snap: Snapshot, compiled: CompiledTool | None,
                    credentials: Credentials, authenticator: Authenticator,
                    now: AuthenticateNow | None, start: int, record: bool
                    ) -> Decision | Coroutine[Any, Any, Decision]:
        """`check_now` of a call no outcome of which depends on the caller (no requirements, or
        only static ones): its caller named all the same (SPEC §3), known at once or its token
        verified first."""
        principal = credentials.principal
        if compiled is None and principal is not None:  # named by the host: no Identity to build
            return self._unguarded(tool, snap, principal.subject, record, start)
        identity = named_now(now, credentials)
        if identity is None:
            return self._named_then_decided(tool, snap, compiled, credentials, authenticator,
                                            start, record)
        if compiled is None:
            return self._unguarded(tool, snap, identity.subject, record, start)
        return self._evaluate(snap, compiled, identity, None, start, record)

    async def _named_then_decided(self, tool: str, snap: Snapshot, compiled: CompiledTool | None,
                                  credentials: Credentials, authenticator: Authenticator,
                                  start: int, record: bool) -> Decision:
        """A call no caller can change, after verifying a token no cache knows yet to name its
        caller (the answer is cached for the next call). Decided the same whatever the answer."""
        identity = await self.authenticate(credentials, authenticator)
        if compiled is None:
            return self._unguarded(tool, snap, identity.subject, record, start)
        decided = self._evaluate(snap, compiled, identity, None, start, record)
        return decided if isinstance(decided, Decision) else await decided

    async def refuse(self, tool: str, credentials: Credentials, refusal: Refusal,
                     detail: str = "", *, record: bool = True, echo: object = None) -> Decision:
        """Refuse a call without evaluating it (a name nobody lists, or listed twice; a tool whose
        own requirements cannot be read or enforced; a policy unusable for the server's tools), and
        record it like every decision: its caller named as `check` names it, the policy revision in
        force, the time taken. `detail` (for the record only, never the caller) says why."""
        start = perf_counter_ns()
        snap, authenticator, now = self._state
        identity = named_now(now, credentials)
        if identity is None:
            identity = await self.authenticate(credentials, authenticator)
        why = detail or refusal.said
        outcomes = ((Outcome.unsatisfied(MALFORMED_REQUIREMENTS, why),)
                    if refusal.kind is Refused.MALFORMED
                    else (Outcome.error(POLICY_UNUSABLE, why),) if refusal.kind is Refused.UNUSABLE
                    else ())
        decision = new_decision(tool, False, outcomes, identity.subject, snap.revision,
                                perf_counter_ns() - start, snap.confidential, refusal,
                                context_id=None if refusal.kind is Refused.UNUSABLE
                                else new_context_id(), echoed=echoed(echo))
        if record:
            self.recorder.record(decision)
        return decision

    async def _authenticate_then_evaluate(self, snap: Snapshot, compiled: CompiledTool,
                                          credentials: Credentials, authenticator: Authenticator,
                                          arguments: Mapping[str, Any] | None, start: int,
                                          record: bool, sidecar: Sidecar | None) -> Decision:
        identity = await self.authenticate(credentials, authenticator)
        decided = self._evaluate(snap, compiled, identity, arguments, start, record, sidecar)
        return decided if isinstance(decided, Decision) else await decided

    async def check_identity(self, tool: str, identity: Identity,
                             arguments: Mapping[str, Any] | None = None, *,
                             record: bool = True) -> Decision:
        """Decide one call for an identity that is already established."""
        snap = self._state[0]
        compiled = snap.tools.get(tool)
        if compiled is None:
            return self._unguarded(tool, snap, identity.subject, record, perf_counter_ns())
        decided = self._evaluate(snap, compiled, identity, arguments, perf_counter_ns(), record)
        return decided if isinstance(decided, Decision) else await decided

    def decide(self, tool: str, identity: Identity, arguments: Mapping[str, Any] | None = None, *,
               record: bool = True) -> Decision:
        """Synchronous decision for when no event loop runs (CLI, benchmarks); async lookups are run
        on a private event loop."""
        snap = self._state[0]
        compiled = snap.tools.get(tool)
        if compiled is None:
            return self._unguarded(tool, snap, identity.subject, record, perf_counter_ns())
        decided = self._evaluate(snap, compiled, identity, arguments, perf_counter_ns(), record)
        return decided if isinstance(decided, Decision) else asyncio.run(decided)

    async def callable_tools(self, credentials: Credentials, tools: Iterable[str] | None = None
                             ) -> list[str]:
        """Which of `tools` (default: every known tool) this caller may call now, in order. A tool
        denied only by argument conditions counts as callable: some arguments may be allowed, and
        each call is still decided on its own. Quotas count as callable without asking their store
        (a quota refills, and its outcome is never learned): listing takes no unit and costs no
        store round trip."""
        snap, authenticator, _ = self._state
        names = list(tools) if tools is not None else list(dict.fromkeys([*self._tools, *snap.tools]))
        identity = await self.authenticate(credentials, authenticator)
        callable_names = []
        for name in names:  # one snapshot for the whole answer, never a mix
            compiled = snap.tools.get(name)
            decided: Ruling | Awaitable[Ruling] = (True, ())
            if compiled is not None:
                decided = snap.evaluate(compiled if compiled.late is None
                                        else compiled.late.rest, identity, None)
            _, outcomes = decided if isinstance(decided, tuple) else await decided
            if all(o.ok or ((o.argument_dependent or o.transient) and o.status is Status.UNSATISFIED)
                   for o in outcomes):
                callable_names.append(name)
        return await listed(snap, identity, callable_names)

    # -- internals -------------------------------------------------------------------------------
    def _evaluate(self, snap: Snapshot, compiled: CompiledTool, identity: Identity,
                  arguments: Mapping[str, Any] | None, start: int, record: bool,
                  sidecar: Sidecar | None = None) -> Decision | Coroutine[Any, Any, Decision]:
        """The one path from a call to its Decision: made at once when every lookup answered
        synchronously, else a coroutine that awaits them (concurrently) first."""
        decided = snap.evaluate(compiled, identity, arguments, sidecar)
        if decided.__class__ is tuple:
            return self._finish(compiled, identity, decided, snap, start, record, sidecar)
        return self._finish_later(compiled, identity, decided, snap, start, record,  # type: ignore[arg-type]
                                  sidecar)

    async def _finish_later(self, compiled: CompiledTool, identity: Identity,
                            pending: Awaitable[Ruling], snap: Snapshot, start: int,
                            record: bool, sidecar: Sidecar | None) -> Decision:
        return self._finish(compiled, identity, await pending, snap, start, record, sidecar)

    def _finish(self, compiled: CompiledTool, identity: Identity, ruling: Ruling,
                snap: Snapshot, start: int, record: bool, sidecar: Sidecar | None = None
                ) -> Decision:
        """The one place a Decision is made, from the snapshot's ruling on a call (and what its
        late stages noted for the record, in the sidecar)."""
        allowed, outcomes = ruling
        principal = identity.principal
        decision = new_decision(compiled.name, allowed, outcomes,
                                principal.subject if principal is not None else None,
                                snap.revision, perf_counter_ns() - start, snap.confidential, None,
                                dict(sidecar.notes) if sidecar is not None and sidecar.notes else None,
                                None if allowed else _context_id(compiled, outcomes))
        if record:
            self.recorder.record(decision)
        if sidecar is not None and sidecar.told and not (allowed and sidecar.reports):
            sidecar.finish(allowed, allowed)  # (a refused call never runs; see late.py `Sidecar`)
        return decision

    async def _echoed(self, decided: Decision | Awaitable[Decision], echo: object,
                      record: bool) -> Decision:
        decision = dataclasses.replace(
            decided if isinstance(decided, Decision) else await decided, echoed=echoed(echo))
        if record:
            self.recorder.record(decision)
        return decision

    def overrule(self, decision: Decision, outcome: Outcome) -> Decision:
        """An allowed call that did not run after all: its server refused what a late stage sent it
        as (`late.Outbound`), and renewing it failed (SPEC §14). The same decision with `outcome` in
        place of that requirement's, denied, recorded like every decision."""
        start = perf_counter_ns()
        outcomes = tuple(outcome if o.requirement == outcome.requirement else o
                         for o in decision.outcomes)
        overruled = new_decision(decision.tool, False, outcomes, decision.subject, decision.revision,
                                 decision.duration_ns + perf_counter_ns() - start,
                                 decision.confidential, None, decision.notes, new_context_id(),
                                 decision.echoed)
        self.recorder.record(overruled)
        return overruled

    def _unguarded(self, tool: str, snap: Snapshot, subject: str | None, record: bool,
                   start: int) -> Decision:
        """A tool with no requirements anywhere: allowed (the guard enforces declared requirements;
        it is not a tool registry), recorded with its caller's subject when known."""
        decision = new_decision(tool, True, (), subject, snap.revision, perf_counter_ns() - start,
                                _NOTHING)
        if record:
            self.recorder.record(decision)
        return decision


def _context_id(compiled: CompiledTool, outcomes: tuple[Outcome, ...]) -> str | None:
    """A denial's context ID: none for one that only quotas refused (no envelope, SPEC §15)."""
    return new_context_id() if compiled.late is None else context_id_for(outcomes)
