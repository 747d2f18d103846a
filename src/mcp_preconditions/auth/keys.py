"""Signing keys for JWT verification: static JWKs/PEMs from the policy and a remote JWKS (`jwks_uri` or
issuer discovery), fetched with a short timeout and refetched on an unknown `kid` at most once per
`jwks_refetch_interval_seconds`, so random kids cannot make us hammer the issuer.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from ..errors import AuthBackendError
from .fetch import discover_jwks_uri, get_json

log = logging.getLogger("mcp_preconditions.auth")

JWKS_MAX_AGE_SECONDS = 3600.0  # refresh a JWKS this old (at most once per refetch interval)

_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521", "secp256k1": "secp256k1"}
_ALG_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521", "ES256K": "secp256k1"}


def key_type_for(alg: str) -> str:
    """The JWK `kty` an algorithm needs (RFC 7518): a key of any other type must never verify it."""
    if alg.startswith(("RS", "PS")):
        return "RSA"
    if alg.startswith("ES"):
        return "EC"
    if alg == "EdDSA":
        return "OKP"
    return "oct"


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """One public (or, for HMAC, secret) key, with what it may verify."""

    kid: str | None
    kty: str
    crv: str | None
    alg: str | None  # the JWK's declared `alg`, if any
    key: Any  # a cryptography public key, or bytes for `oct`

    def unfit_for(self, alg: str) -> str | None:
        """Why this key must not verify `alg` (None when it may): guards key confusion."""
        if self.alg is not None and self.alg != alg:
            return f"is declared for algorithm '{self.alg}', not '{alg}'"
        if self.kty != key_type_for(alg):
            return f"is an {self.kty} key, not usable with algorithm '{alg}'"
        curve = _ALG_CURVES.get(alg)
        if curve is not None and self.crv != curve:
            return f"is on curve {self.crv}, algorithm '{alg}' needs {curve}"
        return None


def key_from_jwk(jwk: Mapping[str, Any]) -> VerificationKey:
    """A VerificationKey from a JWK; raises ValueError with a readable reason."""
    kty = jwk.get("kty")
    if not isinstance(kty, str):
        raise ValueError("JWK has no 'kty'")
    kid = jwk.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise ValueError("JWK 'kid' is not a string")
    alg = jwk.get("alg")
    if alg is not None and not isinstance(alg, str):
        raise ValueError("JWK 'alg' is not a string")
    try:
        parsed = jwt.PyJWK(dict(jwk))
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise ValueError(f"unusable JWK: {exc}") from None
    crv = jwk.get("crv")
    return VerificationKey(kid, kty, crv if isinstance(crv, str) else None, alg, parsed.key)


def key_from_pem(pem: bytes) -> VerificationKey:
    """A VerificationKey (without kid) from a PEM public key; raises ValueError."""
    try:
        public = load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM public key ({exc})") from None
    if isinstance(public, rsa.RSAPublicKey):
        return VerificationKey(None, "RSA", None, None, public)
    if isinstance(public, ec.EllipticCurvePublicKey):
        return VerificationKey(None, "EC", _CURVES.get(public.curve.name, public.curve.name), None, public)
    if isinstance(public, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return VerificationKey(None, "OKP", None, None, public)
    raise ValueError(f"unsupported key type {type(public).__name__}")


def keys_from_jwks(document: Any, where: str) -> list[VerificationKey]:
    """The signature keys of a JWKS document; encryption keys and keys we cannot use are skipped."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise AuthBackendError(f"JWKS at {where} is malformed: no 'keys' list")
    found: list[VerificationKey] = []
    for index, jwk in enumerate(document["keys"]):
        # A JWKS publishes public keys: a symmetric (oct) one must never verify anything.
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig" or jwk.get("kty") == "oct":
            continue
        try:
            found.append(key_from_jwk(jwk))
        except ValueError as exc:
            log.info("JWKS at %s: skipping key %d: %s", where, index, exc)
    return found


