"""The explorer's decisions, with no HTTP in sight: a policy text as edited on the page, compiled into
the same non-strict `Guard` that `check` builds, with the same problem lines `policy validate`,
`check` and `lint` print, and refused for what a server or the gateway with these tools refuses it
for; and the caller, from claims, as `check --claims` reads them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachetools import LRUCache

from ..diagnostics import finding_line, lint_findings, requirement_problems, start_up_errors
from ..errors import InputError, PolicyError, PreconditionsError
from ..files import claims_of, parse_json
from ..guard import Guard
from ..namespaces import LiveSources
from ..offline import OfflineCredentials
from ..outcomes import Decision
from ..policy import PolicySource, parse_policy
from ..principal import ANONYMOUS, ANONYMOUS_IDENTITY, Credentials, Identity, Principal
from ..resolvers import Resolver, fresh_quota_store
from ..wire import raw_requirements
from .reach import new_reaches

# The page's what-if values: `state:KEY` or `feature:KEY` -> the value it takes instead.
Overrides = Mapping[str, bool]
OVERRIDABLE = ("state:", "feature:")
_Key = tuple[str, tuple[tuple[str, bool], ...]]  # a policy text and the what-if values
COMPILED_TEXT = 8 * 1024 * 1024  # characters of policy text kept compiled, at most
COMPILED_KEPT = 16  # compiled texts kept, at most


@dataclass(frozen=True)
class Inputs:
    """What `explore` was started with, read once (decision logs are read again at each request)."""

    policy_path: str
    policy_text: str  # the file as read: edits on the page are compared with it
    tools: list[dict[str, Any]]
    tools_label: str  # where the tools came from: a file name, or a server
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)  # caller name -> claims
    knowledge: dict[str, Any] = field(default_factory=dict)  # name -> a knowledge file's contents
    logs: tuple[str, ...] = ()
    resolvers: tuple[Resolver, ...] = ()
    # The servers with credentials by key, with their kind (a gateway config's); None: any
    # `credential:KEY` a tool carries (offline.py: decided per call, at the gateway).
    credentials: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Compiled:
    """A policy text compiled for the tools: the guard, or the problems that stop it (what a
    server or the gateway would refuse to run with, in the lines the command line prints, by file
    and key path), and the warnings either way."""

    source: PolicySource | None  # as written, before the page's what-if values
    guard: Guard | None
    problems: list[str]
    warnings: list[str]


@dataclass(frozen=True)
class Caller:
    """Who is calling, and a line saying so."""

    identity: Identity
    label: str

    @property
    def credentials(self) -> Credentials:
        principal = self.identity.principal
        return ANONYMOUS if principal is None else Credentials(principal=principal)


class _NotRecorded:
    """The explorer only looks: no decision of its own goes into a decision log."""

    def record(self, decision: Decision) -> None:
        return None


class Workbench:
    """Compiles policy texts for the explorer's tools (the last few kept) and decides calls."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.names = [str(t["name"]) for t in inputs.tools]
        self._own = {t["name"]: raw_requirements(t) for t in inputs.tools}
        self._base_dir = Path(inputs.policy_path).parent
        self._read = self._parse(inputs.policy_text)  # what the file reaches, an edit may reach
        # The last texts compiled (the page asks again as the user types), by size: a text counts
        # its length, at least 1/16 of the bound, so at most 16 are kept and a few huge ones fill it.
        # Shared by the worker threads that compile; the lock is never held to compile.
        self._compiled: LRUCache[_Key, tuple[int, Compiled]] = LRUCache(
            maxsize=COMPILED_TEXT, getsizeof=lambda entry: entry[0])
        self._lock = threading.Lock()

    def compile(self, text: str, overrides: Overrides | None = None) -> Compiled:
        """The text compiled (blocking: it builds a Guard; the app calls it in a worker thread)."""
        key = (text, tuple(sorted((overrides or {}).items())))
        with self._lock:
            entry = self._compiled.get(key)
        if entry is not None:
            return entry[1]
        compiled = self._compile(text, key[1])
        size = max(len(text), COMPILED_TEXT // COMPILED_KEPT)
        if size <= COMPILED_TEXT:  # a text larger than the bound is compiled each time
            with self._lock:
                self._compiled[key] = (size, compiled)
        return compiled

    def _parse(self, text: str) -> PolicySource | PolicyError:
        where = self.inputs.policy_path
        try:
            return parse_policy(text.encode("utf-8"), where, self._base_dir)
        except UnicodeEncodeError:  # a lone surrogate typed or pasted into the editor
            return PolicyError(where, ["(file): not Unicode text (a lone surrogate)"])
        except PolicyError as exc:
            return exc

    def _compile(self, text: str, overrides: Sequence[tuple[str, bool]]) -> Compiled:
        where = self.inputs.policy_path
        source = self._parse(text)
        if isinstance(source, PolicyError):
            return Compiled(None, None, source.lines(), [])
        # Before anything is built from it: building imports its callables, reads its files.
        read = self._read.policy if isinstance(self._read, PolicySource) else None
        reaching = new_reaches(source.policy, read)
        if reaching:
            return Compiled(source, None, [f"{where}: {line}" for line in reaching], [])
        try:
            # Quotas as `check` counts them: a fresh store, nothing kept, never a live Redis.
            guard = Guard(with_overrides(source, overrides), self._own, strict=False,
                          resolvers=(*self.inputs.resolvers, OfflineCredentials(self.inputs.credentials)),
                          recorder=_NotRecorded(), live=LiveSources(quotas=fresh_quota_store()))
        except PreconditionsError as exc:  # e.g. an [auth] key file that cannot be read
            return Compiled(source, None, exc.lines(), [])
        errors, warned = requirement_problems(source, guard.snapshot.registry)
        problems = ([f"{where}: {e}" for e in errors] or start_up_errors(guard, self.inputs.tools_label)
                    or refused_names(guard, self.names))
        # `lint`'s findings; its errors too, unless they are the problems already listed (a near
        # miss of a tool name is both).
        findings = lint_findings(self.inputs.tools, self.inputs.tools_label, source, guard=guard)
        warnings = [f"{where}: {w}" for w in warned] + [
            finding_line(f) for f in findings if not (problems and f.severity == "error")]
        return Compiled(source, None if problems else guard, problems, warnings)

    async def decide(self, guard: Guard, caller: Caller, names: Sequence[str] | None = None,
                     arguments: Mapping[str, Any] | None = None) -> list[Decision]:
        """The guard's decision for each tool (default: all, in the tools' order), as `check`."""
        return [await guard.check_identity(name, caller.identity, arguments, record=False)
                for name in (self.names if names is None else names)]

    def caller(self, preset: str | None, claims: str | None) -> Caller:
        """The caller from claims typed on the page, else a preset, else anonymous."""
        if claims is not None and claims.strip():
            principal = Principal.from_claims(claims_of(parse_json(claims, "claims"), "claims"))
            return Caller(Identity(principal=principal), f"{principal.subject or '(no sub)'} (claims "
                                                        "typed on this page)")
        if preset:
            if preset not in self.inputs.presets:
                raise InputError(f"caller: no preset named {preset!r}")
            principal = Principal.from_claims(self.inputs.presets[preset])
            return Caller(Identity(principal=principal), f"{principal.subject or '(no sub)'} (preset "
                                                        f"{preset!r})")
        return Caller(ANONYMOUS_IDENTITY, "anonymous (no access token)")


def refused_names(guard: Guard, names: Sequence[str]) -> list[str]:
    """The lines a server with these tools, or the gateway in front of them, refuses the policy
    with: a `[tools.NAME]` that nearly matches one of them, found by the check they run."""
    try:
        guard.know_tools(names)
    except PolicyError as exc:
        return exc.lines()
    return []


def with_overrides(source: PolicySource, overrides: Sequence[tuple[str, bool]]) -> PolicySource:
    """The policy with the page's what-if values as static `[state.values]` and `[features.flags]`:
    static values come first in both resolvers, so they decide whatever else is configured."""
    if not overrides:
        return source
    state = {r.removeprefix("state:"): v for r, v in overrides if r.startswith("state:")}
    flags = {r.removeprefix("feature:"): v for r, v in overrides if r.startswith("feature:")}
    policy = source.policy
    policy = policy.model_copy(update={
        "state": policy.state.model_copy(update={"values": {**policy.state.values, **state}}),
        "features": policy.features.model_copy(update={"flags": {**policy.features.flags, **flags}}),
    })
    return dataclasses.replace(source, policy=policy)
