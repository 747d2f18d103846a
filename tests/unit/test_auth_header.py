"""`credentials_from_authorization_header`: RFC 6750 Bearer tokens in, Credentials out; a malformed
header is denied with its own reason instead of passing as anonymous.
"""

from __future__ import annotations

import pytest

from mcp_preconditions import ANONYMOUS, Credentials, Guard, parse_policy
from mcp_preconditions.auth import (
    MALFORMED_HEADER,
    MalformedCredentials,
    credentials_from_authorization_header,
)


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc.def.ghi", "abc.def.ghi"),
    ("bearer abc", "abc"),
    ("BEARER a-b_c~d+e/f==", "a-b_c~d+e/f=="),
    ("  Bearer abc \t", "abc"),
])
def test_a_bearer_token_is_read(header: str, token: str) -> None:
    assert credentials_from_authorization_header(header) == Credentials(token=token)


def test_no_header_is_anonymous() -> None:
    assert credentials_from_authorization_header(None) is ANONYMOUS


@pytest.mark.parametrize("header", [
    "", "Bearer", "Bearer ", "Bearer  abc", "Bearer abc def", "Basic dXNlcjpwYXNz", "Token abc",
    "Bearerabc", "Bearer ab\u00e7", "Bearer a=b", "Bearer abc\r\nX-Injected: 1",
])
def test_a_malformed_header(header: str) -> None:
    credentials = credentials_from_authorization_header(header)
    assert isinstance(credentials, MalformedCredentials)
    assert credentials.token is None and credentials.principal is None
    assert credentials.failure == MALFORMED_HEADER == (
        "malformed Authorization header (expected 'Bearer <token>')")


async def test_a_malformed_header_denies_with_its_reason_without_token_verification() -> None:
    guard = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:oauth2"]}, entry_points=False)
    decision = await guard.check("t", credentials_from_authorization_header("Basic abc"))
    assert decision.allowed is False
    assert decision.outcomes[0].reason == MALFORMED_HEADER