class KeySet:
    """Static keys plus, optionally, a remote JWKS kept fresh under a refetch rate limit.

    Safe for concurrent use from threads and event loops: state changes happen under a lock, and
    concurrent refreshes on one event loop share a single fetch.
    """

    def __init__(self, static: Sequence[VerificationKey] = (), *, jwks_uri: str | None = None,
                 issuer: str | None = None, discovery: bool = False, timeout: float = 2.0,
                 refetch_interval: float = 10.0, timer: Callable[[], float] = time.monotonic) -> None:
        self._static = tuple(static)
        self._jwks_uri = jwks_uri
        self._issuer = issuer if discovery else None
        self.remote = jwks_uri is not None or self._issuer is not None
        self._timeout = timeout
        self._interval = refetch_interval
        self._timer = timer
        self._remote_keys: tuple[VerificationKey, ...] = ()
        self._loaded_at: float | None = None  # when the remote JWKS was last fetched successfully
        self._last_attempt: float | None = None
        self._last_error: str | None = None
        self._task: asyncio.Task[str | None] | None = None
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        """Where keys come from, for reasons: "at <JWKS URI>", or "in the policy's keys"."""
        if self._jwks_uri is not None:
            return f"at {self._jwks_uri}"
        if self._issuer is not None:
            return f"in the JWKS of {self._issuer}"
        return "in the policy's keys"

    def matching(self, kid: str | None) -> list[VerificationKey]:
        """Known keys for `kid`: the keys with that kid, else keys without a kid (PEMs); every key
        when the token names no kid."""
        every = (*self._remote_keys, *self._static)
        if kid is None:
            return list(every)
        named = [k for k in every if k.kid == kid]
        return named or [k for k in every if k.kid is None]

    async def keys_for(self, kid: str | None) -> list[VerificationKey]:
        """Keys that may have signed a token naming `kid`, fetching the remote JWKS when it was never
        loaded, is stale, or lacks `kid` (one fetch per call at most, rate-limited). Raises
        AuthBackendError when the keys are needed but cannot be fetched."""
        if not self.remote:
            return self.matching(kid)
        error: str | None = None
        attempted = self._loaded_at is None or self._timer() - self._loaded_at > JWKS_MAX_AGE_SECONDS
        if attempted:
            error = await self.refresh()
        found = self.matching(kid)
        if not attempted and _lacks(found, kid):
            error = await self.refresh()
            found = self.matching(kid)
        if self._loaded_at is None and not self._static:
            reason = error or self._last_error or f"no signing keys fetched yet ({self.location})"
            raise AuthBackendError(reason)
        if error is not None and _lacks(found, kid):
            raise AuthBackendError(f"{key_label(kid)} is not in the cached JWKS, and refetching it "
                                   f"failed: {error}")
        return found

    async def refresh(self) -> str | None:
        """Fetch the remote JWKS unless one was fetched less than the refetch interval ago; returns
        this attempt's error (None on success, or when rate-limited)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            task = self._task
            if task is None or task.done() or task.get_loop() is not loop:
                # A fetch running on another thread's loop cannot be awaited here: fetch alongside it.
                elsewhere = task is not None and not task.done()
                now = self._timer()
                recent = self._last_attempt is not None and now - self._last_attempt < self._interval
                if recent and not elsewhere:
                    return None
                self._last_attempt = now
                task = self._task = loop.create_task(self._fetch())
        return await asyncio.shield(task)

    async def _fetch(self) -> str | None:
        try:
            if self._jwks_uri is None:
                assert self._issuer is not None
                self._jwks_uri = await discover_jwks_uri(self._issuer, self._timeout)
            keys = keys_from_jwks(await get_json(self._jwks_uri, self._timeout), self._jwks_uri)
        except AuthBackendError as exc:
            with self._lock:
                self._last_error = f"signing keys unavailable: {exc}"
            log.warning("%s", self._last_error)
            return self._last_error
        with self._lock:
            self._remote_keys = tuple(keys)
            self._loaded_at = self._timer()
            self._last_error = None
        return None


def _lacks(found: list[VerificationKey], kid: str | None) -> bool:
    """True when no key was found, or none carries the token's kid (only kid-less fallbacks)."""
    return not found or (kid is not None and all(k.kid != kid for k in found))


def key_label(kid: str | None) -> str:
    """How a reason names the key a token asks for."""
    return f"signing key {quote(kid)}" if kid is not None else "a signing key (the token names no kid)"


def quote(value: object, limit: int = 64) -> str:
    """A value from a token, safe for a reason or a log line: quoted, escaped, bounded."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    escaped = text.encode("unicode_escape").decode("ascii").replace("'", "\\'")
    return f"'{escaped}'"
