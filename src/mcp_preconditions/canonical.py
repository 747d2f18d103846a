"""RFC 8785 canonical JSON, one definition: what an approval is bound to (approvals/lifecycle.py), a
denial's argument fingerprint (envelope.py), and whatever else must compare a call's arguments code
point for code point.
"""

from __future__ import annotations

from typing import Any

import rfc8785


def canonical_json(value: Any) -> str:
    """`value` as RFC 8785 canonical JSON: keys sorted by UTF-16 code units, no white space, numbers
    as ECMAScript prints them (`1.0` is `1`, `1E30` is `1e+30`), strings as UTF-8 with only the
    escapes JSON requires. Raises ValueError for what has no canonical form: NaN, an infinity, an
    integer beyond 2**53 - 1, a lone surrogate, a key that is not a string, a non-JSON value."""
    try:
        return rfc8785.dumps(value).decode("utf-8")
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
