"""Argument conditions of capability grants: JSON Pointers (RFC 6901) into a call's `arguments`, and
typed exact equality with the values a policy lists (`arguments`) or with a claim of the caller
(`argument_claims`).

Equality is JSON equality of scalars: same type, same value. `1` is not `true`, `"1"` is not `1`,
`1.0` is not `1`, and strings compare code point for code point.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Scalar = str | int | bool
MISSING: Any = object()  # what a pointer resolves to when its target is not in the document


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """The reference tokens of a JSON Pointer; ValueError says why a pointer is malformed.

    The empty pointer (the whole arguments object) is refused: it can never equal a scalar."""
    if pointer == "":
        raise ValueError("the empty pointer names the whole arguments object, never a scalar; "
                         "use '/NAME'")
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON Pointer starts with '/' (did you mean '/{pointer}'?)")
    tokens = pointer[1:].split("/")
    for token in tokens:
        rest = token.replace("~0", "").replace("~1", "")
        if "~" in rest:
            raise ValueError("'~' must be followed by '0' (for '~') or '1' (for '/')")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in tokens)


def resolve_pointer(document: Any, tokens: Sequence[str]) -> Any:
    """The value the tokens point at in `document`, or MISSING. Array indexes are decimal without
    leading zeros; '-' (past the end) never resolves."""
    node = document
    for token in tokens:
        if node.__class__ is dict or isinstance(node, Mapping):  # a JSON object (dict: no ABC check)
            node = node.get(token, MISSING)
        elif isinstance(node, list):
            if not token.isdecimal() or not token.isascii() or (token != "0" and token[0] == "0"):
                return MISSING
            index = int(token)
            node = node[index] if index < len(node) else MISSING
        else:
            return MISSING
        if node is MISSING:
            return MISSING
    return node


def same_scalar(value: Any, expected: Scalar) -> bool:
    """JSON equality of a scalar: the same type (a boolean is not an integer) and the same value."""
    return type(value) is type(expected) and value == expected


def shown(value: Any) -> str:
    """A value as JSON text for explanations (an absent one as `missing`)."""
    if value is MISSING:
        return "missing"
    try:
        return json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        return type(value).__name__


_SCALARS = (str, int, bool)


@dataclass(frozen=True, slots=True)
class ArgumentCondition:
    """One `arguments` entry of a grant: the value at `pointer` must equal one of `values`.
    `typed` holds each value with its type, so that one set lookup is `same_scalar` against each."""

    pointer: str
    tokens: tuple[str, ...]
    values: tuple[Scalar, ...]
    typed: frozenset[tuple[type, Scalar]]

    @classmethod
    def of(cls, pointer: str, values: Sequence[Scalar]) -> ArgumentCondition:
        return cls(pointer, parse_pointer(pointer), tuple(values),
                   frozenset((type(v), v) for v in values))

    def failure(self, arguments: Any) -> str | None:
        """None when the call's arguments meet this condition, else why not (pointer and value)."""
        value = resolve_pointer(arguments, self.tokens)
        if value.__class__ in _SCALARS and (value.__class__, value) in self.typed:
            return None
        allowed = ", ".join(shown(v) for v in self.values)
        return f"argument {self.pointer} is {shown(value)} (allowed: {allowed})"


def claim_at(claims: Any, path: Sequence[str]) -> Any:
    """The claim at `path` (one name, or an alias's path of keys into nested objects), or MISSING."""
    node = claims
    for key in path:
        node = node.get(key, MISSING) if isinstance(node, Mapping) else MISSING
        if node is MISSING:
            return MISSING
    return node


@dataclass(frozen=True, slots=True)
class ClaimCondition:
    """One `argument_claims` entry of a grant: the value at `pointer` must equal the caller's claim
    `claim` (found at `path`: the claim itself, or where its alias points). Both must be scalars of
    the same type and value; a missing argument or claim, or a claim that is an array or an object,
    never matches. An explanation names the claim, never its value."""

    pointer: str
    tokens: tuple[str, ...]
    claim: str
    path: tuple[str, ...]

    @classmethod
    def of(cls, pointer: str, claim: str, alias: Sequence[str] | None = None) -> ClaimCondition:
        return cls(pointer, parse_pointer(pointer), claim, tuple(alias) if alias else (claim,))

    def failure(self, arguments: Any, claims: Any) -> str | None:
        """None when the argument equals the caller's claim, else why not (pointer and claim)."""
        value = resolve_pointer(arguments, self.tokens)
        held = claim_at(claims, self.path)
        if held.__class__ in _SCALARS and same_scalar(value, held):
            return None
        if held is MISSING:
            return f"argument {self.pointer} needs the caller's claim '{self.claim}', which is missing"
        if held.__class__ not in _SCALARS:
            return (f"argument {self.pointer} needs the caller's claim '{self.claim}', which is not "
                    "a string, an integer or a boolean")
        return f"argument {self.pointer} is {shown(value)}, not the caller's claim '{self.claim}'"
