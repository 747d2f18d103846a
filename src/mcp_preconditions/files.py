"""Reading the JSON files the command line takes: tools lists, client knowledge and principal claims.

Every problem is a ToolsFileError whose message names the file and the place in it
(`tools.json: tools[2]: missing "name"`); nothing from `json` or the OS leaks out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .client import Knowledge
from .errors import ToolsFileError

_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"), (dict, "object"), (list, "array"), (str, "string"),
    ((int, float), "number"), (type(None), "null"))


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (`object`, `array`, `string`, ...)."""
    for types, name in _JSON_TYPES:
        if isinstance(value, types):
            return name
    return type(value).__name__


def _no_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and neither do we.
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Refuse duplicate keys: the later value would silently replace the earlier one (a second
    `"execution": {}` would erase a tool's requirements)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {json.dumps(key, ensure_ascii=False)} in one object")
        out[key] = value
    return out


def read_json(path: str | Path) -> Any:
    """The parsed contents of a JSON file (UTF-8, an optional byte-order mark is ignored)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ToolsFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ToolsFileError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ToolsFileError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}): "
                             f"{exc.msg}") from None
    except ValueError as exc:
        raise ToolsFileError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise ToolsFileError(f"{path}: not usable JSON: nested too deeply") from None


def tools_of(raw: Any, source: str) -> list[dict[str, Any]]:
    """The tool definitions of a parsed tools file: `{"tools": [...]}` or a bare array of tools.

    Each tool must be an object with a non-empty string `name`, and names must be unique."""
    if isinstance(raw, dict) and "tools" in raw:
        items, place = raw["tools"], "tools"
        if not isinstance(items, list):
            raise ToolsFileError(f"{source}: tools: must be an array of tools, got {json_type(items)}")
    elif isinstance(raw, list):
        items, place = raw, ""
    else:
        raise ToolsFileError(f'{source}: expected a tools/list result {{"tools": [...]}} or an array '
                             f"of tools, got {json_type(raw)}")
    first: dict[str, int] = {}
    for i, tool in enumerate(items):
        where = f"{place}[{i}]"
        if not isinstance(tool, dict):
            raise ToolsFileError(f"{source}: {where}: must be an object (a tool definition), "
                                 f"got {json_type(tool)}")
        if "name" not in tool:
            raise ToolsFileError(f'{source}: {where}: missing "name"')
        name = tool["name"]
        if not isinstance(name, str):
            raise ToolsFileError(f"{source}: {where}.name: must be a string, got {json_type(name)}")
        if not name:
            raise ToolsFileError(f"{source}: {where}.name: must not be empty")
        if name in first:
            raise ToolsFileError(f"{source}: {where}.name: duplicate tool name {name!r} "
                                 f"(first at {place}[{first[name]}])")
        first[name] = i
    tools: list[dict[str, Any]] = items
    return tools


def read_tools(path: str | Path) -> list[dict[str, Any]]:
    """The tool definitions in a tools file, in file order."""
    return tools_of(read_json(path), str(path))


def read_knowledge(path: str | Path) -> Knowledge:
    """Client knowledge from a file `{"satisfied": [...], "unsatisfiable": [...]}`."""
    return Knowledge.from_dict(read_json(path), source=str(path))


def read_claims(path: str | Path) -> dict[str, Any]:
    """The claims of an already-verified token: a JSON object."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise ToolsFileError(f"{path}: expected a JSON object of claims, got {json_type(raw)}")
    claims: dict[str, Any] = raw
    return claims
