"""The SEP-2643 envelope of a denial (Structured Authorization Denials, SPEC §15): the typed value,
read strictly from a result's `_meta` (a malformed envelope is ignored with a warning, never
trusted), written by `to_meta`; the context IDs a server draws and a client echoes when it retries
a denied call, and `canonical_json`, the one definition of RFC 8785 canonical JSON by which a call's
arguments are compared code point for code point: a retry matched to its denial's context ID here,
what an approval is bound to (approvals/lifecycle.py), a PDP request's digest (pdp/request.py). (It
was canonical.py.) No MCP SDK here: the client adapters and the servers' denials (denials.py) share
it.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import rfc8785
from cachetools import TTLCache

from .outcomes import Outcome, Status

log = logging.getLogger(__name__)

AUTHORIZATION_META_KEY = "io.modelcontextprotocol/authorization"
CONTEXT_ID_META_KEY = "io.modelcontextprotocol/authorization-context-id"
REASON = "insufficient_authorization"
# Bounds: what a server may send, whatever it sends.
MAX_HINTS, MAX_TEXT, MAX_ID = 16, 2048, 256
# What a server takes as an echoed context ID (its own are `authzctx_` and 32 hex digits): short,
# and safe in a log line, JSON and a header. Anything else is ignored, never recorded.
_ECHO = re.compile(r"[A-Za-z0-9._~:-]{1,128}")
_QUOTA = "quota:"


class Remediation(enum.StrEnum):
    """Whether the caller can do something about a denial: `available` (the hints say what),
    `unavailable` (nothing: the denial is final), `undisclosed` (the server does not say)."""

    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"
    UNDISCLOSED = "undisclosed"


def most_open(remedies: Iterable[Remediation]) -> Remediation:
    """The envelope's remediation from its unmet requirements' (SPEC §15): `available`, then
    `undisclosed`, then `unavailable` (also for none)."""
    found = Remediation.UNAVAILABLE
    for remedy in remedies:
        if remedy is Remediation.AVAILABLE:
            return remedy
        if remedy is Remediation.UNDISCLOSED:
            found = remedy
    return found


@dataclass(frozen=True, slots=True)
class RemediationHint:
    """One hint: `type` "url" (open `url`), "authorization_remediation" (ask for a credential with
    these RFC 9396 `authorization_details`), "task" (a task, `task_id`, decides out of band), or a
    type this client does not know (kept, with its members, in `raw`)."""

    type: str
    url: str | None = None
    authorization_details: tuple[Mapping[str, Any], ...] = ()
    task_id: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        if self.type == "url":
            return {"type": "url", "url": self.url}
        if self.type == "authorization_remediation":
            return {"type": self.type, "authorization_details": [dict(d) for d in
                                                                  self.authorization_details]}
        if self.type == "task":
            return {"type": "task", "taskId": self.task_id}
        return dict(self.raw)


@dataclass(frozen=True, slots=True)
class AuthorizationDenial:
    """A denial's envelope. `context_id` grants nothing: a retry that echoes it is decided afresh,
    and the two decision records are joined by it."""

    remediation: Remediation
    context_id: str
    hints: tuple[RemediationHint, ...] = ()
    reason: str = REASON

    @property
    def urls(self) -> tuple[str, ...]:
        """The `url` hints: pages a person opens to fix the denial (an approval, a connection)."""
        return tuple(h.url for h in self.hints if h.type == "url" and h.url is not None)

    @property
    def authorization_details(self) -> tuple[Mapping[str, Any], ...]:
        """Every RFC 9396 `authorization_details` entry a new credential should carry."""
        return tuple(d for h in self.hints for d in h.authorization_details)

    def to_dict(self) -> dict[str, Any]:
        return envelope_json(self.remediation, self.context_id, self.hints, self.reason)

    def to_meta(self) -> dict[str, Any]:
        """The result `_meta` entry that carries this envelope."""
        return {AUTHORIZATION_META_KEY: self.to_dict()}

    @classmethod
    def from_meta(cls, meta: Any) -> AuthorizationDenial | None:
        """The envelope in a result's (or a JSON-RPC error data's) `_meta`; None when there is
        none, and None with a warning when it is malformed: a client never acts on garbage."""
        if not isinstance(meta, Mapping) or AUTHORIZATION_META_KEY not in meta:
            return None
        try:
            return parse(meta[AUTHORIZATION_META_KEY])
        except ValueError as exc:
            log.warning("ignored a malformed authorization envelope (SEP-2643): %s", exc)
            return None


def envelope_json(remediation: Remediation, context_id: str,
                  hints: tuple[RemediationHint, ...] = (), reason: str = REASON) -> dict[str, Any]:
    """An envelope's JSON value, as both sides write it (`AuthorizationDenial.to_dict`; a server's
    denial writes it straight from its parts)."""
    out: dict[str, Any] = {"reason": reason, "remediation": remediation.value,
                           "authorizationContextId": context_id}
    if hints:
        out["remediationHints"] = [h.to_dict() for h in hints]
    return out


def parse(value: Any) -> AuthorizationDenial:
    """An envelope from its JSON value; ValueError names the first problem. Unknown members are
    ignored (the format may grow); a hint only with `available`."""
    if not isinstance(value, Mapping):
        raise ValueError(f"the envelope must be an object, got {type(value).__name__}")
    reason = _text(value, "reason")
    raw = value.get("remediation")
    if raw not in ("available", "unavailable", "undisclosed") or not isinstance(raw, str):
        raise ValueError(f"'remediation' must be 'available', 'unavailable' or 'undisclosed', got "
                         f"{raw!r}")
    remediation = Remediation(raw)
    context_id = _text(value, "authorizationContextId", MAX_ID)
    raw_hints = value.get("remediationHints", [])
    if not isinstance(raw_hints, list) or len(raw_hints) > MAX_HINTS:
        raise ValueError(f"'remediationHints' must be a list of at most {MAX_HINTS} hints")
    if raw_hints and remediation is not Remediation.AVAILABLE:
        raise ValueError(f"hints come only with remediation 'available', not {remediation.value!r}")
    hints = tuple(_hint(h, i) for i, h in enumerate(raw_hints))
    return AuthorizationDenial(remediation, context_id, hints, reason)


def _text(value: Mapping[str, Any], key: str, limit: int = MAX_TEXT) -> str:
    text = value.get(key)
    if not isinstance(text, str) or not text or len(text) > limit:
        raise ValueError(f"{key!r} must be a non-empty string of at most {limit} characters, got "
                         f"{type(text).__name__}")
    return text


def _hint(value: Any, index: int) -> RemediationHint:
    where = f"remediationHints[{index}]"
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise ValueError(f"{where} must be an object with a string 'type'")
    kind = value["type"]
    try:
        if kind == "url":
            url = _text(value, "url")
            parts = urlsplit(url)
            if parts.scheme not in ("https", "http") or not parts.netloc:
                raise ValueError(f"'url' must be an http(s) URL, got scheme {parts.scheme!r}")
            return RemediationHint("url", url=url)
        if kind == "authorization_remediation":
            details = value.get("authorization_details")
            if not isinstance(details, list) or not details or len(details) > MAX_HINTS or not all(
                    isinstance(d, Mapping) and isinstance(d.get("type"), str) and d["type"]
                    for d in details):
                raise ValueError("'authorization_details' must be a list of RFC 9396 objects, each "
                                 "with a string 'type'")
            return RemediationHint(kind, authorization_details=tuple(dict(d) for d in details))
        if kind == "task":
            return RemediationHint("task", task_id=_text(value, "taskId", MAX_ID))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return RemediationHint(kind, raw=dict(value))


# Context IDs drawn 64 at a time from the OS's random source (one call of os.urandom costs as much
# as the rest of a denial's envelope); a child process starts with none of its parent's.
_IDS: list[str] = []
os.register_at_fork(after_in_child=_IDS.clear)


def new_context_id() -> str:
    """A fresh, random `authorizationContextId` (128 bits from the OS's random source)."""
    while True:
        try:
            return _IDS.pop()  # atomic: two threads never take one ID
        except IndexError:
            block = os.urandom(16 * 64).hex()
            _IDS.extend(["authzctx_" + block[i:i + 32] for i in range(0, len(block), 32)])


def context_id_for(outcomes: tuple[Outcome, ...]) -> str | None:
    """The context ID of a denial decided on these outcomes: a fresh one, or None when the only
    unmet requirements are quotas (a quota is not an authorization denial: no envelope, SPEC §15)."""
    for outcome in outcomes:
        if outcome.status is not Status.SATISFIED and not outcome.requirement.startswith(_QUOTA):
            return new_context_id()
    return None


def echoed(value: object) -> str | None:
    """A request's echoed context ID (`_meta[CONTEXT_ID_META_KEY]`) when it is well formed, else
    None: a malformed or huge echo is ignored (never recorded, nor logged raw)."""
    if type(value) is str and _ECHO.fullmatch(value):
        return value
    return None


def echo_of(meta: object) -> object:
    """The raw echo in a request's `_meta` (None when there is none); `echoed` validates it. On
    every call's path: a plain dict (what a request's `_meta` is) skips the Mapping check."""
    if meta.__class__ is dict:
        return meta.get(CONTEXT_ID_META_KEY)
    return meta.get(CONTEXT_ID_META_KEY) if isinstance(meta, Mapping) else None


def canonical_json(value: Any) -> str:
    """`value` as RFC 8785 canonical JSON: keys sorted by UTF-16 code units, no white space, numbers
    as ECMAScript prints them (`1.0` is `1`, `1E30` is `1e+30`), strings as UTF-8 with only the
    escapes JSON requires. Raises ValueError for what has no canonical form: NaN, an infinity, an
    integer beyond 2**53 - 1, a lone surrogate, a key that is not a string, a non-JSON value."""
    try:
        return rfc8785.dumps(value).decode("utf-8")
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


class ContextIds:
    """The context ID of each denied call, kept to echo once when the same call is made again
    (same tool, same arguments by RFC 8785), for `ttl` seconds, at most `maxsize` calls."""

    def __init__(self, ttl: float = 600.0, maxsize: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ids: TTLCache[tuple[str, str], str] = TTLCache(maxsize, ttl, timer=clock)
        self._lock = threading.Lock()

    @staticmethod
    def _key(tool: str, arguments: Mapping[str, Any] | None) -> tuple[str, str] | None:
        try:
            return tool, canonical_json(dict(arguments or {}))
        except ValueError:
            return None

    def remember(self, tool: str, arguments: Mapping[str, Any] | None,
                 denial: AuthorizationDenial | None) -> None:
        """After a call: its denial's context ID (or nothing, for an allowed or unenveloped call)."""
        key = self._key(tool, arguments)
        if key is None:
            return
        with self._lock:
            if denial is None:
                self._ids.pop(key, None)
            else:
                self._ids[key] = denial.context_id

    def echo(self, tool: str, arguments: Mapping[str, Any] | None,
             meta: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The request `_meta` for a call: `meta` plus the context ID of this call's last denial,
        if any (taken: echoed once). An ID the application set itself is kept."""
        key = self._key(tool, arguments)
        with self._lock:
            context_id = self._ids.pop(key, None) if key is not None else None
        if context_id is None:
            return dict(meta) if meta is not None else None
        return {CONTEXT_ID_META_KEY: context_id, **(meta or {})}
