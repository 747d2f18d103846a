"""Per-caller memory of one tool's outcomes, for a tool whose every requirement the caller alone
decides: fixed for the snapshot, or resolved by a resolver that declares its outcome a function of
the caller's principal and a few argument values (`Dependencies`, e.g. auth: and capability:).

The checks still run: once per caller (and per listed argument value), and a later call of the same
caller returns the outcomes they produced. A memo belongs to one compiled snapshot, so a reload
starts afresh.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from .arguments import MISSING, ArgumentCondition, resolve_pointer
from .outcomes import Outcome, Status
from .principal import Principal

# (the principal the entry was made for, its outcomes)
_Entry = tuple[Principal, tuple[Outcome, ...]]
_ERROR = Status.ERROR
_LISTABLE = (str, int, bool)  # the types a condition lists (the others are unhashable or never equal)
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class ToolMemo:
    """Outcomes by (principal, argument values read). Keys hold the principal's `id`; the entry
    holds the principal itself, so that id cannot be reused by another object while it is kept, and
    a hit is confirmed by identity. Principals are immutable (frozen, claims a read-only mapping).

    An argument value takes part in the key only when some condition lists it (or it is absent):
    any other value is decided afresh on each call, so keys stay few and small. Bounded: when
    `maxsize` entries are held, the memo starts over."""

    def __init__(self, reads: Iterable[ArgumentCondition], maxsize: int = 1024) -> None:
        listed: dict[tuple[str, ...], set[tuple[type, Any]]] = {}
        for condition in reads:
            listed.setdefault(condition.tokens, set()).update(condition.typed)
        self._reads = tuple((tokens, frozenset(values)) for tokens, values in listed.items())
        self._items: dict[Hashable, _Entry] = {}
        self._maxsize = maxsize

    def key(self, principal: Principal, arguments: Mapping[str, Any] | None) -> Hashable | None:
        """The key of this call, or None when an argument value read is not one a condition lists
        (then the call is decided afresh, not remembered)."""
        if not self._reads:
            return id(principal)
        document = arguments if arguments is not None else _EMPTY
        key: tuple[Any, ...] = (id(principal),)
        for tokens, listed in self._reads:
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
