"""An approver's browser session on the approval pages (SPEC §15): the claims of the ID token their
sign-in returned, sealed (AES-GCM) in a short-lived cookie, and the CSRF token of a request's form,
bound to that cookie and that request (HMAC-SHA256 with the pages key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..credentials.sealing import Sealer
from ..credentials.signin import SESSION_SECONDS
from ..errors import FlowError, SealError
from ..principal import Identity, Principal

APPROVER_COOKIE = "mcp_preconditions_approver"
MAX_COOKIE_CHARS = 3800  # a browser keeps 4 KiB per cookie: an ID token with more claims is refused
_DROPPED = ("nonce", "at_hash", "c_hash", "s_hash", "exp", "iat", "auth_time")  # the sign-in's own
_CONTEXT = b"approver"


class ApproverSessions:
    """Seals and opens approvers' cookies with `key` (the pages key: replicas share it)."""

    def __init__(self, key: bytes, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self._sealer = Sealer(key)
        self._clock = clock

    def seal(self, claims: Mapping[str, Any]) -> str:
        """A cookie naming the person of these ID-token claims (less the sign-in's own) for
        SESSION_SECONDS; FlowError 400 when they are too many to keep in a cookie."""
        kept = {k: v for k, v in claims.items() if k not in _DROPPED}
        data = json.dumps({"claims": kept, "exp": self._clock() + SESSION_SECONDS}).encode()
        cookie = base64.urlsafe_b64encode(self._sealer.seal(data, _CONTEXT)).decode("ascii")
        if len(cookie) > MAX_COOKIE_CHARS:
            raise FlowError(400, "The sign-in's ID token has too many claims to keep.")
        return cookie

    def identity_of(self, cookie: str | None) -> Identity | None:
        """The approver a cookie names while it is valid; None for none, an expired or a forged
        one."""
        if not cookie:
            return None
        try:
            data = json.loads(self._sealer.open(base64.urlsafe_b64decode(cookie), _CONTEXT))
            if float(data["exp"]) <= self._clock():
                return None
            return Identity(Principal.from_claims(dict(data["claims"])))
        except (SealError, ValueError, KeyError, TypeError):
            return None

    def csrf(self, cookie: str, request_id: str) -> str:
        """The form token of one request's page, for the session of `cookie`."""
        mac = hmac.new(self._key, f"csrf|{cookie}|{request_id}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode("ascii").rstrip("=")

    def csrf_ok(self, cookie: str, request_id: str, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.csrf(cookie, request_id).encode())
