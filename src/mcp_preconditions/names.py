"""Diagnostics for policy tool names: a `[tools.NAME]` entry that nearly matches a tool the host has.

Decisions stay exact (SPEC §2): `[tools.Launch_Rocket]` never applies to `launch_rocket`. But such an
entry silently applies to nothing and leaves the real tool less guarded than its author meant, so a
host that knows its tools refuses it. A policy name that is not exactly one of the host's tools is a
near miss of a tool when their *skeletons* (compatibility-normalised, case-folded, white space and
invisible characters removed, common Cyrillic and Greek look-alikes read as the Latin letters they
imitate) are equal once the separators `-`, `_` and `.` are removed too (`write-file`, `writefile`,
`Write.File` for `write_file`), or are one edit apart: one character inserted, deleted or
substituted, or two adjacent ones swapped (`wirte_file`). Against false alarms, the edit rule needs
both names to keep at least EDIT_MIN_LENGTH characters, and changing one digit for another is no
edit (`report_v2` is not a typo of `report_v1`).
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger("mcp_preconditions.policy")

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


# The edit rule applies only when both squashed names have at least this many characters: among
# short names one edit is often another real word (`read`/`head`, `list`/`lint`).
EDIT_MIN_LENGTH = 5
_SEPARATORS = str.maketrans("", "", "-_.")


def squashed(name: str) -> str:
    """The skeleton without separators: names equal here differ only in case, look-alikes, white
    space, invisible characters or `-`/`_`/`.`."""
    return skeleton(name).translate(_SEPARATORS)


def one_edit_apart(a: str, b: str) -> bool:
    """Whether two different strings are one insertion, deletion, substitution (not of a digit by
    a digit) or adjacent transposition apart."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    if len(a) != len(b):  # one inserted (or deleted) character at i
        longer, shorter = (a, b) if len(a) > len(b) else (b, a)
        return longer[i + 1:] == shorter[i:]
    if a[i + 1:] == b[i + 1:]:  # one substituted character
        return not (a[i].isdigit() and b[i].isdigit())
    return a[i + 2:] == b[i + 2:] and a[i] == b[i + 1] and a[i + 1] == b[i]


@dataclass(frozen=True, slots=True)
class NameFindings:
    """`near_misses`: (policy name, the host's tool it imitates) pairs; `unmatched`: policy names
    that match no tool and resemble none."""

    near_misses: tuple[tuple[str, str], ...]
    unmatched: tuple[str, ...]


class _HostTools:
    """The host's tools indexed for the near-miss rules: by squashed name, and by its length."""

    def __init__(self, tools: list[str]) -> None:
        self.exact = set(tools)
        self.by_squash: dict[str, list[str]] = {}
        for tool in tools:
            self.by_squash.setdefault(squashed(tool), []).append(tool)
        self.by_length: dict[int, list[str]] = {}
        for squash in self.by_squash:
            if len(squash) >= EDIT_MIN_LENGTH:
                self.by_length.setdefault(len(squash), []).append(squash)

    def twins(self, name: str) -> list[str]:
        """The tools `name` nearly matches, in the host's order."""
        squash = squashed(name)
        found = list(self.by_squash.get(squash, ()))
        if len(squash) >= EDIT_MIN_LENGTH:
            for length in (len(squash) - 1, len(squash), len(squash) + 1):
                for other in self.by_length.get(length, ()):
                    if one_edit_apart(squash, other):
                        found += self.by_squash[other]
        return found


def check_tool_names(policy_names: Iterable[str], tool_names: Iterable[str]) -> NameFindings:
    """Compare the policy's `[tools.NAME]` keys with the tools a host actually has."""
    host = _HostTools(list(dict.fromkeys(tool_names)))
    near: list[tuple[str, str]] = []
    unmatched: list[str] = []
    for name in policy_names:
        if name in host.exact:  # an exact name is never a near miss of another tool
            continue
        twins = host.twins(name)
        if twins:
            near.extend((name, twin) for twin in twins)
        else:
            unmatched.append(name)
    return NameFindings(tuple(near), tuple(unmatched))


def near_misses(policy_names: Iterable[str], tools: Mapping[str, str]) -> list[tuple[str, str]]:
    """The policy's `[tools.NAME]` keys that nearly match one of a server's tools, as (policy name,
    tool) pairs: the rule of `check_tool_names`, hosted servers and gateways alike. `tools` maps
    the name each tool is shown and decided under to the name its server knows it by: a policy
    entry for a server's own name of a tool it shows under another (a prefix) is a near miss too,
    as it would guard nothing. A name that is exactly one of the tools is never one."""
    names = [n for n in policy_names if n not in tools]
    missing = set(names)
    return [*check_tool_names(names, tools).near_misses,
            *((own, shown) for shown, own in tools.items() if own != shown and own in missing)]


def host_problems(source: str, policy_names: Iterable[str], tools: Iterable[str]) -> tuple[str, ...]:
    """A policy's `[tools.NAME]` keys against one server's own tool names: a problem line for each
    near miss (the server refuses that policy), and a warning logged for each key that matches
    nothing at all (`source`: the policy file, named in both)."""
    host = {name: name for name in tools}
    names = list(policy_names)
    near = near_misses(names, host)
    nearly = {name for name, _ in near}
    for name in names:
        if name not in host and name not in nearly:
            log.warning("%s: tools.%s: names no tool of this server", source, name)
    return tuple(near_miss_message(name, tool) for name, tool in near)


def unusable_line(where: str, problems: Iterable[str]) -> str:
    """The operator's one log line for a policy a server refuses (every adapter's): `where` names
    the policy file or the gateway's server ("server fs"), `problems` are `near_miss_message`s."""
    return (f"{where}: the policy nearly matches this server's tools; every call is refused until "
            f"it is fixed: {'; '.join(problems)}")


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
