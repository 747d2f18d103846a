"""JWT access-token verification (RFC 9068) with pyjwt: header rules first (algorithm allow-list,
never `none`, `typ`), then the signature with a key of the right type, then `iss`, `aud`, `exp`
(all three required), `nbf` and `iat`. Failures are TokenErrors whose text never holds the token.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import jwt

from ..errors import TokenError
from ..policy.model import Auth
from ..principal import Principal
from .claims import check_audience, check_issuer, check_times
from .keys import KeySet, VerificationKey, key_label, quote

_ALGORITHMS = jwt.algorithms.get_default_algorithms()
_REQUIRED = ("iss", "aud", "exp")  # RFC 9068 §2.2; the others are checked when present


def base64url_decode(segment: str) -> bytes:
    """Strict base64url (RFC 7515 §2): `=` padding, characters outside the alphabet and
    non-canonical encodings are errors, so one token has exactly one spelling (and one cache key)."""
    if "=" in segment:  # JWS compact serialization is unpadded; `sig=` and `sig==` are other tokens
        raise ValueError("base64url padding is not allowed in a JWT")
    decoded = base64.b64decode(segment + "=" * (-len(segment) % 4), altchars=b"-_", validate=True)
    if base64.urlsafe_b64encode(decoded).rstrip(b"=") != segment.encode("ascii"):
        raise ValueError("not canonical base64url")
    return decoded


def jwt_header(token: str) -> dict[str, Any] | None:
    """The JOSE header of a compact JWS: three dot-separated parts, the first base64url JSON (an
    object). None when the token is not shaped like a JWT (then it may be an opaque token)."""
    if token.count(".") != 2:
        return None
    try:
        header = json.loads(base64url_decode(token[:token.index(".")]))
    except (ValueError, TypeError, RecursionError):  # binascii/Unicode errors are ValueErrors
        return None
    return header if isinstance(header, dict) else None


def _media_type(typ: str) -> str:
    """RFC 7515 §4.1.9: `typ` compares case-insensitively, and `application/` may be omitted."""
    typ = typ.lower()
    return typ[len("application/"):] if typ.startswith("application/") else typ


class JwtVerifier:
    """Verifies JWT access tokens against one issuer's keys and the policy's `[auth]` settings."""

    def __init__(self, settings: Auth, keys: KeySet, *, clock: Callable[[], float] = time.time) -> None:
        if settings.issuer is None or settings.audience is None:
            raise ValueError("JWT verification needs auth.issuer and auth.audience")
        self.keys = keys
        self._issuer = settings.issuer
        aud = settings.audience
        self._audiences = frozenset([aud] if isinstance(aud, str) else aud)
        self._allowed = frozenset(settings.algorithms)
        self._allowed_text = ", ".join(settings.algorithms)
        self._leeway = float(settings.leeway_seconds)
        self._typ = _media_type(settings.require_typ) if settings.require_typ else None
        self._clock = clock

    async def verify(self, token: str, header: dict[str, Any]) -> Principal:
        """The verified principal of `token` (whose parsed header is `header`); raises TokenError for
        a bad token and AuthBackendError when the signing keys cannot be fetched."""
        alg, kid = self.check_header(header)
        candidates = await self.keys.keys_for(kid)
        claims = self.check_signature(token, alg, kid, candidates)
        self.check_claims(claims)
        return Principal.from_claims(claims, kind="jwt")

    def check_header(self, header: dict[str, Any]) -> tuple[str, str | None]:
        alg = header.get("alg")
        if not isinstance(alg, str) or not alg:
            raise TokenError("token header has no 'alg'")
        if alg.lower() == "none":
            raise TokenError("algorithm 'none' is never accepted (unsigned token)")
        if alg not in self._allowed:
            raise TokenError(f"algorithm {quote(alg)} is not allowed (allowed: {self._allowed_text})")
        if self._typ is not None:
            typ = header.get("typ")
            if not isinstance(typ, str) or _media_type(typ) != self._typ:
                shown = quote(typ) if typ is not None else "missing"
                raise TokenError(f"token type (typ) is {shown}, expected '{self._typ}'")
        if "b64" in header:  # RFC 7797 unencoded payloads are not access tokens
            raise TokenError("token header 'b64' is not supported")
        if "crit" in header:  # RFC 7515 §4.1.11: unknown critical extensions must be rejected
            crit = header["crit"]
            names = ", ".join(quote(c) for c in crit[:5]) if isinstance(crit, list) else quote(crit)
            raise TokenError(f"token header marks extension(s) {names} critical; none are supported")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenError("token header 'kid' is not a string")
        return alg, kid

    def check_signature(self, token: str, alg: str, kid: str | None,
                        candidates: Sequence[VerificationKey]) -> dict[str, Any]:
        """The claims of `token` once one candidate key verifies its signature.

        pyjwt's algorithm objects verify; the token is split and decoded here once (its header was
        parsed by `jwt_header`), which keeps a first-seen token close to a bare `jwt.decode`."""
        if not candidates:
            raise TokenError(f"{key_label(kid)} not found {self.keys.location}")
        algorithm = _ALGORITHMS.get(alg)
        if algorithm is None:
            raise TokenError(f"algorithm {quote(alg)} is not supported by this installation")
        signing_input, _, crypto = token.rpartition(".")
        try:
            message = signing_input.encode("ascii")
            payload = base64url_decode(signing_input[signing_input.index(".") + 1:])
            signature = base64url_decode(crypto)
        except ValueError:  # binascii.Error and UnicodeError are ValueErrors
            raise TokenError("token is not a well-formed JWT (a part is not base64url)") from None
        unfit: str | None = None
        for key in candidates:
            why = key.unfit_for(alg)
            if why is not None:  # never let an RSA/EC key verify another family (key confusion)
                unfit = why
                continue
            try:
                verified = algorithm.verify(message, key.key, signature)
            except (jwt.PyJWTError, ValueError, TypeError):
                verified = False
            if verified:
                return _claims_of(payload)
        if unfit is not None and all(key.unfit_for(alg) for key in candidates):
            raise TokenError(f"{key_label(kid)} {unfit}")
        raise TokenError("signature verification failed")

    def check_claims(self, claims: dict[str, Any]) -> None:
        for name in _REQUIRED:
            if name not in claims:
                raise TokenError(f"token has no '{name}' claim")
        check_times(claims, self._clock(), self._leeway)
        check_issuer(claims, self._issuer)
        check_audience(claims, self._audiences)


def _claims_of(payload: bytes) -> dict[str, Any]:
    try:
        claims = json.loads(payload)
    except (ValueError, RecursionError):  # deep nesting within the size limit must not escape
        raise TokenError("token payload is not JSON") from None
    if not isinstance(claims, dict):
        raise TokenError("token payload is not a JSON object")
    return claims
