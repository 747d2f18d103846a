"""The server-side guard: compile tools against a policy once, then decide, enforce and record calls.

`Guard.check()` is the one entry point adapters call before a tool's handler. A tool with no
requirements costs a dictionary lookup. Each decision reads one Snapshot, never a mix: a reload
compiles a new Snapshot and swaps the reference atomically.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from time import perf_counter_ns
from typing import Any

from .auth import Authenticator, build_authenticator
from .auth.base import AuthenticateNow, authenticate_now_of
from .decision_sinks import build_recorder
from .decisions import DecisionRecorder
from .errors import PolicyError
from .names import check_tool_names, near_miss_message
from .outcomes import Decision, Outcome, new_decision
from .policy.load import PolicySource, parse_policy
from .principal import ANONYMOUS, Credentials, Identity, verified_identity
from .requirements import Finding
from .resolvers import LiveSources, Resolver
from .resolvers.base import CallContext
from .snapshot import CompiledTool, Snapshot, being_cancelled

log = logging.getLogger("mcp_preconditions.policy")
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
                 strict: bool = True, labels: Mapping[str, str] | None = None) -> None:
        source = policy or EMPTY_POLICY
        self._tools: dict[str, Any] = dict(tools or {})
        # A token replaced (a new object) whenever any tool's own requirements change: compare it
        # by identity to know that `own_requirements` answers as before. Read-only; an attribute,
        # not a property, because adapters read it on every call.
        self.registration: object = self._tools
        self._custom = tuple(resolvers)
        self._live = live
        self._entry_points = entry_points
        self._strict = strict
        self._own_authenticator = authenticator is None
        self._lock = threading.Lock()  # guards the swap of (_state, _tools); never held to compile
        # The tools the host actually has, once it says (`know_tools`): policy names are checked
        # against them at every reload.
        self._host_tools: tuple[str, ...] | None = None
        # `labels` (replica, upstream) go into every decision record.
        self.recorder = recorder if recorder is not None else build_recorder(source, labels)
        # The snapshot and the authenticator built from the same policy travel together: a decision
        # reads the pair once, so it never verifies under one policy and decides under another.
        self._state: _State = _state(self._compile(source, self._tools),
                                     authenticator or build_authenticator(source))

    def _compile(self, source: PolicySource, tools: Mapping[str, Any]) -> Snapshot:
        return Snapshot(source, tools, custom=self._custom, live=self._live,
                        entry_points=self._entry_points, strict=self._strict)

    # -- introspection ---------------------------------------------------------------------------
    @property
    def _snapshot(self) -> Snapshot:
        return self._state[0]

    @property
    def snapshot(self) -> Snapshot:
        return self._state[0]

    @property
    def authenticator(self) -> Authenticator:
        return self._state[1]

    @property
    def revision(self) -> str:
        return self._snapshot.revision

    @property
    def findings(self) -> list[Finding]:
        """Validation errors (non-strict guards only) and lint warnings of the current snapshot."""
        return list(self._snapshot.findings)

    def requirements_for(self, tool: str) -> tuple[str, ...]:
        """The effective requirement list of a tool (code ∪ policy): what `tools/list` shows."""
        compiled = self._snapshot.tools.get(tool)
        return compiled.requirements if compiled else ()

    def own_requirements(self, tool: str) -> tuple[str, ...]:
        """The requirements a tool declared in code (without the policy's), as registered."""
        raw = self._tools.get(tool)
        return tuple(r for r in raw if isinstance(r, str)) if isinstance(raw, list | tuple) else ()

    def tool_names(self) -> list[str]:
        return list(self._tools)

    # -- changes ---------------------------------------------------------------------------------
    def add_tool(self, name: str, requirements: Sequence[str] | None = None) -> None:
        """Register (or replace) a tool's own requirements; validates them now."""
        reqs = list(requirements or [])

        def make(state: _State, tools: dict[str, Any]) -> tuple[_State, dict[str, Any]]:
            new_tools = {**tools, name: reqs}
            return _state(self._compile(state[0].source, new_tools), state[1]), new_tools
        self._swap(make)

    def know_tools(self, names: Iterable[str]) -> None:
        """Tell the guard which tools the host actually has (a hosted server's registered tools,
        a gateway's upstream list). From now on, and at every reload, a policy `[tools.NAME]` that
        is a near miss of one of them (case, white space, look-alike letters, normalisation) is
        refused with PolicyError naming both; a name that matches nothing is logged as a warning.
        Decisions stay exact: this is a diagnostic. Raises PolicyError for the policy in force."""
        self._host_tools = tuple(dict.fromkeys(names))
        self._check_names(self._state[0].source)

    def _check_names(self, source: PolicySource) -> None:
        if self._host_tools is None:
            return
        found = check_tool_names(source.policy.tools, self._host_tools)
        if found.near_misses:
            raise PolicyError(source.source, [near_miss_message(p, t) for p, t in found.near_misses])
        for name in found.unmatched:
            log.warning("%s: tools.%s: names no tool of this server", source.source, name)

    def reload(self, source: PolicySource) -> None:
        """Compile `source` and swap it in atomically. On any error the old snapshot stays."""
        self._check_names(source)

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
        snap, authenticator, now = self._state
        compiled = snap.tools.get(tool)
        if compiled is None:
            return self._done(new_decision(tool, True, (), None, snap.revision, 0, _NOTHING), record)
        start = perf_counter_ns()
        if compiled.dynamic:
            # `authenticate`, inlined, and without a coroutine when the answer needs no I/O: this
            # is the adapters' hot path.
            try:
                identity = now(credentials) if now is not None else None
                if identity is None:
                    identity = await authenticator.authenticate(credentials)
            except asyncio.CancelledError:
                if being_cancelled():
                    raise
                identity = _CANCELLED
            except Exception as exc:
                identity = _auth_failed(exc)
            if type(identity) is not Identity and not isinstance(identity, Identity):
                identity = _not_identity(identity)  # a broken authenticator must not crash the call
        elif credentials.principal is not None:  # already verified by the host: free to record who
            identity = verified_identity(credentials.principal)
        else:
            identity = _NO_IDENTITY
        plan = compiled.plan  # the plan first, here: `check_identity` is one coroutine more
        verdict = plan(identity) if plan is not None else None
        if verdict is None:
            return await self.check_identity(tool, identity, arguments, record=record,
                                             _snap=snap, _start=start)
        principal = identity.principal  # `_finish`, inlined
        decision = new_decision(compiled.name, verdict[1], verdict[0],
                                principal.subject if principal is not None else None,
                                snap.revision, perf_counter_ns() - start, snap.confidential)
        if record:
            self.recorder.record(decision)
        return decision

    async def check_identity(self, tool: str, identity: Identity,
                             arguments: Mapping[str, Any] | None = None, *, record: bool = True,
                             _snap: Snapshot | None = None, _start: int | None = None) -> Decision:
        """Decide one call for an identity that is already established."""
        snap = _snap or self._state[0]
        start = _start or perf_counter_ns()
        compiled = snap.tools.get(tool)
        if compiled is None:
            return self._done(new_decision(tool, True, (), None, snap.revision, 0, _NOTHING), record)
        plan = compiled.plan
        verdict = plan(identity) if plan is not None else None
        if verdict is None:
            result = snap.evaluate(compiled, self._context(tool, identity, arguments, snap))
            verdict = _verdict(result if isinstance(result, list) else await result)
        return self._finish(compiled, identity, verdict, snap, start, record)

    def decide(self, tool: str, identity: Identity, arguments: Mapping[str, Any] | None = None, *,
               record: bool = True) -> Decision:
        """Synchronous decision for when no event loop runs (CLI, benchmarks); async lookups are run
        on a private event loop."""
        snap = self._state[0]
        start = perf_counter_ns()
        compiled = snap.tools.get(tool)
        if compiled is None:
            return self._done(new_decision(tool, True, (), None, snap.revision, 0, _NOTHING), record)
        plan = compiled.plan  # set when every check is static or identity-only: no CallContext
        verdict = plan(identity) if plan is not None else None
        if verdict is None:
            result = snap.evaluate(compiled, self._context(tool, identity, arguments, snap))
            verdict = _verdict(result if isinstance(result, list) else asyncio.run(_await(result)))
        principal = identity.principal  # as in check_identity, inlined
        decision = new_decision(compiled.name, verdict[1], verdict[0],
                                principal.subject if principal is not None else None,
                                snap.revision, perf_counter_ns() - start, snap.confidential)
        if record:
            self.recorder.record(decision)
        return decision

    async def callable_tools(self, credentials: Credentials, tools: Iterable[str] | None = None
                             ) -> list[str]:
        """Which of `tools` (default: every known tool) this caller may call now, in order."""
        snap, authenticator, _ = self._state
        names = list(tools) if tools is not None else list(dict.fromkeys([*self._tools, *snap.tools]))
        identity = await self.authenticate(credentials, authenticator)
        decisions = await asyncio.gather(*(self.check_identity(n, identity, record=False, _snap=snap)
                                           for n in names))
        return [d.tool for d in decisions if d.allowed]

    # -- internals -------------------------------------------------------------------------------
    def _context(self, tool: str, identity: Identity, arguments: Mapping[str, Any] | None,
                 snap: Snapshot) -> CallContext:
        return CallContext(tool, identity, arguments or {}, snap.evaluate_one)  # type: ignore[arg-type]

    def _finish(self, compiled: CompiledTool, identity: Identity,
                verdict: tuple[tuple[Outcome, ...], bool], snap: Snapshot, start: int,
                record: bool) -> Decision:
        principal = identity.principal  # not identity.subject: one property call less
        decision = new_decision(compiled.name, verdict[1], verdict[0],
                                principal.subject if principal is not None else None,
                                snap.revision, perf_counter_ns() - start, snap.confidential)
        if record:
            self.recorder.record(decision)
        return decision

    def _done(self, decision: Decision, record: bool) -> Decision:
        if record:
            self.recorder.record(decision)
        return decision


_CANCELLED = Identity(failure="authentication failed: the authenticator was cancelled", error=True)


def _auth_failed(exc: Exception) -> Identity:
    return Identity(failure=f"authentication failed: {type(exc).__name__}", error=True)


def _not_identity(value: object) -> Identity:
    return Identity(failure=f"authentication failed: the authenticator returned "
                            f"{type(value).__name__}, not an Identity", error=True)


def _state(snapshot: Snapshot, authenticator: Authenticator) -> _State:
    return snapshot, authenticator, authenticate_now_of(authenticator)


def _verdict(outcomes: list[Outcome]) -> tuple[tuple[Outcome, ...], bool]:
    """Outcomes and whether they allow the call: only when there are some and all are satisfied."""
    return tuple(outcomes), bool(outcomes) and all(o.ok for o in outcomes)


async def _await(pending: Any) -> Any:
    return await pending
