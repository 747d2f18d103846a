"""Per-caller memory of tools' outcomes, for a tool whose every requirement the caller alone decides:
fixed for the snapshot, or resolved by a resolver that declares its outcome a function of the
caller's principal and a few argument values (`Dependencies`, e.g. auth: and capability:).

The checks still run: once per tool, caller and listed argument values, and a later call of the
same caller returns the outcomes they produced. A memo belongs to one compiled snapshot, so a reload
starts afresh.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from .arguments import MISSING, ArgumentCondition, resolve_pointer
from .outcomes import Ruling, Status
from .principal import Principal


class Reads(tuple[tuple[tuple[str, ...], frozenset[Hashable]], ...]):
    """What a tool's checks read of a call's arguments: per JSON Pointer (as tokens), the key forms
    of the values some condition lists (see `key_form`). A tuple (equal to the plain one), which
    also says `argument`, the one top-level argument read when that is all (else None), and its
    listed forms: a call's key is then read inline (`Snapshot.evaluate`)."""

    argument: str | None
    listed: frozenset[Hashable]


# (the principal the entry was made for, its ruling)
_Entry = tuple[Principal, Ruling]
_ERROR = Status.ERROR
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def key_form(value: Any) -> Hashable | None:
    """How an argument value goes into a key: a string as itself, an integer or a boolean with its
    type (`true` and `1` are different keys, as they are different values). None for any other
    value: conditions list only these types, and another one (unhashable, or never equal) is
    decided afresh."""
    cls = value.__class__
    form: Hashable | None = (value if cls is str else (cls, value) if cls is int or cls is bool
                             else None)
    return form


def reads_of(conditions: Iterable[ArgumentCondition]) -> Reads:
    listed: dict[tuple[str, ...], set[Hashable]] = {}
    for condition in conditions:
        listed.setdefault(condition.tokens, set()).update(key_form(v) for v in condition.values)
    return _reads(tuple((tokens, frozenset(forms)) for tokens, forms in listed.items()))


@functools.lru_cache(maxsize=4096)
def _reads(pointers: tuple[tuple[tuple[str, ...], frozenset[Hashable]], ...]) -> Reads:
    """One `Reads` for equal ones (most tools read nothing, or the same argument): an instance
    holds a dict, too much to have one per tool of 100,000 (bench_scale)."""
    reads = Reads(pointers)
    one = pointers[0] if len(pointers) == 1 and len(pointers[0][0]) == 1 else None
    reads.argument, reads.listed = (one[0][0], one[1]) if one is not None else (None, frozenset())
    return reads


class CallerMemo:
    """Rulings by (tool, principal, argument values read). Keys hold the principal's `id`; the
    entry holds the principal itself, so that id cannot be reused by another object while it is
    kept, and a hit is confirmed by identity. Principals are immutable (frozen, claims read-only).

    An argument value takes part in the key only when some condition lists it (or it is absent):
    any other value is decided afresh on each call, so keys stay few and small. Bounded for the
    whole snapshot, whatever the number of tools and callers: when `maxsize` entries are held, it
    starts over."""

    __slots__ = ("_maxsize", "entries")

    def __init__(self, maxsize: int = 8192) -> None:
        # key -> (the principal, its ruling): `lookup` reads it, and so may a hot path, inline.
        self.entries: dict[Hashable, _Entry] = {}
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
            # A top-level argument (the usual pointer) is read directly from the JSON object.
            value = (document.get(tokens[0], MISSING) if len(tokens) == 1 and document.__class__ is dict
                     else resolve_pointer(document, tokens))
            if value is MISSING:
                key += (MISSING,)
                continue
            form = value if value.__class__ is str else key_form(value)  # a string is its own form
            if form is None or form not in listed:
                return None
            key += (form,)
        return key

    def lookup(self, key: Hashable, principal: Principal) -> Ruling | None:
        entry = self.entries.get(key)
        return entry[1] if entry is not None and entry[0] is principal else None

    def keep(self, key: Hashable, principal: Principal, ruling: Ruling) -> None:
        """Remember a ruling, unless an outcome is an error (a failure is never made to last) or
        transient (a quota: each call draws on it afresh)."""
        for outcome in ruling[1]:
            if outcome.status is _ERROR or outcome.transient:
                return
        if len(self.entries) >= self._maxsize:
            self.entries.clear()
        self.entries[key] = (principal, ruling)
