"""Text as a reader sees it: the characters a terminal or a browser would not show as themselves
(controls, bidi overrides, zero-width and unassigned code points), found and written as escapes, so
a hostile name can neither forge a line nor reorder what is shown.
"""

from __future__ import annotations

import unicodedata

# Characters a terminal does not show as themselves: controls (Cc), formats such as the bidi
# overrides U+202A-U+202E and U+2066-U+2069 (Cf), lone surrogates (Cs), private-use and unassigned
# code points (Co, Cn), and line/paragraph separators (Zl, Zp).
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def hidden_characters(text: str) -> list[str]:
    """The characters of `text` a terminal would not show as themselves, as `U+XXXX`, in order."""
    if text.isascii() and text.isprintable():
        return []
    found = (f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in _HIDDEN)
    return list(dict.fromkeys(found))


def escape(text: str) -> str:
    """`text` with every hidden character written as a Python escape (`\\n`, `\\u202e`)."""
    if text.isascii() and text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if unicodedata.category(char) not in _HIDDEN:
            out.append(char)
        elif char in "\n\r\t":
            out.append(repr(char)[1:-1])
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                       else f"\\U{code:08x}")
    return "".join(out)
