"""Reading input files: every file is read through `read_bounded` (a size bound, checked before
parsing), and the JSON ones (tools lists, client knowledge, claims, catalogs) through `read_json`.

Every problem is a ToolsFileError whose message names the file and the place in it
(`tools.json: tools[2]: missing "name"`); nothing from `json` or the OS leaks out.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, TextIO

from .client import Knowledge
from .errors import FileReadError, InputError, ToolsFileError

MAX_FILE_BYTES_ENV = "MCP_PRECONDITIONS_MAX_FILE_BYTES"
DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024


def max_file_bytes() -> int:
    """The size bound on every input file: $MCP_PRECONDITIONS_MAX_FILE_BYTES, else 64 MiB."""
    text = os.environ.get(MAX_FILE_BYTES_ENV)
    if text is None:
        return DEFAULT_MAX_FILE_BYTES
    if not (text.isascii() and text.isdigit()):
        raise InputError(f"${MAX_FILE_BYTES_ENV}: must be a whole number of bytes, got {text!r}")
    return int(text)


def read_bounded(path: str | Path) -> bytes:
    """The bytes of a file, refused when larger than `max_file_bytes()`.

    A regular file is refused by its size before reading; anything else (a pipe, /dev/zero) is
    read for at most bound + 1 bytes, so memory stays bounded and an endless file cannot hang us."""
    bound = max_file_bytes()
    too_large = (f"larger than {bound} bytes, the input size bound (set ${MAX_FILE_BYTES_ENV} to "
                 "raise it)")
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise FileReadError(str(path), "cannot read: Is a directory")
            if stat.S_ISREG(info.st_mode) and info.st_size > bound:
                raise FileReadError(str(path), too_large)
            data = f.read(bound + 1)
    except OSError as exc:
        raise FileReadError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except UnicodeError:  # a lone surrogate that no file system encoding can spell
        raise FileReadError(str(path), "cannot read: the file name is not valid Unicode") from None
    except ValueError as exc:  # an embedded NUL
        raise FileReadError(str(path), f"cannot read: {exc}") from None
    if len(data) > bound:
        raise FileReadError(str(path), too_large)
    return data


def read_line(stream: TextIO | None, what: str) -> str:
    """One line of a text stream (a token on stdin), bounded like a file; `what` names it."""
    if stream is None:
        raise InputError(f"{what}: closed")
    bound = max_file_bytes()
    try:
        raw = stream.buffer.readline(bound + 1) if hasattr(stream, "buffer") else \
            stream.readline(bound + 1).encode("utf-8", "surrogateescape")
        if len(raw) > bound:
            raise InputError(f"{what}: a line longer than {bound} bytes, the input size bound")
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except (OSError, ValueError) as exc:  # ValueError: the stream was closed under us
        raise InputError(f"{what}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def _place(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier() and part.isascii():
            out += ("." if out else "") + part
        else:  # ASCII-escaped, so the place itself never carries a surrogate or a bidi control
            out += f"[{json.dumps(part)}]"
    return out or "(top level)"


def _surrogate(text: str) -> str | None:
    """The first lone surrogate in `text`, escaped (`\\ud800`), or None."""
    if text.isascii():
        return None
    for char in text:
        if "\ud800" <= char <= "\udfff":
            return f"\\u{ord(char):04x}"
    return None


def find_surrogate(value: Any) -> tuple[str, str] | None:
    """(key path, escaped surrogate) of the first string, key or value, holding a lone surrogate.

    JSON may spell one (`"\\ud800"`), but it is not Unicode text: it cannot be printed or encoded,
    so such a file is refused where it is read rather than crash whoever prints it later."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        node, parts = stack.pop()
        if isinstance(node, str):
            found = _surrogate(node)
            if found is not None:
                return _place(parts), found
        elif isinstance(node, dict):
            for key in reversed(list(node)):  # reversed: the first problem in file order is found
                found = _surrogate(key)
                if found is not None:
                    return _place([*parts, key]), found
                stack.append((node[key], [*parts, key]))
        elif isinstance(node, list):
            stack.extend((item, [*parts, i]) for i, item in reversed(list(enumerate(node))))
    return None


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
    return parse_json(read_bounded(path), str(path))


def parse_json(data: bytes | str, where: str) -> Any:
    """JSON text parsed as strictly as a file is (no duplicate keys, NaN or absurd nesting, no lone
    surrogate); every problem a ToolsFileError starting with `where` (a file name, an option)."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ToolsFileError(f"{where}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    else:
        text = data
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ToolsFileError(f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}): "
                             f"{exc.msg}") from None
    except ValueError as exc:
        raise ToolsFileError(f"{where}: not valid JSON: {exc}") from None
    except RecursionError:
        raise ToolsFileError(f"{where}: not usable JSON: nested too deeply") from None
    found = find_surrogate(value)
    if found is not None:
        raise ToolsFileError(f"{where}: {found[0]}: lone surrogate {found[1]}: not Unicode text")
    return value


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
    return claims_of(read_json(path), str(path))


def claims_of(raw: Any, where: str) -> dict[str, Any]:
    """Parsed claims, which must be a JSON object; `where` names their file or field."""
    if not isinstance(raw, dict):
        raise ToolsFileError(f"{where}: expected a JSON object of claims, got {json_type(raw)}")
    claims: dict[str, Any] = raw
    return claims


def arguments_of(raw: Any, where: str) -> dict[str, Any]:
    """A call's parsed arguments, which must be a JSON object; `where` names their file or option."""
    if not isinstance(raw, dict):
        raise ToolsFileError(f"{where}: the call's arguments must be a JSON object, got "
                             f"{json_type(raw)}")
    arguments: dict[str, Any] = raw
    return arguments
