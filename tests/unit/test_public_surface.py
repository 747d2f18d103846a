"""The public surface says what is public (issue 31, item 4): every name the README and docs/ import
in their Python examples is exported, in `__all__`, by the module they import it from, and that
module is public (the package, a public subpackage, or an `integrations` module); `__version__` is
the installed distribution's.
"""

from __future__ import annotations

import ast
import importlib
import re
from importlib.metadata import version
from pathlib import Path

import pytest

import mcp_preconditions

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = {"mcp_preconditions", "mcp_preconditions.telemetry", "mcp_preconditions.gateway",
          *(f"mcp_preconditions.integrations.{m}"
            for m in importlib.import_module("mcp_preconditions.integrations").__all__)}
_BLOCK = re.compile(r"^[ \t]*```python[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)


def documented_imports() -> list[tuple[str, str, str]]:
    """(document, module, name) for every `from mcp_preconditions... import name` of a ```python
    block in README.md and docs/*.md."""
    found: list[tuple[str, str, str]] = []
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")]):
        for block in _BLOCK.findall(path.read_text(encoding="utf-8")):
            code = _dedent(block)
            try:
                tree = ast.parse(code)
            except SyntaxError:  # a fragment (`def f(): ...` cut short): its imports, line by line
                tree = ast.parse("\n".join(line.strip() for line in code.splitlines()
                                           if line.strip().startswith("from mcp_preconditions")))
            found += [(path.name, node.module, alias.name) for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and node.module
                      and node.module.startswith("mcp_preconditions") for alias in node.names]
    return found


def _dedent(code: str) -> str:
    lines = code.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


IMPORTS = documented_imports()


def test_the_docs_import_something() -> None:
    assert len(IMPORTS) >= 30
    assert {m for _, m, _ in IMPORTS} >= {"mcp_preconditions",
                                          "mcp_preconditions.integrations.mcp_sdk"}


@pytest.mark.parametrize(("document", "module", "name"), IMPORTS,
                         ids=[f"{d}:{m}.{n}" for d, m, n in IMPORTS])
def test_every_documented_import_is_exported_where_the_docs_import_it_from(
        document: str, module: str, name: str) -> None:
    assert module in PUBLIC, f"{document} imports {name} from {module}, which is not public"
    imported = importlib.import_module(module)
    assert name in imported.__all__, f"{document}: {module}.__all__ lacks {name}"
    assert hasattr(imported, name)


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_each_public_module_exports_what_its_all_names(module: str) -> None:
    imported = importlib.import_module(module)
    assert [n for n in imported.__all__ if not hasattr(imported, n)] == []


def test_the_package_docstring_names_the_public_subpackages() -> None:
    doc = mcp_preconditions.__doc__ or ""
    for name in ("mcp_preconditions.integrations", "mcp_preconditions.telemetry",
                 "mcp_preconditions.gateway"):
        assert name in doc


def test_the_version_is_the_installed_distributions() -> None:
    assert mcp_preconditions.__version__ == version("mcp-preconditions")
