"""Proof Key for Code Exchange (RFC 7636) with S256, and the random values the flows need: a code
verifier of 43 characters (256 bits), its challenge, and unguessable ids for links and states.
"""

from __future__ import annotations

import base64
import hashlib
import secrets


def random_id() -> str:
    """256 random bits, URL-safe: a link, a `state`, a nonce, a verifier."""
    return secrets.token_urlsafe(32)


def challenge(verifier: str) -> str:
    """BASE64URL(SHA256(verifier)), unpadded (RFC 7636 §4.2, S256)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def digest(value: str) -> str:
    """What a store keys a secret value by (the value itself is never a key)."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
