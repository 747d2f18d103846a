"""What a person is shown of a call they approve (SPEC §15), on the approval page and in a `self`
question alike: every character they could not see or could misread written as its JSON escape.
"""

from __future__ import annotations

import unicodedata

# Controls, format characters (the bidirectional overrides and isolates, zero-width ones), line
# and paragraph separators, spaces other than U+0020, private-use, surrogate and unassigned code
# points. (A new line is kept: pretty-printed JSON has them, and a string's are escaped already.)
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"))


def hidden(char: str) -> bool:
    """Whether a person could not see `char`, or could misread what follows it."""
    return char != " " and char != "\n" and unicodedata.category(char) in _HIDDEN


def escape(char: str) -> str:
    """`char` as JSON writes it escaped (`\\u202e`; beyond the BMP, a surrogate pair)."""
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every hidden character written as its JSON escape (within a JSON string, the
    same value)."""
    return "".join(escape(c) if hidden(c) else c for c in text)
