"""What a server's refusal says (SPEC §17): its `WWW-Authenticate` Bearer challenge (RFC 6750 §3, RFC
9728 §5.1: `resource_metadata`, `scope`, `error`), parsed strictly and bounded, and the rule every
address the gateway learns from a server or an authorization server must keep: https, or http on a
loopback host (OAuth 2.1 §1.5; the MCP authorization spec).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEADER = 8192  # a longer challenge is not read at all
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 §5.6.2
_SCHEME = re.compile(rf"[ \t,]*({_TOKEN})(?=[ \t]|,|$)")
_PARAM = re.compile(rf'[ \t]*({_TOKEN})[ \t]*=[ \t]*(?:"((?:[^"\\]|\\.)*)"|({_TOKEN}))[ \t]*(?:,|$)')
_TOKEN68 = re.compile(r"[ \t]*[A-Za-z0-9\-._~+/]+=*[ \t]*(?:,|$)")
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3


@dataclass(frozen=True)
class Challenge:
    """A Bearer challenge: its `error`, the `scope` it asks for (None: it names none) and where
    the server's protected resource metadata is (None: not said)."""

    error: str | None = None
    scope: tuple[str, ...] | None = None
    resource_metadata: str | None = None

    @property
    def insufficient_scope(self) -> bool:
        """A step-up: the token is good, and the server wants more scope for this request."""
        return self.error == "insufficient_scope" and bool(self.scope)


def bearer_challenge(header: str | None) -> Challenge | None:
    """The Bearer challenge of a `WWW-Authenticate` value (RFC 9110 §11.6.1: challenges, each a
    scheme and its parameters), or None when there is none that can be read."""
    if header is None or len(header) > MAX_HEADER:
        return None
    for scheme, params in _challenges(header):
        if scheme.lower() == "bearer":
            return Challenge(params.get("error"), scopes(params.get("scope")),
                             params.get("resource_metadata"))
    return None


def scopes(value: str | None) -> tuple[str, ...] | None:
    """A space-separated scope (RFC 6749 §3.3), in order, each once; None when absent or unusable."""
    if value is None:
        return None
    found = tuple(dict.fromkeys(value.split()))
    if not found or not all(_SCOPE_TOKEN.fullmatch(s) for s in found):
        return None
    return found


def _challenges(header: str) -> list[tuple[str, dict[str, str]]]:
    found: list[tuple[str, dict[str, str]]] = []
    at = 0
    while at < len(header):
        scheme = _SCHEME.match(header, at)
        if scheme is None:
            break  # not a challenge: what came before stands
        at = scheme.end()
        params: dict[str, str] = {}
        while (param := _PARAM.match(header, at)) is not None:
            name = param.group(1).lower()
            quoted = param.group(2)
            value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else param.group(3)
            params.setdefault(name, value)  # RFC 9110: each name at most once; the first counts
            at = param.end()
        if not params and (token68 := _TOKEN68.match(header, at)) is not None:
            at = token68.end()
        found.append((scheme.group(1), params))
        rest = header[at:].lstrip(" \t,")
        at = len(header) - len(rest)
    return found


def is_loopback(host: str | None) -> bool:
    """A host on this machine: `localhost` (RFC 6761 §6.3) or a loopback address."""
    if not host:
        return False
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def unsafe(url: object) -> str | None:
    """Why `url` may not be used to reach an authorization server or a resource's metadata (None:
    it may): an absolute https URL, or http on a loopback host; no credentials in it, no fragment."""
    if not isinstance(url, str) or not url:
        return "not a URL"
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        return "not a URL"
    if parts.scheme not in ("http", "https") or not host:
        return "not an absolute http(s) URL"
    if parts.username is not None or parts.password is not None or parts.fragment:
        return "carries credentials or a fragment"
    if parts.scheme == "http" and not is_loopback(host):
        return "http where https is required (only a loopback host may use http)"
    return None
