"""Where the sign-in issuer's endpoints are (`[auth.sign_in]`, an OpenID Connect provider): read
once from its metadata (OpenID Connect Discovery, then RFC 8414), which must name exactly that
issuer. A failed look-up is not remembered: the next request asks again. (A server's own
authorization server, for connected accounts, is found by authorization.py.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2

from ..auth.fetch import metadata_urls
from ..errors import CredentialBackendError
from .fetch import send


@dataclass(frozen=True)
class Endpoints:
    """An authorization server's endpoints the gateway uses."""

    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str | None = None


def is_http_url(value: object) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


class Discovery:
    """The endpoints of one authorization server: `fixed` when the config names them, else
    discovered from `issuer` on first use and kept."""

    def __init__(self, issuer: str | None, timeout: float, fixed: Endpoints | None = None, *,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        if fixed is None and issuer is None:
            raise ValueError("an issuer to discover, or the endpoints")
        self.issuer = issuer
        self._timeout = timeout
        self._found = fixed
        self._transport = transport

    async def endpoints(self) -> Endpoints:
        found = self._found
        if found is None:  # two first calls may both look: the answers are the same
            assert self.issuer is not None
            found = self._found = await self._discover(self.issuer)
        return found

    async def _discover(self, issuer: str) -> Endpoints:
        last = ""
        for url in metadata_urls(issuer):
            answer = await send("GET", url, timeout=self._timeout, transport=self._transport)
            if answer.status != 200 or not isinstance(answer.body, dict):
                last = f"{url} answered HTTP {answer.status}" + (
                    "" if answer.status != 200 else " without a JSON object")
                continue  # only a server that answered is worth asking at the other address
            return _endpoints(url, issuer, answer.body)
        raise CredentialBackendError(f"no metadata for issuer {issuer!r}: {last}")


def _endpoints(url: str, issuer: str, document: dict[str, Any]) -> Endpoints:
    if document.get("issuer") != issuer:  # RFC 8414 §3.3: a mix-up otherwise
        raise CredentialBackendError(f"metadata at {url} names issuer {document.get('issuer')!r}, "
                                     f"not {issuer!r}")
    found: dict[str, str] = {}
    for name in ("authorization_endpoint", "token_endpoint"):
        value = document.get(name)
        if not isinstance(value, str) or not is_http_url(value):
            raise CredentialBackendError(f"metadata at {url} has no usable {name!r}")
        found[name] = value
    jwks = document.get("jwks_uri")
    return Endpoints(found["authorization_endpoint"], found["token_endpoint"],
                     jwks if is_http_url(jwks) else None)
