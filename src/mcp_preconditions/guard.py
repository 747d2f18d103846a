"""The server-side guard: compile tools against a policy once, then decide, enforce and record calls.

`Guard.check()` is the one entry point adapters call before a tool's handler. A tool with no
requirements costs a dictionary lookup. Each decision reads one Snapshot, never a mix: a reload
compiles a new Snapshot and swaps the reference atomically.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from time import perf_counter_ns
from typing import Any

from .auth import Authenticator, build_authenticator
from .auth.base import AuthenticateNow, authenticate_now_of
from .compiled import CompiledTool, being_cancelled
from .decision_sinks import build_recorder
from .decisions import DecisionRecorder, ToolLabels
from .errors import PolicyError
from .names import host_problems
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
from .principal import ANONYMOUS, Credentials, Identity, verified_identity
from .requirements import Finding
from .resolvers import LiveSources, Resolver
from .snapshot import Snapshot

_NO_IDENTITY = Identity(failure="not needed")
_NOTHING: frozenset[str] = frozenset()  # a tool without requirements has nothing confidential
# A snapshot, the authenticator built from the same policy, and its synchronous fast path.
_State = tuple[Snapshot, Authenticator, AuthenticateNow | None]
EMPTY_POLICY = parse_policy(b"", "(empty policy)")


class Guard:
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
        self._state: _State = _state(self._compile(source, self._tools),
                                     authenticator or build_authenticator(source))

    def _compile(self, source: PolicySource, tools: Mapping[str, Any],
                 previous: Snapshot | None = None) -> Snapshot:
        return Snapshot(source, tools, custom=self._custom, live=self._live,
                        entry_points=self._entry_points, strict=self._strict, previous=previous)

    # -- introspection ---------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        return self._state[0]

    @property
    def authenticator(self) -> Authenticator:
        return self._state[1]

    @property
    def revision(self) -> str:
        return self._state[0].revision

    @property
    def findings(self) -> list[Finding]:
        """Validation errors (non-strict guards only) and lint warnings of the current snapshot."""
        return list(self._state[0].findings)

    def requirements_for(self, tool: str) -> tuple[str, ...]:
        """The effective requirement list of a tool (code ∪ policy): what a call enforces."""
        compiled = self._state[0].tools.get(tool)
        return compiled.requirements if compiled else ()

    def advertised_for(self, tool: str) -> tuple[str, ...]:
        """What `tools/list` shows for a tool: `requirements_for` less the snapshot's confidential
        requirements (SPEC §3: a subset of what is enforced, never naming a confidential one).
        Computed once per snapshot."""
        compiled = self._state[0].tools.get(tool)
        return compiled.advertised if compiled else ()

    def own_requirements(self, tool: str) -> tuple[str, ...]:
        """The requirements a tool declared in code (without the policy's), as registered."""
        raw = self._tools.get(tool)
        return tuple(r for r in raw if isinstance(r, str)) if isinstance(raw, list | tuple) else ()

    def tool_names(self) -> list[str]:
        return list(self._tools)

    # -- changes ---------------------------------------------------------------------------------
    def add_tool(self, name: str, requirements: Sequence[str] | None = None) -> None:
        """Register (or replace) a tool's own requirements; validates them now."""
        self.update_tools({name: requirements or []})

    def update_tools(self, changes: Mapping[str, Sequence[str] | None]) -> None:
        """Register, replace (a list) or forget (None) many tools' own requirements in one swap:
        only the changed tools are compiled (a gateway applies a whole upstream listing this
        way). Validates them now; RequirementError leaves everything as it was."""
        def make(state: _State, tools: dict[str, Any]) -> tuple[_State, dict[str, Any]]:
            new_tools = dict(tools)
            for name, reqs in changes.items():
                if reqs is None:
                    new_tools.pop(name, None)
                else:
                    new_tools[name] = list(reqs)
            snapshot = self._compile(state[0].source, new_tools, previous=state[0])
            return _state(snapshot, state[1]), new_tools
        self._swap(make)

    def know_tools(self, names: Iterable[str]) -> None:
        """`tools_known`, raising PolicyError for the policy in force when it has a near miss (what
        `serve` and `lint` run before serving, to refuse to start)."""
        problems = self.tools_known(names)
        if problems:
            raise PolicyError(self._state[0].source.source, list(problems))

    def tools_known(self, names: Iterable[str]) -> tuple[str, ...]:
        """Tell the guard the host's tools (a hosted server's). From now on a reload to a policy
        whose `[tools.NAME]` nearly matches one (names.py) is refused with PolicyError naming both.
        Returns the near misses of the policy in force, one line each: the host refuses its calls
        meanwhile (SPEC §10). Decisions stay exact: this is a diagnostic."""
        self._host_tools = tuple(dict.fromkeys(names))
        return self._name_problems(self._state[0].source)

    def _name_problems(self, source: PolicySource) -> tuple[str, ...]:
        host = self._host_tools
        return host_problems(source.source, source.policy.tools, host) if host is not None else ()

    def reload(self, source: PolicySource) -> None:
        """Compile `source` and swap it in atomically. On any error the old snapshot stays."""
        problems = self._name_problems(source)
        if problems:
            raise PolicyError(source.source, list(problems))

        def make(state: _State, tools: dict[str, Any]) -> tuple[_State, dict[str, Any]]:
            authenticator = build_authenticator(source) if self._own_authenticator else state[1]
            return _state(self._compile(source, tools), authenticator), tools
        self._swap(make)

    def _swap(self, make: Callable[[_State, dict[str, Any]], tuple[_State, dict[str, Any]]]) -> None:
        """Compile outside the lock (it may take a while; the event loop must not wait on it), then
        swap only if nothing changed meanwhile, else compile again: a reload never drops a tool
        added concurrently, and an added tool never reverts a reload."""
        while True:
            state, tools = self._state, self._tools
            new_state, new_tools = make(state, tools)
            with self._lock:
                if self._state is state and self._tools is tools:
                    self._state, self._tools = new_state, new_tools
                    self.registration = new_tools
                    return

    # -- decisions -------------------------------------------------------------------------------
    async def authenticate(self, credentials: Credentials,
                           authenticator: Authenticator | None = None) -> Identity:
        """The caller's identity; a failing authenticator yields an `error` identity (fail closed)."""
        try:
            identity = await (authenticator or self._state[1]).authenticate(credentials)
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            return _CANCELLED
        except Exception as exc:
            return _auth_failed(exc)
        return identity if isinstance(identity, Identity) else _not_identity(identity)

    async def check(self, tool: str, credentials: Credentials = ANONYMOUS,
                    arguments: Mapping[str, Any] | None = None, *, record: bool = True) -> Decision:
        """Decide one call. The handler may run only if `decision.allowed`."""
        decided = self.check_now(tool, credentials, arguments, record=record)
        return decided if isinstance(decided, Decision) else await decided

    def check_now(self, tool: str, credentials: Credentials = ANONYMOUS,
                  arguments: Mapping[str, Any] | None = None, *, record: bool = True
                  ) -> Decision | Coroutine[Any, Any, Decision]:
        """`check`, answered at once when no lookup needs awaiting (a cached or host-verified caller,
        synchronous resolvers): the Decision, else a coroutine to await for it. For adapters on the
        hot path of every call; `await guard.check(...)` is the same decision."""
        snap, authenticator, now = self._state
        compiled = snap.tools.get(tool)
        start = perf_counter_ns()
        identity: Identity | None
        if compiled is None or not compiled.dynamic:
            # No outcome depends on the caller (no requirements, or only static ones), but the
            # caller is named all the same (SPEC §3): known at once, or its token verified first.
            identity = _named_now(now, credentials)
            if identity is None:
                return self._named_then_decided(tool, snap, compiled, credentials, authenticator,
                                                start, record)
            if compiled is None:
                return self._unguarded(tool, snap, identity.subject, record, start)
            return self._evaluate(snap, compiled, identity, None, start, record)
        # The authenticator's synchronous answer (host-verified, anonymous, cached caller).
        try:
            identity = now(credentials) if now is not None else None
        except Exception as exc:  # a failing fast path is an `error` identity (fail closed)
            identity = _auth_failed(exc)
        if identity is None:  # it must be awaited
            return self._authenticate_then_evaluate(snap, compiled, credentials, authenticator,
                                                    arguments, start, record)
        if identity.__class__ is not Identity and not isinstance(identity, Identity):
            identity = _not_identity(identity)  # a lying fast path too
        # `_evaluate`, inline: the path of every dynamic call (0.2 µs of one, bench_mcp).
        decided = snap.evaluate(compiled, identity, arguments)
        if decided.__class__ is tuple:
            return self._finish(compiled, identity, decided, snap, start, record)
        return self._finish_later(compiled, identity, decided, snap, start, record)  # type: ignore[arg-type]

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
                     detail: str = "", *, record: bool = True) -> Decision:
        """Refuse a call without evaluating it (a name nobody lists, or listed twice; a tool whose
        own requirements cannot be read or enforced; a policy unusable for the server's tools), and
        record it like every decision: its caller named as `check` names it, the policy revision in
        force, the time taken. `detail` (for the record only, never the caller) says why."""
        start = perf_counter_ns()
        snap, authenticator, now = self._state
        identity = _named_now(now, credentials)
        if identity is None:
            identity = await self.authenticate(credentials, authenticator)
        why = detail or refusal.said
        outcomes = ((Outcome.unsatisfied(MALFORMED_REQUIREMENTS, why),)
                    if refusal.kind is Refused.MALFORMED
                    else (Outcome.error(POLICY_UNUSABLE, why),) if refusal.kind is Refused.UNUSABLE
                    else ())
        decision = new_decision(tool, False, outcomes, identity.subject, snap.revision,
                                perf_counter_ns() - start, snap.confidential, refusal)
        if record:
            self.recorder.record(decision)
        return decision

    async def _authenticate_then_evaluate(self, snap: Snapshot, compiled: CompiledTool,
                                          credentials: Credentials, authenticator: Authenticator,
                                          arguments: Mapping[str, Any] | None, start: int,
                                          record: bool) -> Decision:
        identity = await self.authenticate(credentials, authenticator)
        decided = self._evaluate(snap, compiled, identity, arguments, start, record)
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
                decided = snap.evaluate(compiled if compiled.metered is None
                                        else compiled.metered.rest, identity, None)
            _, outcomes = decided if isinstance(decided, tuple) else await decided
            if all(o.ok or ((o.argument_dependent or o.transient) and o.status is Status.UNSATISFIED)
                   for o in outcomes):
                callable_names.append(name)
        return callable_names

    # -- internals -------------------------------------------------------------------------------
    def _evaluate(self, snap: Snapshot, compiled: CompiledTool, identity: Identity,
                  arguments: Mapping[str, Any] | None, start: int, record: bool
                  ) -> Decision | Coroutine[Any, Any, Decision]:
        """The one path from a call to its Decision: made at once when every lookup answered
        synchronously, else a coroutine that awaits them (concurrently) first."""
        decided = snap.evaluate(compiled, identity, arguments)
        if decided.__class__ is tuple:
            return self._finish(compiled, identity, decided, snap, start, record)
        return self._finish_later(compiled, identity, decided, snap, start, record)  # type: ignore[arg-type]

    async def _finish_later(self, compiled: CompiledTool, identity: Identity,
                            pending: Awaitable[Ruling], snap: Snapshot, start: int,
                            record: bool) -> Decision:
        return self._finish(compiled, identity, await pending, snap, start, record)

    def _finish(self, compiled: CompiledTool, identity: Identity, ruling: Ruling,
                snap: Snapshot, start: int, record: bool) -> Decision:
        """The one place a Decision is made, from the snapshot's ruling on a call."""
        allowed, outcomes = ruling
        principal = identity.principal
        decision = new_decision(compiled.name, allowed, outcomes,
                                principal.subject if principal is not None else None,
                                snap.revision, perf_counter_ns() - start, snap.confidential)
        if record:
            self.recorder.record(decision)
        return decision

    def _unguarded(self, tool: str, snap: Snapshot, subject: str | None, record: bool,
                   start: int) -> Decision:
        """A tool with no requirements anywhere: allowed (the guard enforces declared requirements;
        it is not a tool registry), recorded with its caller's subject when known."""
        decision = new_decision(tool, True, (), subject, snap.revision, perf_counter_ns() - start,
                                _NOTHING)
        if record:
            self.recorder.record(decision)
        return decision


_CANCELLED = Identity(failure="authentication failed: the authenticator was cancelled", error=True)


def _named_now(now: AuthenticateNow | None, credentials: Credentials) -> Identity | None:
    """Who is calling, to name the caller of a call that its identity does not decide: a principal
    the host verified, nobody (no token), or the authenticator's synchronous answer for a token (a
    cached one). None: the token must be verified (awaited) to know."""
    principal = credentials.principal
    if principal is not None:
        return verified_identity(principal)
    if credentials.token is None or now is None:
        return _NO_IDENTITY if credentials.token is None else None
    try:
        identity = now(credentials)
    except Exception:  # fail closed does not apply (nothing is decided by it): the caller is unknown
        return _NO_IDENTITY
    return identity if identity is None or isinstance(identity, Identity) else _NO_IDENTITY


def _auth_failed(exc: Exception) -> Identity:
    return Identity(failure=f"authentication failed: {type(exc).__name__}", error=True)


def _not_identity(value: object) -> Identity:
    return Identity(failure=f"authentication failed: the authenticator returned "
                            f"{type(value).__name__}, not an Identity", error=True)


def _state(snapshot: Snapshot, authenticator: Authenticator) -> _State:
    return snapshot, authenticator, authenticate_now_of(authenticator)
