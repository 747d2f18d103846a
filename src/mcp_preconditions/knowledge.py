"""What a client knows about requirement strings: declared by the application, decided by its own
client-side resolvers, or learned from a server's `unmet_requirements` denials; and one consistent
view of that knowledge for one verdict or filter call (client.py uses it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

from cachetools import TTLCache

from .errors import InputError, RegistryError, ToolsFileError
from .requirements import namespace_of

__all__ = ["ARGUMENT_DEPENDENT_META_KEY", "DENIAL_ERRORS_META_KEY", "DENIAL_META_KEY",
           "NEVER_LEARNED_NAMESPACES", "TRANSIENT_META_KEY", "ClientResolver", "Knowledge",
           "KnowledgeView"]

log = logging.getLogger(__name__)

# The `_meta` key under which a denial lists the unmet requirements that ended as `error` (resolver
# failed, backend down): the server could not decide them, so they are not learned unsatisfiable.
DENIAL_ERRORS_META_KEY = "io.github.mcp-preconditions/errors"
# The `_meta` key under which a denial lists the unmet requirements whose outcome depended on the
# call's arguments: another call of the same tool may be allowed, so they are never learned.
ARGUMENT_DEPENDENT_META_KEY = "io.github.mcp-preconditions/argument-dependent"
# The `_meta` key under which a denial lists the unmet requirements that hold only for now (used-up
# quotas): the same call may be allowed once they refill, so they are never learned.
TRANSIENT_META_KEY = "io.github.mcp-preconditions/transient"
_NOT_LEARNED_KEYS = (DENIAL_ERRORS_META_KEY, ARGUMENT_DEPENDENT_META_KEY, TRANSIENT_META_KEY)
# Namespaces never learned from a denial, whatever the server marks (SPEC §6, §15): an approval is
# given per call, and a credential is connected or obtained per caller; both change with no change
# on the client's side. They stay unknown unless the application declares them.
NEVER_LEARNED_NAMESPACES = frozenset({"approval", "credential"})
# The `_meta` key that holds the denial payload instead of `structuredContent` when the tool
# declares an `outputSchema` (clients validate structuredContent against it, even on an error).
DENIAL_META_KEY = "io.github.mcp-preconditions/denial"

KnownState = Literal["satisfied", "unsatisfiable"]
_KEYS = ("satisfied", "unsatisfiable")
# Per-requirement states inside a view; small ints keep the hot loop to one dict lookup.
UNKNOWN, SAT, UNSAT, BAD = 0, 1, 2, 3
_CODE: dict[object, int] = {"satisfied": SAT, "unsatisfiable": UNSAT, None: UNKNOWN}


@runtime_checkable
class ClientResolver(Protocol):
    """Decides requirements of one namespace the client can judge by itself (e.g. its own token).

    `knows` returns "satisfied", "unsatisfiable", or None for "I don't know". An exception or any
    other value counts as unknown (with a warning): a broken resolver can only make a tool proceed."""

    namespace: str

    def knows(self, requirement: str) -> KnownState | None: ...


def _check_list(key: str, value: Any) -> tuple[list[tuple[int, str]], list[str]]:
    """((index, string) pairs, problems by key path) of one knowledge list."""
    if not isinstance(value, list | tuple):
        return [], [f"{key}: must be a list of strings, got {type(value).__name__}"]
    good: list[tuple[int, str]] = []
    problems: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            problems.append(f"{key}[{i}]: must be a string, got {type(item).__name__}")
        elif item == "":
            problems.append(f"{key}[{i}]: must not be empty")
        else:
            good.append((i, item))
    return good, problems


def _as_list(value: Any) -> Any:
    """Sets and generators as lists (for indexed messages); strings and the rest as given, so that
    `_check_list` reports them instead of splitting a string into characters."""
    if isinstance(value, str | bytes | list | tuple | Mapping) or not isinstance(value, Iterable):
        return value
    return list(value)


def _declared(satisfied: Any, unsatisfiable: Any, source: str | None) -> dict[str, int]:
    """Validated declared knowledge as requirement -> state; ToolsFileError lists every problem."""
    sat, problems = _check_list("satisfied", satisfied)
    unsat, more = _check_list("unsatisfiable", unsatisfiable)
    problems += more
    first_sat: dict[str, int] = {}
    for i, req in sat:
        first_sat.setdefault(req, i)
    for i, req in unsat:
        if req in first_sat:
            problems.append(f"unsatisfiable[{i}]: {req!r} is also in satisfied[{first_sat[req]}]")
    if problems:
        where = f"{source}: " if source else ""
        raise ToolsFileError(where + "invalid knowledge: " + "; ".join(problems))
    out = {req: UNSAT for _, req in unsat}
    out.update((req, SAT) for _, req in sat)
    return out


class Knowledge:
    """What a client knows: requirement string -> satisfied | unsatisfiable; all else is unknown.

    Precedence, strongest first: what the application declared; its client-side resolvers; what was
    learned from a server's `unmet_requirements` denial (kept `learn_ttl` seconds, at most
    `learn_maxsize` strings). Learned knowledge never overrides declared knowledge. Matching is
    exact, code point for code point. Thread-safe: learning and filtering may run concurrently."""

    def __init__(self, satisfied: Iterable[str] = (), unsatisfiable: Iterable[str] = (), *,
                 resolvers: Iterable[ClientResolver] = (), learn_ttl: float = 300.0,
                 learn_maxsize: int = 4096, clock: Callable[[], float] = time.monotonic,
                 source: str | None = None) -> None:
        self._declared = _declared(_as_list(satisfied), _as_list(unsatisfiable), source)
        if learn_maxsize < 1 or not learn_ttl >= 0:
            raise InputError(f"learn_maxsize must be >= 1 and learn_ttl >= 0, got {learn_maxsize} "
                             f"and {learn_ttl}")
        self._resolvers: dict[str, ClientResolver] = {}
        for resolver in resolvers:
            if resolver.namespace in self._resolvers:
                raise RegistryError(f"two client resolvers for namespace {resolver.namespace!r}")
            self._resolvers[resolver.namespace] = resolver
        self._learned: TTLCache[str, bool] = TTLCache(learn_maxsize, learn_ttl, timer=clock)
        self._lock = threading.Lock()

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None,
                  resolvers: Iterable[ClientResolver] = (), learn_ttl: float = 300.0,
                  learn_maxsize: int = 4096, clock: Callable[[], float] = time.monotonic) -> Knowledge:
        """Knowledge from the SPEC §8 file shape `{"satisfied": [...], "unsatisfiable": [...]}`.

        Either key may be absent (an empty list); any other key, a non-list, a non-string or empty
        element, or a string in both lists raises ToolsFileError naming every key path at fault
        (prefixed with `source`, e.g. the file name, when given)."""
        where = f"{source}: " if source else ""
        if not isinstance(data, dict):
            raise ToolsFileError(f"{where}invalid knowledge: must be a JSON object with keys "
                                 f"'satisfied' and 'unsatisfiable', got {type(data).__name__}")
        extra = [k for k in data if k not in _KEYS]
        if extra:
            names = ", ".join(repr(k) for k in extra)
            raise ToolsFileError(f"{where}invalid knowledge: unknown key(s) {names} "
                                 "(expected 'satisfied', 'unsatisfiable')")
        return cls(data.get("satisfied", []), data.get("unsatisfiable", []), resolvers=resolvers,
                   learn_ttl=learn_ttl, learn_maxsize=learn_maxsize, clock=clock, source=source)

    def to_dict(self) -> dict[str, list[str]]:
        """The declared knowledge in the SPEC §8 file shape (learned entries are not included)."""
        return {"satisfied": [r for r, s in self._declared.items() if s == SAT],
                "unsatisfiable": [r for r, s in self._declared.items() if s == UNSAT]}

    def learn_denial(self, payload: Any, errors: Any = None, *,
                     meta: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        """Remember each string of a denial's `unmet` list as unsatisfiable, for the TTL, except
        those the server could not decide for good: the ones that ended as `error` (they may hold
        next time), the ones that depended on the call's arguments (another call may be allowed)
        and the transient ones (a used-up quota refills); nor ever an `approval:` or `credential:`
        one (NEVER_LEARNED_NAMESPACES). Learning any would be unsound (SPEC §6, §15).

        `payload`: the SPEC §3 structuredContent (or a JSON-RPC denial's `data`, whose `_meta` may
        hold the lists too); `meta`: the result's `_meta`, whose keys `DENIAL_ERRORS_META_KEY`,
        `ARGUMENT_DEPENDENT_META_KEY` and `TRANSIENT_META_KEY` list those requirements; `errors`: the
        errors list given directly. Returns the requirements learned. A malformed payload or list
        is ignored as a whole and logged as a warning; it never raises."""
        inner = payload.get("_meta") if isinstance(payload, Mapping) else None
        found: list[Any] = [errors]
        for where in (meta, inner):
            if isinstance(where, Mapping):
                found += [where.get(key) for key in _NOT_LEARNED_KEYS]
        problem = denial_problem(payload)
        if problem is None and not all(v is None or _strings(v) for v in found):
            problem = "a list of requirements not to learn must be a list of non-empty strings"
        if problem is not None:
            log.warning("ignored a server denial: %s", problem)
            return ()
        skip = {r for value in found if value for r in value}
        learned = tuple(r for r in dict.fromkeys(payload["unmet"]) if r not in skip
                        and namespace_of(r) not in NEVER_LEARNED_NAMESPACES)
        with self._lock:
            for req in learned:
                self._learned[req] = True
        return learned

    def learned(self) -> frozenset[str]:
        """The requirement strings currently learned unsatisfiable (expired ones dropped)."""
        with self._lock:
            self._learned.expire()
            return frozenset(self._learned)

    def forget(self) -> None:
        """Drop everything learned from servers (e.g. after the user signs in again)."""
        with self._lock:
            self._learned.clear()

    def view(self) -> KnowledgeView:
        """One consistent snapshot of this knowledge, for many verdicts in a row (`verdict_for`)."""
        return KnowledgeView(self)

    def state(self, requirement: str) -> KnownState | None:
        """What the client knows about one requirement: "satisfied", "unsatisfiable" or None."""
        code = KnowledgeView(self).classify(requirement)
        return "satisfied" if code == SAT else "unsatisfiable" if code == UNSAT else None


def denial_problem(payload: Any) -> str | None:
    """Why `payload` is not a usable `unmet_requirements` denial, or None when it is."""
    if not isinstance(payload, Mapping):
        return f"payload must be an object, got {type(payload).__name__}"
    if payload.get("error") != "unmet_requirements":
        return f"'error' must be 'unmet_requirements', got {payload.get('error')!r}"
    unmet = payload.get("unmet")
    if not isinstance(unmet, list):
        return f"'unmet' must be a list of strings, got {type(unmet).__name__}"
    for i, item in enumerate(unmet):
        if not isinstance(item, str) or item == "":
            return f"'unmet[{i}]' must be a non-empty string, got {item!r}"
    return None


def _strings(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(r, str) and r for r in value)


class KnowledgeView:
    """One consistent snapshot of a Knowledge for one verdict or filter call.

    `memo` maps every requirement decided so far to its state; a miss goes through `classify`
    (resolvers, learned), whose answer is memoised so each distinct string costs one lookup."""

    __slots__ = ("learned", "memo", "resolvers", "warnings")

    def __init__(self, knowledge: Knowledge) -> None:
        self.learned = knowledge.learned()
        self.resolvers = knowledge._resolvers
        self.warnings: list[str] = []
        if self.resolvers:
            # A resolver outranks learned knowledge, so those strings must go through classify().
            base: dict[object, int] = {
                r: UNSAT for r in self.learned if namespace_of(r) not in self.resolvers}
        else:
            base = dict.fromkeys(self.learned, UNSAT)
        base.update(knowledge._declared)
        self.memo = base

    def classify(self, requirement: object) -> int:
        """The state of a requirement not yet in `memo` (memoised), or BAD for a malformed one."""
        if not isinstance(requirement, str) or requirement == "":
            return BAD
        code = self.memo.get(requirement)
        if code is None:
            code = self._resolve(requirement)
            if code == UNKNOWN and requirement in self.learned:
                code = UNSAT
            self.memo[requirement] = code
        return code

    def _resolve(self, requirement: str) -> int:
        resolver = self.resolvers.get(namespace_of(requirement) or "") if self.resolvers else None
        if resolver is None:
            return UNKNOWN
        try:
            answer = resolver.knows(requirement)
        except Exception as exc:  # a broken resolver makes the requirement unknown, never a crash
            self.warnings.append(f"client resolver {resolver.namespace!r} failed on {requirement!r}: "
                                 f"{type(exc).__name__}: {exc}; treated as unknown")
            return UNKNOWN
        code = _CODE.get(answer) if isinstance(answer, str | None) else None
        if code is None:
            self.warnings.append(f"client resolver {resolver.namespace!r} answered {answer!r} for "
                                 f"{requirement!r}; treated as unknown")
            return UNKNOWN
        return code
