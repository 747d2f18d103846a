"""Tokens at rest, encrypted: AES-256-GCM with the configured 32-byte key, a fresh 96-bit nonce per
seal, and the owner's name as associated data, so a sealed value moved to another caller or server,
or changed in one bit, does not open (`SealError`).
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import SealError

VERSION = b"\x01"
NONCE_BYTES = 12
KEY_BYTES = 32


def key_from_text(text: str) -> bytes:
    """A configured key: standard or URL-safe base64 of exactly 32 bytes; ValueError otherwise."""
    cleaned = text.strip()
    try:
        raw = base64.b64decode(cleaned.replace("-", "+").replace("_", "/") + "=" * (-len(cleaned) % 4),
                               validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"decodes to {len(raw)} bytes, not {KEY_BYTES} (make one with "
                         "`openssl rand -base64 32`)")
    return raw


class Sealer:
    """Seals and opens byte strings for one owner label (`context`) with one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"an AES-256-GCM key is {KEY_BYTES} bytes, not {len(key)}")
        self._aead = AESGCM(key)

    def seal(self, plain: bytes, context: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return VERSION + nonce + self._aead.encrypt(nonce, plain, VERSION + context)

    def open(self, sealed: bytes, context: bytes) -> bytes:
        if len(sealed) < 1 + NONCE_BYTES + 16 or sealed[:1] != VERSION:
            raise SealError("not a sealed value of this version")
        nonce = sealed[1:1 + NONCE_BYTES]
        try:
            return self._aead.decrypt(nonce, sealed[1 + NONCE_BYTES:], VERSION + context)
        except InvalidTag:
            raise SealError("does not open with this key for this owner") from None

    def __repr__(self) -> str:
        return "Sealer(<key redacted>)"
