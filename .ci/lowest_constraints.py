"""The lowest versions pyproject.toml's ranges allow, as a pip constraints file: `make test`'s lowest
pass installs with it (SPEC §9, "In the user's own stack"), so every lower bound written there is one
a test ran on. Usage: `python .ci/lowest_constraints.py pyproject.toml EXTRA,EXTRA... > FILE`.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# The specifier operators that name a version the range starts at (`>` names one it excludes).
_LOWER = ("==", ">=", "~=", "===")


class BoundError(Exception):
    """A range with no lowest version, two ranges with none in common, or an extra that is not there."""


def requirements(project: dict[str, Any], extras: Iterable[str]) -> list[Requirement]:
    """The core dependencies and those of `extras` that apply to this interpreter (a requirement on
    the project itself, `name[extra]`, adds that extra's)."""
    name = canonicalize_name(str(project.get("name", "")))
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    found: list[Requirement] = []
    pending = [("", str(line)) for line in project.get("dependencies", [])]
    seen: set[str] = set()
    for extra in extras:
        pending += _extra(optional, extra, seen)
    while pending:
        extra, line = pending.pop(0)
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise BoundError(f"{line!r}: {str(exc).splitlines()[0]}") from None
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        if canonicalize_name(requirement.name) == name:
            for inner in sorted(requirement.extras):
                pending += _extra(optional, inner, seen)
            continue
        found.append(requirement)
    return found


def _extra(optional: dict[str, list[str]], extra: str, seen: set[str]) -> list[tuple[str, str]]:
    if extra in seen:
        return []
    if extra not in optional:
        raise BoundError(f"no extra {extra!r} (there are: {', '.join(sorted(optional))})")
    seen.add(extra)
    return [(extra, str(line)) for line in optional[extra]]


def lowest(found: Sequence[Requirement]) -> tuple[dict[str, Version], list[str]]:
    """Each package's lowest version that every range naming it admits, and the packages with no
    lower bound (left to the resolver)."""
    lows: dict[str, Version] = {}
    by_name: dict[str, list[Requirement]] = {}
    for requirement in found:
        by_name.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    for name, ranges in by_name.items():
        starts = [Version(spec.version) for r in ranges for spec in r.specifier if spec.operator in _LOWER]
        if any(spec.operator == ">" for r in ranges for spec in r.specifier):
            raise BoundError(f"{name}: '>' names no lowest version; write '>=' instead")
        if not starts:
            continue
        low = max(starts)
        for r in ranges:
            if not r.specifier.contains(low, prereleases=True):
                raise BoundError(f"{name}: the lowest version {low} is outside {r}")
        lows[name] = low
    unbounded = sorted(name for name in by_name if name not in lows)
    return lows, unbounded


def constraints(pyproject: Path, extras: Sequence[str]) -> str:
    project = tomllib.loads(pyproject.read_text("utf-8"))["project"]
    lows, unbounded = lowest(requirements(project, extras))
    lines = [f"# The lowest versions {pyproject.name}'s ranges allow (extras: {', '.join(extras)}).",
             *(f"{name}=={version}" for name, version in sorted(lows.items()))]
    if unbounded:
        lines.append(f"# no lower bound, left to the resolver: {', '.join(unbounded)}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: lowest_constraints.py PYPROJECT EXTRA[,EXTRA...]", file=sys.stderr)
        return 2
    extras = [extra for extra in argv[1].split(",") if extra]
    try:
        sys.stdout.write(constraints(Path(argv[0]), extras))
    except (OSError, tomllib.TOMLDecodeError, KeyError, BoundError) as exc:
        print(f"lowest_constraints.py: {argv[0]}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
