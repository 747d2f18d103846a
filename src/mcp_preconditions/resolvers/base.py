"""The resolver protocol, the per-call context resolvers read, and the namespace registry.

A resolver owns one namespace. It validates a requirement's form at start-up and decides it per
call, sync or async. Whatever a resolver raises or returns that is not an Outcome becomes `error`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ..arguments import ArgumentCondition
from ..errors import RegistryError
from ..outcomes import Outcome
from ..principal import Identity
from ..requirements import namespace_of

ENTRY_POINT_GROUP = "mcp_preconditions.resolvers"

ResolveResult = Outcome | bool | Awaitable[Outcome | bool]


_NO_ARGUMENTS: Mapping[str, Any] = MappingProxyType({})


class CallContext(NamedTuple):
    """Everything a resolver may read about one call. Immutable: one call, one snapshot. (A named
    tuple: one is built per guarded call.)"""

    tool: str
    identity: Identity
    arguments: Mapping[str, Any] = _NO_ARGUMENTS
    # Lets a resolver (capability grants) decide other namespaces' requirements for this call.
    evaluate: Callable[[str, CallContext], Outcome | Awaitable[Outcome]] | None = None

    @property
    def subject(self) -> str | None:
        return self.identity.subject


@runtime_checkable
class Resolver(Protocol):
    """One namespace's decision procedure. `validate` returns None when a form is accepted."""

    namespace: str

    def validate(self, requirement: str) -> str | None: ...

    def resolve(self, requirement: str, context: CallContext) -> ResolveResult: ...


class StaticResolver(Protocol):
    """Optional fast path: a requirement whose outcome is fixed for a whole policy snapshot."""

    def static_outcome(self, requirement: str) -> Outcome | None: ...


class Dependencies(NamedTuple):
    """What a resolver's outcome for one requirement is a function of, besides the caller's
    principal: the outcomes of other `requirements` (decided through `CallContext.evaluate`) and the
    argument values some `arguments` conditions read. Nothing else: no clock, backend or state."""

    requirements: tuple[str, ...] = ()
    arguments: tuple[ArgumentCondition, ...] = ()


class CallerOnlyResolver(Protocol):
    """Optional: `dependencies(requirement)` returns Dependencies when the outcome is decided by the
    caller alone (then the guard may remember it per caller, for the snapshot), or None."""

    def dependencies(self, requirement: str) -> Dependencies | None: ...


def forms_of(resolver: Resolver) -> str:
    """A resolver's accepted forms for messages (its `forms` attribute, or NAMESPACE:...)."""
    forms = getattr(resolver, "forms", None)
    if isinstance(forms, tuple | list) and forms:
        return ", ".join(str(f) for f in forms)
    return f"{resolver.namespace}:..."


def is_async(resolver: Resolver) -> bool:
    return inspect.iscoroutinefunction(resolver.resolve)


def describe(resolver: object) -> str:
    """A resolver as a person can find it: its class and the file that defines it (a file loaded
    by `--resolver path.py:attr` has a private module name; its path is what the user typed)."""
    cls = type(resolver)
    try:
        where = inspect.getsourcefile(cls)
    except (TypeError, OSError):
        where = None
    return f"{cls.__qualname__} ({where or cls.__module__})"


class Registry:
    """Resolvers by namespace. Two resolvers for one namespace is an error."""

    def __init__(self, resolvers: Iterable[Resolver] = ()) -> None:
        self._by_ns: dict[str, Resolver] = {}
        for r in resolvers:
            self.register(r)

    def register(self, resolver: Resolver) -> None:
        ns = getattr(resolver, "namespace", None)
        if not isinstance(ns, str) or not ns or ":" in ns:
            raise RegistryError(f"resolver {describe(resolver)} has no valid 'namespace' (a "
                                "non-empty string without ':')")
        for attr in ("validate", "resolve"):
            if not callable(getattr(resolver, attr, None)):
                raise RegistryError(f"resolver for namespace '{ns}' has no {attr}() method")
        if ns in self._by_ns:
            raise RegistryError(f"two resolvers for namespace '{ns}': {describe(self._by_ns[ns])} "
                                f"and {describe(resolver)}")
        self._by_ns[ns] = resolver

    def get(self, namespace: str) -> Resolver | None:
        return self._by_ns.get(namespace)

    def for_requirement(self, requirement: str) -> Resolver | None:
        ns = namespace_of(requirement)
        return self._by_ns.get(ns) if ns is not None else None

    def namespaces(self) -> tuple[str, ...]:
        return tuple(self._by_ns)

    def check_form(self, requirement: str) -> str | None:
        ns = namespace_of(requirement)
        resolver = self._by_ns.get(ns) if ns is not None else None
        if resolver is None:
            known = ", ".join(f"'{n}'" for n in self._by_ns)
            return f"unknown namespace '{ns}' (known namespaces: {known})"
        try:
            problem = resolver.validate(requirement)
        except Exception as exc:  # a custom validate() that raises rejects the form
            return f"the '{ns}' resolver's validate() raised {type(exc).__name__}: {exc}"
        if problem is None:
            return None
        return f"{problem} (accepted forms: {forms_of(resolver)})"

    def __iter__(self) -> Any:
        return iter(self._by_ns.values())


def load_entry_point_resolvers() -> list[Resolver]:
    """Resolvers published by installed packages under the `mcp_preconditions.resolvers` group.

    Each entry point names a Resolver instance, a class, or a zero-argument factory.
    """
    found: list[Resolver] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            resolver = obj() if (inspect.isclass(obj) or
                                 (callable(obj) and not hasattr(obj, "namespace"))) else obj
        except Exception as exc:
            raise RegistryError(f"entry point '{ep.name}' ({ep.value}) failed to load: "
                                f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(resolver, Resolver):
            raise RegistryError(f"entry point '{ep.name}' ({ep.value}) is not a resolver")
        found.append(resolver)
    return found
