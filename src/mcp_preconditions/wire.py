"""Where requirements live on the wire (SPEC §1): `execution.requirements` on a tool definition,
mirrored under one `_meta` key for clients whose typed models drop unknown fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

META_KEY = "io.github.mcp-preconditions/requirements"
_ABSENT = object()


@dataclass(frozen=True, slots=True)
class MalformedExecution:
    """A tool's `execution` that is present but not an object: never read as "no requirements"."""

    found: str  # the JSON type that was there instead


def raw_requirements(tool: Mapping[str, Any]) -> Any:
    """The tool's raw `execution.requirements` value, else its `_meta` mirror, else None.

    The value is returned as found (it may be garbage); callers validate it."""
    execution = tool.get("execution")
    if execution is not None and not isinstance(execution, Mapping):
        return MalformedExecution(type(execution).__name__)
    if isinstance(execution, Mapping):
        value = execution.get("requirements", _ABSENT)
        if value is not _ABSENT:
            return value
    meta = tool.get("_meta")
    if isinstance(meta, Mapping) and META_KEY in meta:
        return meta[META_KEY]
    return None


def with_requirements(tool: Mapping[str, Any], requirements: Sequence[str]) -> dict[str, Any]:
    """A copy of a tool definition carrying `requirements` on the wire and in the `_meta` mirror."""
    out = dict(tool)
    if not requirements:
        return out
    execution = dict(out.get("execution") or {})
    execution["requirements"] = list(requirements)
    out["execution"] = execution
    meta = dict(out.get("_meta") or {})
    meta[META_KEY] = list(requirements)
    out["_meta"] = meta
    return out
