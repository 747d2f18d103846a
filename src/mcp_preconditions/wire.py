"""Where requirements live on the wire (SPEC §1): `execution.requirements` on a tool definition,
mirrored under one `_meta` key for clients whose typed models drop unknown fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import RequirementError

META_KEY = "io.github.mcp-preconditions/requirements"
_ABSENT = object()


@dataclass(frozen=True, slots=True)
class MalformedExecution:
    """A tool's `execution` that is present but not an object: never read as "no requirements"."""

    found: str  # the JSON type that was there instead


def raw_requirements(tool: Mapping[str, Any]) -> Any:
    """The tool's raw `execution.requirements` value, else its `_meta` mirror, else None.

    The value is returned as found (it may be garbage); callers validate it."""
    # `type(...) is dict` first: parsed JSON is plain dicts, and an ABC check costs more than the
    # rest of this function (it runs once per tool of a listing).
    execution = tool.get("execution")
    if execution is not None:
        if type(execution) is not dict and not isinstance(execution, Mapping):
            return MalformedExecution(type(execution).__name__)
        value = execution.get("requirements", _ABSENT)
        if value is not _ABSENT:
            return value
    meta = tool.get("_meta")
    if meta is not None and (type(meta) is dict or isinstance(meta, Mapping)) and META_KEY in meta:
        return meta[META_KEY]
    return None


def with_requirements(tool: Mapping[str, Any], requirements: Sequence[str]) -> dict[str, Any]:
    """A copy of a tool definition whose requirements on the wire and in the `_meta` mirror are
    exactly `requirements`: whatever the tool carried there is replaced (it may name a confidential
    requirement, or be garbage), and with none, neither is left (nor an `execution` that is not
    an object)."""
    out = dict(tool)
    execution, meta = out.get("execution"), out.get("_meta")
    if requirements:
        out["execution"] = {**(execution if isinstance(execution, Mapping) else {}),
                            "requirements": list(requirements)}
        out["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), META_KEY: list(requirements)}
        return out
    if execution is not None and not isinstance(execution, Mapping):
        del out["execution"]  # garbage where requirements would be: shown as none
    elif isinstance(execution, Mapping) and "requirements" in execution:
        rest = {k: v for k, v in execution.items() if k != "requirements"}
        if rest:
            out["execution"] = rest
        else:
            del out["execution"]
    if isinstance(meta, Mapping) and META_KEY in meta:
        rest = {k: v for k, v in meta.items() if k != META_KEY}
        if rest:
            out["_meta"] = rest
        else:
            del out["_meta"]
    return out


def carried(tool: str, value: object, where: str) -> tuple[str, ...]:
    """A requirement list a tool carries at `where` (None: none). Anything but a list of strings
    raises RequirementError: a list the guard cannot read must not be shown unenforced."""
    if value is None:
        return ()
    if isinstance(value, list | tuple) and all(isinstance(r, str) for r in value):
        return tuple(value)
    raise RequirementError([f"tool '{tool}': {where} must be a list of requirement strings, "
                            f"not {type(value).__name__}"])


def meta_requirements(tool: str, meta: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The requirements a tool's `_meta` mirror carries (`@server.tool(meta=...)`, fastmcp meta)."""
    return carried(tool, meta.get(META_KEY), f"_meta[{META_KEY!r}]") if meta is not None else ()


def wire_requirements(tool: Mapping[str, Any]) -> tuple[str, ...]:
    """Every requirement a `tools/list` entry carries: `execution.requirements` ∪ the `_meta`
    mirror (both are read, so neither can hide the other)."""
    name = str(tool.get("name"))
    execution = tool.get("execution")
    if execution is not None and not isinstance(execution, Mapping):
        raise RequirementError([f"tool '{name}': execution must be an object, not "
                                f"{type(execution).__name__}"])
    own = carried(name, execution.get("requirements"), "execution.requirements") if execution else ()
    meta = tool.get("_meta")
    mirrored = meta_requirements(name, meta) if isinstance(meta, Mapping) else ()
    return tuple(dict.fromkeys((*own, *mirrored)))  # union, first-seen order, exact strings
