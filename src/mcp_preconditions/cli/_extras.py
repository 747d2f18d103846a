"""The optional extra each command needs: a command run without it says so in one line naming the
extra, exit 2, never a ModuleNotFoundError traceback (SPEC §9); when only some of what the extra
brings is missing (another extra, or the user, installed the rest), the line names exactly what is
missing. What an extra brings is read from the installed package's own metadata (pyproject.toml's
`[project.optional-dependencies]`), never restated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import metadata

# The commands that need more than the core, and the extra that brings it.
NEEDS = {"serve": "mcp", "demo": "mcp", "gateway": "mcp", "config": "mcp", "tools": "mcp",
         "explore": "explore", "pdp": "mcp"}
DISTRIBUTION = "mcp-preconditions"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


def needs_line(extra: str, missing: Sequence[str] = ()) -> str:
    """What a command without `extra` says (after `mcp-preconditions COMMAND: error: `): the extra
    when nothing of it is installed, else the distributions (or module) of it that are `missing`."""
    where = f"install mcp-preconditions with [{extra}] (README.md, \"Install\")"
    if not missing:
        return f"needs the '{extra}' extra, which is not installed: {where}"
    named = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
    verb, pronoun = ("is", "it") if len(missing) == 1 else ("are", "them")
    return f"needs {named}, which {verb} not installed (the '{extra}' extra brings {pronoun}): {where}"


def distributions(extra: str) -> list[str]:
    """The distributions `extra` installs, from this package's metadata (none when the package's
    metadata cannot be read: run from a source tree, say)."""
    try:
        wanted = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    found = []
    for line in wanted:
        requirement, _, marker = line.partition(";")
        named, chosen = _NAME.match(requirement.strip()), _EXTRA.search(marker)
        if named is not None and chosen is not None and chosen[1] == extra:
            found.append(named[0])
    return found


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing(command: str) -> tuple[str, list[str]] | None:
    """The extra `command` needs and the distributions of it not installed (all of them: an empty
    list), or None when nothing is missing."""
    extra = NEEDS.get(command)
    if extra is None:
        return None
    wanted = distributions(extra)
    absent = [name for name in wanted if not _installed(name)]
    if not absent:
        return None
    return extra, [] if len(absent) == len(wanted) else absent


def extra_behind(command: str, exc: ModuleNotFoundError) -> str | None:
    """The extra `command` needs, when `exc` (raised while it ran) is a module of it missing, not
    one of this package's own (a bug, to be seen as one)."""
    extra = NEEDS.get(command)
    if extra is None or (exc.name or "").partition(".")[0] == "mcp_preconditions":
        return None
    return extra


__all__ = ["NEEDS", "distributions", "extra_behind", "missing", "needs_line"]
