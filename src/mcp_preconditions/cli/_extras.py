"""The optional extra each command needs: a command run without it says so in one line naming the
extra, exit 2, never a ModuleNotFoundError traceback (SPEC §9). What an extra brings is read from the
installed package's own metadata (pyproject.toml's `[project.optional-dependencies]`), never restated.
"""

from __future__ import annotations

import re
from importlib import metadata

# The commands that need more than the core, and the extra that brings it.
NEEDS = {"serve": "mcp", "demo": "mcp", "gateway": "mcp", "config": "mcp", "tools": "mcp",
         "explore": "explore", "pdp": "mcp"}
DISTRIBUTION = "mcp-preconditions"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


def needs_line(extra: str) -> str:
    """What a command without `extra` says (after `mcp-preconditions COMMAND: error: `)."""
    return (f"needs the '{extra}' extra, which is not installed: install mcp-preconditions with "
            f"[{extra}] (README.md, \"Install\")")


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


def missing_extra(command: str) -> str | None:
    """The extra `command` needs when some distribution of it is not installed, else None."""
    extra = NEEDS.get(command)
    if extra is None or all(_installed(name) for name in distributions(extra)):
        return None
    return extra


def extra_behind(command: str, exc: ModuleNotFoundError) -> str | None:
    """The extra `command` needs, when `exc` (raised while it ran) is a module of it missing, not
    one of this package's own (a bug, to be seen as one)."""
    extra = NEEDS.get(command)
    if extra is None or (exc.name or "").partition(".")[0] == "mcp_preconditions":
        return None
    return extra


__all__ = ["NEEDS", "distributions", "extra_behind", "missing_extra", "needs_line"]
