"""One exception tree (issue 42, item 4): every error class of the library derives from
`PreconditionsError`, is defined in one module per layer (`errors.py` for the core,
`gateway/errors.py` for the gateway), and says what it is in a one-line docstring (httpx's
`_exceptions.py` is the model).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import mcp_preconditions
from mcp_preconditions.errors import PreconditionsError

LAYERS = {"mcp_preconditions": "mcp_preconditions.errors",
          "mcp_preconditions.gateway": "mcp_preconditions.gateway.errors"}


def _classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(mcp_preconditions.__path__, "mcp_preconditions."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) \
                    and value.__module__ == info.name:
                found[f"{info.name}.{value.__qualname__}"] = value
    return [found[k] for k in sorted(found)]


def _layer(module: str) -> str:
    return LAYERS["mcp_preconditions.gateway" if module.startswith("mcp_preconditions.gateway")
                  else "mcp_preconditions"]


CLASSES = _classes()


def test_the_walk_finds_the_tree() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {"PreconditionsError", "PolicyError", "ListingError", "PageRefused"} <= names


@pytest.mark.parametrize("error", CLASSES, ids=[f"{c.__module__}.{c.__qualname__}" for c in CLASSES])
def test_each_error_is_in_its_layers_module_under_the_one_base(error: type[BaseException]) -> None:
    assert issubclass(error, PreconditionsError)
    assert error.__module__ == _layer(error.__module__)
    doc = inspect.getdoc(error) or ""
    assert doc and "\n" not in doc, f"{error.__qualname__}: a one-line docstring"
