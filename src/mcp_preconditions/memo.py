"""Per-caller memory of tools' outcomes, for a tool whose every requirement the caller alone decides:
fixed for the snapshot, or resolved by a resolver that declares its outcome a function of the
caller's principal and a few argument values (`Dependencies`, e.g. auth: and capability:).

The checks still run: once per tool, caller and listed argument values, and a later call of the
same caller returns the outcomes they produced. A memo belongs to one compiled snapshot, so a reload
starts afresh.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from .arguments import MISSING, ArgumentCondition, resolve_pointer
from .outcomes import Outcome, Status
from .principal import Principal

# What a tool's checks read of a call's arguments: per JSON Pointer (as tokens), the typed values
# some condition lists.
Reads = tuple[tuple[tuple[str, ...], frozenset[tuple[type, Any]]], ...]
# (the principal the entry was made for, its outcomes)
_Entry = tuple[Principal, tuple[Outcome, ...]]
_ERROR = Status.ERROR
_EMPTY: Mapping[str, Any] = MappingProxyType({})
_LISTABLE = (str, int, bool)  # the types a condition lists (the others are unhashable or never equal)


def reads_of(conditions: Iterable[ArgumentCondition]) -> Reads:
    listed: dict[tuple[str, ...], set[tuple[type, Any]]] = {}
    for condition in conditions:
        listed.setdefault(condition.tokens, set()).update(condition.typed)
    return tuple((tokens, frozenset(values)) for tokens, values in listed.items())


class CallerMemo:
    """Outcomes by (tool, principal, argument values read). Keys hold the principal's `id`; the
    entry holds the principal itself, so that id cannot be reused by another object while it is
    kept, and a hit is confirmed by identity. Principals are immutable (frozen, claims read-only).

    An argument value takes part in the key only when some condition lists it (or it is absent):
    any other value is decided afresh on each call, so keys stay few and small. Bounded for the
    whole snapshot, whatever the number of tools and callers: when `maxsize` entries are held, it
    starts over."""

    __slots__ = ("_items", "_maxsize")

    def __init__(self, maxsize: int = 8192) -> None:
        self._items: dict[Hashable, _Entry] = {}
        self._maxsize = maxsize

    @staticmethod
    def key(tool: str, reads: Reads, principal: Principal, arguments: Mapping[str, Any] | None
            ) -> Hashable | None:
        """The key of this call, or None when an argument value read is not one a condition lists
        (then the call is decided afresh, not remembered)."""
        key: tuple[Any, ...] = (tool, id(principal))
        if not reads:
            return key
        document = arguments if arguments is not None else _EMPTY
        for tokens, listed in reads:
            value = resolve_pointer(document, tokens)
            if value is MISSING:
                key += (MISSING, MISSING)
            elif value.__class__ in _LISTABLE and (value.__class__, value) in listed:
                key += (value.__class__, value)  # typed: `true` and `1` are different keys
            else:
                return None
        return key

    def lookup(self, key: Hashable, principal: Principal) -> tuple[Outcome, ...] | None:
        entry = self._items.get(key)
        return entry[1] if entry is not None and entry[0] is principal else None

    def keep(self, key: Hashable, principal: Principal, outcomes: tuple[Outcome, ...]) -> None:
        """Remember outcomes, unless one is an error (a failure is never made to last)."""
        for outcome in outcomes:
            if outcome.status is _ERROR:
                return
        if len(self._items) >= self._maxsize:
            self._items.clear()
        self._items[key] = (principal, outcomes)
