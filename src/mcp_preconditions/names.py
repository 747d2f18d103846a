"""Diagnostics for policy tool names: a `[tools.NAME]` entry that nearly matches a tool the host has.

Decisions stay exact (SPEC §2): `[tools.Launch_Rocket]` never applies to `launch_rocket`. But such an
entry silently applies to nothing and leaves the real tool less guarded than its author meant, so a
host that knows its tools refuses it. A near miss is a different string with the same *skeleton*:
compatibility-normalised, case-folded, with white space and invisible characters removed and
common Cyrillic and Greek look-alikes read as the Latin letters they imitate.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

# Letters that render like Latin ones in common fonts (Unicode's confusables, the usual subset).
_LOOK_ALIKES = str.maketrans({
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
    "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "ԁ": "d", "ԛ": "q", "ԝ": "w",
    "ѵ": "v", "ӏ": "l", "ɡ": "g",
    # Greek
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "ω": "w",
    # Latin look-alikes of digits and separators
    "ı": "i", "‐": "-", "‑": "-", "‒": "-", "–": "-", "—": "-", "−": "-", "＿": "_",
})


def skeleton(name: str) -> str:
    """What a name looks like to a reader: equal skeletons, different strings = a near miss."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = "".join(c for c in text if not (c.isspace() or unicodedata.category(c) in ("Cf", "Cc")))
    return unicodedata.normalize("NFKC", text.translate(_LOOK_ALIKES))


@dataclass(frozen=True, slots=True)
class NameFindings:
    """`near_misses`: (policy name, the host's tool it imitates) pairs; `unmatched`: policy names
    that match no tool and resemble none."""

    near_misses: tuple[tuple[str, str], ...]
    unmatched: tuple[str, ...]


def check_tool_names(policy_names: Iterable[str], tool_names: Iterable[str]) -> NameFindings:
    """Compare the policy's `[tools.NAME]` keys with the tools a host actually has."""
    tools = list(dict.fromkeys(tool_names))
    exact = set(tools)
    by_skeleton: dict[str, list[str]] = {}
    for tool in tools:
        by_skeleton.setdefault(skeleton(tool), []).append(tool)
    near: list[tuple[str, str]] = []
    unmatched: list[str] = []
    for name in policy_names:
        if name in exact:
            continue
        twins = by_skeleton.get(skeleton(name))
        if twins:
            near.extend((name, twin) for twin in twins)
        else:
            unmatched.append(name)
    return NameFindings(tuple(near), tuple(unmatched))


def near_miss_message(policy_name: str, tool: str) -> str:
    """One problem line, both names escaped so invisible differences show."""
    return (f"tools.{_shown(policy_name)}: names no tool, but nearly matches the tool "
            f"{_shown(tool)} (names are compared exactly; a typo here would leave that tool "
            f"less guarded than the policy says)")


def _shown(name: str) -> str:
    """The name quoted with every non-printable-ASCII character escaped (`\\u043e`)."""
    return '"' + "".join(c if c.isascii() and c.isprintable() and c not in '"\\'
                         else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"
                         for c in name) + '"'
