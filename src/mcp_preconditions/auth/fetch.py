"""Small, bounded HTTP reads for the auth backends: a JSON document with a total timeout and a size
cap, and issuer metadata discovery (OpenID Connect Discovery, then RFC 8414).

Every failure is an AuthBackendError with a readable reason; httpx2's exceptions never escape.
Connections use the package's one TLS context (`tls.py`: SSL_CERT_FILE / SSL_CERT_DIR).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2

from ..errors import AuthBackendError, NoDocumentError
from ..tls import client_context

MAX_DOCUMENT_BYTES = 1 << 20  # a JWKS or metadata document larger than 1 MiB is not one


def describe(exc: BaseException) -> str:
    """A short, token-free description of a transport failure."""
    text = str(exc)
    # By name: whichever HTTP library authlib picked (httpx2, else httpx), its classes may differ.
    if type(exc).__name__ == "ConnectError":
        return f"connection failed ({text})" if text else "connection failed"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def get_json(url: str, timeout: float) -> Any:
    """GET `url` and parse JSON; the whole exchange (connect, headers, body) within `timeout`."""
    try:
        async with asyncio.timeout(timeout):
            return await _get_json(url, timeout)
    except TimeoutError:
        raise AuthBackendError(f"{url} did not answer within {timeout:g} s") from None
    except httpx2.HTTPError as exc:
        raise AuthBackendError(f"cannot fetch {url}: {describe(exc)}") from None


async def _get_json(url: str, timeout: float) -> Any:
    async with httpx2.AsyncClient(timeout=timeout, verify=client_context(),
                                  follow_redirects=False) as client, \
            client.stream("GET", url, headers={"Accept": "application/json"}) as response:
        if response.status_code != 200:
            raise NoDocumentError(f"{url} answered HTTP {response.status_code}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_DOCUMENT_BYTES:
                raise AuthBackendError(f"{url} sent more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):
        raise NoDocumentError(f"{url} did not return JSON") from None


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer publishes its metadata: OpenID Connect Discovery 1.0 §4 appends the well-known
    path; RFC 8414 §3 inserts it between the host and the issuer's path."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    oidc = urlunsplit((parts.scheme, parts.netloc, f"{path}/.well-known/openid-configuration", "", ""))
    oauth = urlunsplit((parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}",
                        "", ""))
    return [oidc, oauth]


async def discover_jwks_uri(issuer: str, timeout: float) -> str:
    """The `jwks_uri` from the issuer's metadata, which must name exactly this issuer."""
    # Only a server that answered without a document is worth asking at the second address; one
    # that is unreachable or slow would just double the wait (get_json's other errors propagate).
    last: NoDocumentError | None = None
    for url in metadata_urls(issuer):
        try:
            doc = await get_json(url, timeout)
        except NoDocumentError as exc:
            last = exc
            continue
        if not isinstance(doc, dict):
            raise AuthBackendError(f"metadata at {url} is not a JSON object")
        if doc.get("issuer") != issuer:
            raise AuthBackendError(f"metadata at {url} names issuer {doc.get('issuer')!r}, "
                                   f"not {issuer!r}")
        jwks_uri = doc.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri:
            raise AuthBackendError(f"metadata at {url} has no 'jwks_uri'")
        return jwks_uri
    assert last is not None
    raise AuthBackendError(f"no metadata for issuer {issuer!r}: {last}")
