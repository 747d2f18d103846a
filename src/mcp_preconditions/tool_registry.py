"""What a Guard knows besides deciding (guard.py): the tools it guards and their requirements, the
policy in force, and the changes to either (a tool registered, a listing applied, a reload), each
compiled outside the lock and swapped in atomically; and which of its tools a late resolver hides
from a caller's listing (`listed`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .auth import Authenticator, build_authenticator
from .auth.base import AuthenticateNow, authenticate_now_of
from .errors import PolicyError
from .names import host_problems
from .policy.load import PolicySource
from .principal import Identity
from .requirements import Finding
from .snapshot import Snapshot

# A snapshot, the authenticator built from the same policy, and its synchronous fast path.
_State = tuple[Snapshot, Authenticator, AuthenticateNow | None]


def _state(snapshot: Snapshot, authenticator: Authenticator) -> _State:
    return snapshot, authenticator, authenticate_now_of(authenticator)


class ToolRegistry:
    """The tools and the policy of a Guard, which sets these attributes in its `__init__`."""

    _state: _State
    # The policy snapshot in force (`_state[0]`), swapped with it. Read-only; an attribute, not a
    # property, because adapters read it on every call (as `registration`).
    snapshot: Snapshot
    _tools: dict[str, Any]
    _lock: threading.Lock
    _host_tools: tuple[str, ...] | None
    _own_authenticator: bool
    registration: object

    def _compile(self, source: PolicySource, tools: Mapping[str, Any],
                 previous: Snapshot | None = None) -> Snapshot:
        raise NotImplementedError

    # -- introspection ---------------------------------------------------------------------------
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
                    self.snapshot = new_state[0]
                    self.registration = new_tools
                    return


async def listed(snap: Snapshot, identity: Identity, names: list[str]) -> list[str]:
    """`names` less the tools a late resolver that decides listings too hides from this caller (a
    `pdp:` decision point, SPEC §16: asked once per resolver for every tool, by its `hidden`)."""
    asked: dict[int, tuple[Any, dict[str, list[str]]]] = {}
    for name in names:
        compiled = snap.tools.get(name)
        if compiled is None or compiled.late is None:
            continue
        for check in compiled.checks:
            if callable(getattr(check.resolver, "hidden", None)):
                asked.setdefault(id(check.resolver), (check.resolver, {}))[1].setdefault(
                    name, []).append(check.requirement)
    if not asked:
        return names
    hidden: set[str] = set()
    for resolver, tools in asked.values():
        try:
            hidden |= await resolver.hidden(identity, tools)
        except Exception:  # a resolver that fails hides what it was asked about (fail closed)
            hidden |= set(tools)
    return [n for n in names if n not in hidden]
