"""`auth:oauth2`, `auth:claim:NAME:VALUE` and `auth:scope:SCOPE` over a verified principal.

Verifying tokens is the job of `mcp_preconditions.auth`; this resolver only reads the Identity it
produced. Claims compare as exact strings (booleans and integers by their JSON text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..arguments import MISSING, claim_at
from ..outcomes import Outcome, OutcomeMemo
from ..principal import Identity
from .base import Dependencies

FORMS = ("auth:oauth2", "auth:claim:NAME:VALUE", "auth:scope:SCOPE")
_MISSING = MISSING  # what `claim_at` answers for a claim that is not there


def split_claim(requirement: str) -> tuple[str, str] | None:
    """`auth:claim:NAME:VALUE` -> (NAME, VALUE): NAME up to the next ':', VALUE all the rest."""
    rest = requirement[len("auth:claim:"):]
    name, sep, value = rest.partition(":")
    return (name, value) if sep and name and value else None


def claim_text(value: Any) -> str | None:
    """A scalar claim value as comparable text: strings as-is, booleans/integers as JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int):
        return json.dumps(value)
    return None  # floats, objects, null never match: their JSON text is not canonical


def claim_matches(value: Any, expected: str) -> bool:
    if isinstance(value, list):
        return any(claim_text(v) == expected for v in value)
    return claim_text(value) == expected


def scope_closure(implications: Mapping[str, Sequence[str]]) -> dict[str, frozenset[str]]:
    """Each scope's transitive implications (declared exact strings only)."""
    closure: dict[str, frozenset[str]] = {}
    for start in implications:
        seen: set[str] = set()
        todo = list(implications[start])
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                todo.extend(implications.get(s, ()))
        closure[start] = frozenset(seen)
    return closure


def _scope_outcome(requirement: str, scope: str, held: str | None) -> Outcome:
    if held == scope:
        return Outcome.satisfied(requirement, f"token has scope '{scope}'")
    if held is not None:
        return Outcome.satisfied(requirement, f"scope '{held}' implies '{scope}'")
    return Outcome.unsatisfied(requirement, f"token lacks scope '{scope}'")


class AuthResolver:
    namespace = "auth"
    forms = FORMS

    def __init__(self, claim_aliases: Mapping[str, str | Sequence[str]] | None = None,
                 scope_implications: Mapping[str, Sequence[str]] | None = None) -> None:
        self.aliases = {k: ((v,) if isinstance(v, str) else tuple(v))
                        for k, v in (claim_aliases or {}).items()}
        self.implied = scope_closure(scope_implications or {})
        self._memo = OutcomeMemo()  # outcomes by (requirement, answer): the reason texts are fixed
        self._parts: dict[str, tuple[str, str]] = {}  # auth:claim:NAME:VALUE -> (NAME, VALUE)

    def validate(self, requirement: str) -> str | None:
        if requirement == "auth:oauth2":
            return None
        if requirement.startswith("auth:claim:"):
            if split_claim(requirement) is None:
                return "auth:claim: needs a claim name and a value (auth:claim:NAME:VALUE)"
            return None
        if requirement.startswith("auth:scope:"):
            return None if requirement[len("auth:scope:"):] else "auth:scope: needs a scope"
        return "unknown auth form"

    def dependencies(self, requirement: str) -> Dependencies:
        """Every auth: outcome is decided by the verified principal alone."""
        return Dependencies()

    def resolve(self, requirement: str, context: Any) -> Outcome:
        identity: Identity = context.identity
        principal = identity.principal
        if principal is None:
            reason = identity.failure or "no access token"
            if identity.error:
                return Outcome.error(requirement, reason)
            return Outcome.unsatisfied(requirement, reason)
        if requirement == "auth:oauth2":
            key: tuple[str, Any] = (requirement, principal.kind)
        elif requirement.startswith("auth:scope:"):
            key = (requirement, self._scope_held(requirement[len("auth:scope:"):], principal.scopes))
        else:
            parts = self._claim_parts(requirement)
            if parts is None:
                return Outcome.unsatisfied(requirement, "unknown auth form")
            value = self._lookup(principal.claims, parts[0])
            if value.__class__ is str:  # the usual claim: claim_matches' first case, without calls
                key = (requirement, "found" if value == parts[1] else "no")
            else:
                key = (requirement, "missing" if value is _MISSING
                       else "found" if claim_matches(value, parts[1]) else "no")
        return self._memo.lookup(key) or self._memo.keep(key, self._outcome(*key))

    def _outcome(self, requirement: str, answer: Any) -> Outcome:
        """The outcome of one answer (the principal's token kind, the held scope, or found/missing/
        no for a claim): fixed texts, so each is built once and memoised."""
        if requirement == "auth:oauth2":
            return Outcome.satisfied(requirement, f"access token verified ({answer})")
        if requirement.startswith("auth:scope:"):
            return _scope_outcome(requirement, requirement[len("auth:scope:"):], answer)
        name, expected = split_claim(requirement) or ("", "")
        return self._claim_outcome(requirement, name, expected, answer)

    def _claim_parts(self, requirement: str) -> tuple[str, str] | None:
        parts = self._parts.get(requirement)
        if parts is None:
            parts = split_claim(requirement)
            if parts is not None and len(self._parts) < 4096:
                self._parts[requirement] = parts
        return parts

    def _scope_held(self, scope: str, scopes: frozenset[str]) -> str | None:
        """The held scope that is or implies `scope` (itself first), or None."""
        if scope in scopes:
            return scope
        return next((held for held in scopes if scope in self.implied.get(held, ())), None)

    def _lookup(self, claims: Mapping[str, Any], name: str) -> Any:
        """The claim's value (through an alias path when one is declared), or _MISSING."""
        path = self.aliases.get(name)
        if path is None:
            return claims.get(name, _MISSING)
        return claim_at(claims, path)

    def _claim_outcome(self, requirement: str, name: str, expected: str, answer: str) -> Outcome:
        path = self.aliases.get(name)
        where = name if path is None else ".".join(path)
        label = name if where == name else f"{name} (alias of {where})"
        if answer == "missing":
            return Outcome.unsatisfied(requirement, f"token has no claim '{label}'")
        if answer == "found":
            return Outcome.satisfied(requirement, f"claim '{label}' has '{expected}'")
        return Outcome.unsatisfied(requirement, f"claim '{label}' does not have '{expected}'")
