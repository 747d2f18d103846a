"""Runs every ```python example of README.md, docs/library.md, docs/resolvers.md and
docs/operations.md.

Convention: a block fenced ```python is a whole program. It runs on its own, in a fresh module
namespace (as `__main__`), from the repository root, and checks itself with `assert` lines (every
block in the docs/ pages has at least one); async examples call `asyncio.run` themselves. Printed
output is not checked. Blocks fenced ```py-norun, or in any other language, are shown to the reader
and never run.
"""

from __future__ import annotations

import re
import runpy
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SELF_CHECKING = ("docs/library.md", "docs/resolvers.md", "docs/operations.md")
DOCUMENTS = ("README.md", *SELF_CHECKING)
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Example:
    """One runnable block: where it is (its first code line) and its code, dedented."""

    document: str
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.document}:{self.line}"


def fenced_blocks(text: str) -> list[tuple[str, int, str]]:
    """Every fenced block as (info word, first code line number, code)."""
    blocks: list[tuple[str, int, str]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        index += 1
        if opening is None:
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        words = opening["info"].split()
        info = words[0] if words else ""
        start, body = index + 1, []
        while index < len(lines):
            line = lines[index]
            index += 1
            stripped = line.strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                break
            # A block inside a list item is indented as a whole: drop the fence's indentation.
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
        blocks.append((info, start, "\n".join(body) + "\n"))
    return blocks


def examples() -> list[Example]:
    found: list[Example] = []
    for document in DOCUMENTS:
        path = ROOT / document
        if not path.exists():
            continue
        for info, line, code in fenced_blocks(path.read_text(encoding="utf-8")):
            if info == "python":
                found.append(Example(document, line, code))
    return found


EXAMPLES = examples()


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_runs(example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "example.py"
    script.write_text(example.code, encoding="utf-8")
    monkeypatch.chdir(ROOT)
    # The examples rely on the policy's own labels, as a user's fresh shell would.
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    try:
        namespace = runpy.run_path(str(script), run_name="__main__")
    except Exception as exc:
        raise AssertionError(f"{where(example, script, exc)}: {type(exc).__name__}: {exc}") from exc
    assert namespace["__name__"] == "__main__"


def where(example: Example, script: Path, exc: BaseException) -> str:
    """The document line an example failed at: its deepest frame inside the example's code."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(script)]
    line = example.line + (lines[-1] - 1 if lines and lines[-1] else 0)
    return f"{example.document}:{line}"


@pytest.mark.parametrize("document", SELF_CHECKING)
def test_every_docs_example_checks_itself(document: str) -> None:
    mine = [e for e in EXAMPLES if e.document == document]
    assert mine, f"{document} has no ```python example"
    unchecked = [e.name for e in mine if not re.search(r"^\s*assert\b", e.code, re.MULTILINE)]
    assert unchecked == []


def test_blocks_are_found_as_a_reader_sees_them() -> None:
    text = ("# t\n```python\nx = 1\n```\n\n```py-norun\nboom()\n```\n"
            "- item\n\n  ```python\n  assert True\n  ```\n````python\n```\ny = 2\n````\n")
    blocks = fenced_blocks(text)
    assert blocks == [("python", 3, "x = 1\n"), ("py-norun", 7, "boom()\n"),
                      ("python", 12, "assert True\n"), ("python", 15, "```\ny = 2\n")]
