"""What an enforcement point asks a decision point (SPEC §16): COAZ-MCP's default Access Evaluation
request for one requirement of one call or listing, and the key a decision of it is cached by.

The subject is always the verified caller (issuer and subject of their token, and the claims the
table names), never a value from the call. The cache key is (issuer, subject, requirement, SHA-256
of the request's RFC 8785 form); computing RFC 8785 costs ~100 µs in Python, so each distinct
request's digest is remembered by its parts as plain sorted JSON (equal plain JSON is the same JSON value, so
the same canonical form): a cached decision costs one `json.dumps`, not a canonicalisation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ..envelope import canonical_json
from ..principal import Principal

CALL = "tools/call"
LIST = "tools/list"
MAX_DIGESTS = 10_000  # remembered digests (plain JSON -> canonical digest); cleared when full

_plain = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode


class Caller(NamedTuple):
    """The verified caller a request is about: issuer ("" without `iss`), subject, and the claims
    sent as subject properties (only those the table names, and only those the token has)."""

    issuer: str
    subject: str
    claims: Mapping[str, Any]


def caller_of(principal: Principal | None, claims: Sequence[str]) -> Caller | None:
    """The caller a request may be made for; None (no request: unsatisfied) for an anonymous
    caller and for a token that names no subject."""
    if principal is None or principal.subject is None:
        return None
    found = principal.claims
    issuer = found.get("iss")
    return Caller(issuer if isinstance(issuer, str) else "", principal.subject,
                  {c: found[c] for c in claims if c in found})


def evaluation(caller: Caller, method: str, tool: str, server: str | None,
               arguments: Mapping[str, Any] | None, requirement: str) -> dict[str, Any]:
    """COAZ-MCP's request: `subject {"type": "identity", "id": SUB, "properties": {"iss": ISS,
    ...claims}}`, `action {"name": METHOD}`, `resource {"type": "tool", "id": TOOL, "properties":
    {"server": KEY, "arguments": ARGS}}` (no arguments for a listing; no server for a hosted
    tool), `context {"requirement": REQUIREMENT}`."""
    properties: dict[str, Any] = {}
    if server is not None:
        properties["server"] = server
    if method == CALL:
        properties["arguments"] = dict(arguments) if arguments is not None else {}
    resource: dict[str, Any] = {"type": "tool", "id": tool}
    if properties:
        resource["properties"] = properties
    return {"subject": {"type": "identity", "id": caller.subject,
                        "properties": {**caller.claims, "iss": caller.issuer}},
            "action": {"name": method}, "resource": resource,
            "context": {"requirement": requirement}}


def plain(value: Any) -> str:
    """`value` as sorted, compact JSON (C-fast); ValueError for what is not JSON."""
    try:
        return _plain(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON ({type(exc).__name__})") from None


class Digests:
    """Each distinct request's SHA-256 of its RFC 8785 form, remembered by a plain key: a tuple of
    the request's parts as plain sorted JSON, which equal only for the same JSON values, so for the
    same canonical form."""

    def __init__(self, bound: int = MAX_DIGESTS) -> None:
        self._known: dict[tuple[str, ...], bytes] = {}
        self._bound = bound

    def of(self, key: tuple[str, ...], request: Callable[[], Mapping[str, Any]]) -> bytes:
        """The digest of the request `key` stands for (`request()` builds it when not known);
        ValueError for a request with no canonical form (NaN, an integer beyond 2**53...)."""
        known = self._known.get(key)
        if known is None:
            known = hashlib.sha256(canonical_json(request()).encode()).digest()
            if len(self._known) >= self._bound:
                self._known.clear()  # (a full memo starts again: bounded, never wrong)
            self._known[key] = known
        return known


def cache_key(caller: Caller, requirement: str, digest: bytes) -> tuple[str, str, str, bytes]:
    """(issuer, subject, requirement, digest): never shared across callers."""
    return (caller.issuer, caller.subject, requirement, digest)
