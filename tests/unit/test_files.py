"""Reading tools, knowledge and claims files: the parsed values, and the exact message of every bad file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions.client import Knowledge
from mcp_preconditions.errors import ToolsFileError
from mcp_preconditions.files import json_type, read_claims, read_json, read_knowledge, read_tools

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write(tmp_path: Path, content: Any, name: str = "t.json") -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def error_of(fn: Any, path: str) -> str:
    with pytest.raises(ToolsFileError) as info:
        fn(path)
    return str(info.value)


# --- read_tools ---------------------------------------------------------------------------------
def test_a_tools_list_result_is_read_in_order() -> None:
    tools = read_tools(EXAMPLES / "mission-control-tools.json")
    assert [t["name"] for t in tools] == ["launch_rocket", "abort_launch", "read_telemetry",
                                          "schedule_maintenance", "stream_telemetry_v2", "fuel_status",
                                          "get_weather"]


def test_a_bare_array_of_tools_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, [{"name": "a"}, {"name": "b", "execution": {"requirements": ["env:x"]}}])
    assert read_tools(path) == [{"name": "a"}, {"name": "b", "execution": {"requirements": ["env:x"]}}]


def test_other_keys_of_a_tools_list_result_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, {"tools": [{"name": "a"}], "nextCursor": "abc"})
    assert read_tools(path) == [{"name": "a"}]


def test_a_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, b"\xef\xbb\xbf" + json.dumps([{"name": "a"}]).encode())
    assert read_tools(path) == [{"name": "a"}]


@pytest.mark.parametrize(("content", "message"), [
    ({"tools": [{"name": "a"}, {"name": "b"}, {"description": "x"}]}, 't.json: tools[2]: missing "name"'),
    ({"tools": [{"name": "a"}, {"name": 7}]}, "t.json: tools[1].name: must be a string, got number"),
    ({"tools": [{"name": ""}]}, "t.json: tools[0].name: must not be empty"),
    ([{"name": "a"}, None], "t.json: [1]: must be an object (a tool definition), got null"),
    ({"tools": ["a"]}, "t.json: tools[0]: must be an object (a tool definition), got string"),
    ({"tools": [{"name": "a"}, {"name": "b"}, {"name": "a"}]},
     "t.json: tools[2].name: duplicate tool name 'a' (first at tools[0])"),
    ("\"just text\"", 't.json: expected a tools/list result {"tools": [...]} or an array of tools, '
                  "got string"),
    ({"items": []}, 't.json: expected a tools/list result {"tools": [...]} or an array of tools, '
                    "got object"),
    ({"tools": {"name": "a"}}, "t.json: tools: must be an array of tools, got object"),
])
def test_wrong_shapes_are_named_by_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         content: Any, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, content)
    assert error_of(read_tools, "t.json") == message


def test_bad_json_names_line_and_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, '{\n  "tools": [\n    {"name": "a"}\n    {"name": "b"}\n  ]\n}')
    assert error_of(read_tools, "t.json") == \
        "t.json: not valid JSON (line 4, column 5): Expecting ',' delimiter"


def test_a_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert error_of(read_tools, "t.json") == "t.json: cannot read: No such file or directory"


def test_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    assert error_of(read_tools, "d") == "d: cannot read: Is a directory"


def test_non_utf8_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, b'{"tools": [{"name": "caf\xe9"}]}')
    assert error_of(read_tools, "t.json") == "t.json: not UTF-8 (invalid continuation byte at byte 24)"


def test_deep_nesting_is_a_clean_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "[" * 200_000 + "]" * 200_000)
    assert error_of(read_tools, "t.json") == "t.json: not usable JSON: nested too deeply"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       constant: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, f'[{{"name": "a", "x": {constant}}}]')
    assert error_of(read_json, "t.json") == f"t.json: not valid JSON: {constant} is not valid JSON"


def test_an_empty_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "")
    assert error_of(read_tools, "t.json") == \
        "t.json: not valid JSON (line 1, column 1): Expecting value"


# --- read_claims, read_knowledge ----------------------------------------------------------------
def test_claims_are_a_json_object() -> None:
    assert read_claims(EXAMPLES / "claims" / "observer.json") == {
        "sub": "bob", "role": "observer", "scope": "mission:read"}


def test_claims_that_are_not_an_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, ["role", "admin"], "c.json")
    assert error_of(read_claims, "c.json") == "c.json: expected a JSON object of claims, got array"


def test_knowledge_is_read_into_a_knowledge() -> None:
    knowledge = read_knowledge(EXAMPLES / "knowledge.json")
    assert isinstance(knowledge, Knowledge)
    assert knowledge.to_dict() == {
        "satisfied": ["auth:oauth2", "auth:scope:mission:read", "capability:telemetry.read",
                      "env:production"],
        "unsatisfiable": ["env:staging", "feature:telemetry.v2"]}


@pytest.mark.parametrize(("content", "message"), [
    ({"satisfied": ["a:b"], "unsatisfied": ["c:d"]},
     "k.json: invalid knowledge: unknown key(s) 'unsatisfied' (expected 'satisfied', 'unsatisfiable')"),
    ({"satisfied": "a:b"}, "k.json: invalid knowledge: satisfied: must be a list of strings, got str"),
    ({"satisfied": ["a:b"], "unsatisfiable": ["a:b"]},
     "k.json: invalid knowledge: unsatisfiable[0]: 'a:b' is also in satisfied[0]"),
])
def test_bad_knowledge_is_named_by_file_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                content: Any, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, content, "k.json")
    assert error_of(read_knowledge, "k.json") == message


@pytest.mark.parametrize(("value", "name"), [
    ({}, "object"), ([], "array"), ("", "string"), (1, "number"), (1.5, "number"), (True, "boolean"),
    (None, "null")])
def test_json_type_names(value: Any, name: str) -> None:
    assert json_type(value) == name
