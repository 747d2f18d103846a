"""Print what `make test` measured, from its junit files: each tier's total, the files that took longest
and the N slowest tests (setup, call and teardown together, as junit counts a test's time).

    python .ci/slowest.py N JUNIT.xml [JUNIT.xml ...]

A missing or unreadable file is named and skipped (a tier that did not run leaves none).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FILES_SHOWN = 15


def cases(path: Path) -> list[tuple[str, float]]:
    """(test id, seconds) of every test case in one junit file."""
    root = ET.parse(path).getroot()
    found = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        found.append((name, float(case.get("time") or 0.0)))
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    shown, everything = int(argv[0]), []
    for name in argv[1:]:
        path = Path(name)
        try:
            found = cases(path)
        except (OSError, ET.ParseError) as exc:
            print(f"{name}: not read ({exc})")
            continue
        print(f"{path.stem}: {len(found)} tests, {sum(t for _, t in found):.0f} s of test time")
        everything += found
    by_file: dict[str, float] = {}
    for name, seconds in everything:
        module = name.split("::", 1)[0]
        by_file[module] = by_file.get(module, 0.0) + seconds
    print(f"\nthe {FILES_SHOWN} files that took longest (seconds, all their tests):")
    for module, seconds in sorted(by_file.items(), key=lambda f: -f[1])[:FILES_SHOWN]:
        print(f"{seconds:8.1f}  {module}")
    print(f"\nthe {shown} slowest tests (seconds):")
    for name, seconds in sorted(everything, key=lambda c: -c[1])[:shown]:
        print(f"{seconds:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
