"""Checks of the registered claims (`exp`, `nbf`, `iat`, `iss`, `aud`) shared by the JWT and the
introspection paths. Each failure raises TokenError with a reason a user can read.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from ..errors import TokenError
from .keys import quote

_URL_LIMIT = 160  # issuers and audiences are URLs: quote more of them than of a kid


def number(claims: Mapping[str, Any], name: str) -> float | None:
    """A NumericDate claim (RFC 7519 §2), or None when absent; anything else is a bad token."""
    value = claims.get(name)
    if value is None and name not in claims:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenError(f"token claim '{name}' is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise TokenError(f"token claim '{name}' is not a number") from None
    if not math.isfinite(number):
        raise TokenError(f"token claim '{name}' is not a number")
    return number


def check_times(claims: Mapping[str, Any], now: float, leeway: float) -> float | None:
    """`exp` (if present), `nbf` and `iat`, each with `leeway` seconds of clock skew; returns `exp`."""
    exp = number(claims, "exp")
    if exp is not None and now >= exp + leeway:
        raise TokenError(f"token expired {int(now - exp)} s ago")
    nbf = number(claims, "nbf")
    if nbf is not None and now + leeway < nbf:
        at = datetime.fromtimestamp(nbf, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        raise TokenError(f"token is not valid until {at} (nbf in {math.ceil(nbf - now)} s)")
    iat = number(claims, "iat")
    if iat is not None and now + leeway < iat:
        raise TokenError(f"token was issued in the future (iat in {math.ceil(iat - now)} s)")
    return exp


def check_issuer(claims: Mapping[str, Any], issuer: str) -> None:
    iss = claims.get("iss")
    if iss != issuer:
        raise TokenError(f"issuer {quote(iss, _URL_LIMIT)} is not {quote(issuer, _URL_LIMIT)}")


def check_audience(claims: Mapping[str, Any], audiences: Collection[str]) -> None:
    """`aud` (a string or an array of strings) must name one of `audiences`."""
    aud = claims.get("aud")
    values = [aud] if isinstance(aud, str) else aud
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TokenError("token claim 'aud' is not a string or an array of strings")
    if any(v in audiences for v in values):
        return
    shown = (quote(aud, _URL_LIMIT) if isinstance(aud, str)
             else "[" + ", ".join(quote(v, _URL_LIMIT) for v in values[:5]) + "]")
    wanted = sorted(audiences)
    expected = (quote(wanted[0], _URL_LIMIT) if len(wanted) == 1
                else "one of " + ", ".join(quote(v, _URL_LIMIT) for v in wanted))
    raise TokenError(f"audience {shown} is not {expected}")
