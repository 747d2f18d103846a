"""An OAuth 2.0 token endpoint as the gateway's client uses it (RFC 6749 §3.2): a form POSTed with
the client's authentication (`client_secret_basic`, `client_secret_post`, or `none` for a public
client: its id in the form), and the answer sorted into a JSON object (200), a refusal about the
grant (`NoCredentialError`: the caller has no credential), or a failure (`CredentialBackendError`:
down, slow, garbage, or our own client refused).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx2

from ..errors import CredentialBackendError, NoCredentialError
from .fetch import send
from .settings import Client

# Errors about the grant itself (RFC 6749 §5.2, RFC 8693 §2.2.2, RFC 8707): this caller gets
# nothing. Any other error (invalid_client, unauthorized_client, invalid_request, ...) is the
# gateway's own configuration failing, never blamed on the caller.
REFUSALS = frozenset({"invalid_grant", "invalid_target", "invalid_scope", "access_denied"})
_CODE = re.compile(r"[\x20-\x21\x23-\x5b\x5d-\x7e]{1,64}")  # RFC 6749 §5.2's error characters
_TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: safe in a header
MAX_TOKEN_BYTES = 16384


class TokenEndpoint:
    """POSTs token requests for one client at one endpoint, each within `timeout` seconds."""

    def __init__(self, url: str, client: Client, timeout: float, *,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.url = url
        self.client = client
        self.timeout = timeout
        self._transport = transport

    async def request(self, form: Mapping[str, str]) -> dict[str, Any]:
        """The JSON object a successful request answers (HTTP 200)."""
        data = dict(form)
        headers: dict[str, str] = {}
        client = self.client
        if client.auth == "none":  # RFC 6749 §3.2.1: a public client names itself
            data["client_id"] = client.client_id
        elif client.auth == "client_secret_post":
            data["client_id"] = client.client_id
            data["client_secret"] = client.client_secret
        else:  # RFC 6749 §2.3.1: each part form-encoded before base64
            pair = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        answer = await send("POST", self.url, timeout=self.timeout, form=data, headers=headers,
                            transport=self._transport)
        body = answer.body
        if answer.status == 200:
            if not isinstance(body, dict):
                raise CredentialBackendError(f"token endpoint {self.url} answered 200 without a JSON "
                                             "object")
            return body
        code = body.get("error") if isinstance(body, dict) else None
        if not isinstance(code, str) or not _CODE.fullmatch(code):
            raise CredentialBackendError(f"token endpoint {self.url} answered HTTP {answer.status}")
        if answer.status == 400 and code in REFUSALS:
            raise NoCredentialError(f"the authorization server refused: {code}")
        raise CredentialBackendError(f"token endpoint {self.url} answered HTTP {answer.status} "
                                     f"({code})")


def bearer_of(answer: dict[str, Any], where: str, *, expiry_required: bool) -> tuple[str, int | None]:
    """The access token of a token answer (RFC 6749 §5.1) and its lifetime in seconds (None when
    the answer gives none and none is required). Anything else is garbage: CredentialBackendError."""
    def garbage(problem: str) -> CredentialBackendError:
        return CredentialBackendError(f"token endpoint {where} answered without {problem}")

    access_token = answer.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise garbage("an access_token")
    if len(access_token) > MAX_TOKEN_BYTES or not _TOKEN.fullmatch(access_token):
        raise garbage("a usable access_token (printable, at most 16 KiB)")
    token_type = answer.get("token_type")
    if not isinstance(token_type, str) or token_type.lower() != "bearer":  # compared without case
        raise garbage("token_type Bearer")
    expires_in = answer.get("expires_in")
    if expires_in is None and not expiry_required:
        return access_token, None
    if expires_in.__class__ is not int or expires_in <= 0:
        raise garbage("a positive whole expires_in")
    return access_token, expires_in
