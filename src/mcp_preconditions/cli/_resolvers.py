"""`--resolver MODULE:ATTR` (repeatable): custom resolvers for one run, without packaging them.

The value is `path/to/file.py:attribute` (the file is loaded by its path; its folder need not be on
sys.path) or `package.module:attribute` (imported from sys.path). The attribute is a resolver, a
resolver class, or a zero-argument factory, as for the `mcp_preconditions.resolvers` entry points.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import InputError
from ..resolvers import Resolver

_HELP = ("a custom resolver, 'path/to/file.py:attribute' or 'module:attribute': a resolver, its "
         "class or a zero-argument factory (repeatable)")


def add_resolver_option(parser: argparse.ArgumentParser) -> None:
    """Add `--resolver SPEC` (repeatable) to a subcommand."""
    parser.add_argument("--resolver", action="append", default=[], metavar="MODULE:ATTR", help=_HELP)


def resolvers_from(args: argparse.Namespace) -> list[Resolver]:
    """The resolvers named by `--resolver`, in order; InputError (one line) for any bad one, and
    for two that claim one namespace (naming both options). A clash with a built-in or installed
    resolver is the registry's error, which names both files."""
    found: list[Resolver] = []
    given: dict[str, str] = {}
    for spec in getattr(args, "resolver", None) or []:
        resolver = load_resolver(spec)
        first = given.setdefault(resolver.namespace, spec)
        if first is not spec:
            raise InputError(f"--resolver {spec}: namespace '{resolver.namespace}' is already given "
                             f"by --resolver {first} (one resolver per namespace)")
        found.append(resolver)
    return found


def load_resolver(spec: str) -> Resolver:
    """One resolver from `file.py:attribute` or `module:attribute`."""
    where, _, attribute = spec.rpartition(":")
    if not where or not attribute:
        raise InputError(f"--resolver {spec}: expected 'path/to/file.py:attribute' or "
                         "'module:attribute'")
    module = _module(where, spec)
    try:
        obj = getattr(module, attribute)
    except AttributeError:
        raise InputError(f"--resolver {spec}: {where} has no attribute {attribute!r}") from None
    try:
        made = obj() if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "namespace")) \
            else obj
    except Exception as exc:  # the user's constructor: its failure is bad input, not a crash
        raise InputError(f"--resolver {spec}: creating the resolver failed: "
                         f"{type(exc).__name__}: {exc}") from None
    if not isinstance(made, Resolver) or not isinstance(getattr(made, "namespace", None), str):
        raise InputError(f"--resolver {spec}: not a resolver (it needs a 'namespace' string and "
                         f"'validate' and 'resolve' methods), got {_kind(made)}")
    return made


def _kind(obj: Any) -> str:
    return f"{type(obj).__name__}"


def _module(where: str, spec: str) -> ModuleType:
    try:
        if where.endswith(".py"):
            return _from_file(Path(where))
        return importlib.import_module(where)
    except InputError:
        raise
    except Exception as exc:  # the user's module runs here; whatever it raises is bad input
        raise InputError(f"--resolver {spec}: cannot import {where}: "
                         f"{type(exc).__name__}: {exc}") from None


def _from_file(path: Path) -> ModuleType:
    resolved = path.resolve()
    if not resolved.is_file():
        raise InputError(f"--resolver {path}: no such file")
    # One module per file however many --resolver options name it; a stable private name so the
    # file cannot shadow an importable module.
    name = f"_mcp_preconditions_resolver_{abs(hash(str(resolved))):x}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise InputError(f"--resolver {path}: cannot load this file as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
