"""Reading tools, knowledge and claims files: the parsed values, and the exact message of every bad file."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions.client import Knowledge
from mcp_preconditions.errors import FileReadError, InputError, ToolsFileError
from mcp_preconditions.files import (
    DEFAULT_MAX_FILE_BYTES,
    MAX_FILE_BYTES_ENV,
    json_type,
    max_file_bytes,
    read_bounded,
    read_claims,
    read_json,
    read_knowledge,
    read_line,
    read_tools,
)

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


# --- lone surrogates ----------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    ('{"tools": [{"name": "a", "description": "x\\ud800"}]}',
     "t.json: tools[0].description: lone surrogate \\ud800: not Unicode text"),
    ('{"tools": [{"name": "a"}, {"name": "b\\udfff"}]}',
     "t.json: tools[1].name: lone surrogate \\udfff: not Unicode text"),
    ('[{"name": "a", "inputSchema": {"we ird": ["ok", "\\ud83d"]}}]',
     't.json: [0].inputSchema["we ird"][1]: lone surrogate \\ud83d: not Unicode text'),
    ('[{"name": "a", "k\\udc00": 1}]', 't.json: [0]["k\\udc00"]: lone surrogate \\udc00: not Unicode text'),
    ('"\\ude00"', "t.json: (top level): lone surrogate \\ude00: not Unicode text"),
])
def test_a_lone_surrogate_is_refused_at_its_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  text: str, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, text)
    assert error_of(read_json, "t.json") == message


def test_the_first_surrogate_in_file_order_is_named(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, '{"a": ["ok", {"b": "\\ud800"}], "c": "\\ud801"}')
    assert error_of(read_json, "t.json") == "t.json: a[1].b: lone surrogate \\ud800: not Unicode text"


def test_a_surrogate_pair_is_a_character_not_a_problem(tmp_path: Path) -> None:
    path = write(tmp_path, '[{"name": "rocket \\ud83d\\ude80"}]')
    assert read_tools(path) == [{"name": "rocket \U0001f680"}]


@pytest.mark.parametrize(("reader", "text", "message"), [
    (read_claims, '{"sub": "\\ud800"}', "t.json: sub: lone surrogate \\ud800: not Unicode text"),
    (read_knowledge, '{"satisfied": ["env:\\udbff"]}',
     "t.json: satisfied[0]: lone surrogate \\udbff: not Unicode text"),
])
def test_claims_and_knowledge_refuse_surrogates_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    reader: Any, text: str, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, text)
    assert error_of(reader, "t.json") == message


# --- the size bound -----------------------------------------------------------------------------
BOUND_HINT = "the input size bound (set $MCP_PRECONDITIONS_MAX_FILE_BYTES to raise it)"


def test_the_default_bound_is_64_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_FILE_BYTES_ENV, raising=False)
    assert max_file_bytes() == DEFAULT_MAX_FILE_BYTES == 64 * 1024 * 1024


def test_a_file_above_the_bound_is_refused_before_reading(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(MAX_FILE_BYTES_ENV, "16")
    write(tmp_path, [{"name": "abcdef"}])  # 20 bytes
    assert error_of(read_tools, "t.json") == f"t.json: larger than 16 bytes, {BOUND_HINT}"
    write(tmp_path, [{"name": "abc"}])  # 17 bytes
    assert error_of(read_tools, "t.json") == f"t.json: larger than 16 bytes, {BOUND_HINT}"
    write(tmp_path, [{"name": "ab"}])  # 16 bytes: at the bound is fine
    assert read_tools("t.json") == [{"name": "ab"}]


def test_an_endless_file_is_read_only_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_FILE_BYTES_ENV, "1000")
    assert error_of(read_tools, "/dev/zero") == f"/dev/zero: larger than 1000 bytes, {BOUND_HINT}"
    with pytest.raises(FileReadError) as info:
        read_bounded("/dev/zero")
    assert (info.value.source, info.value.problem) == ("/dev/zero", f"larger than 1000 bytes, {BOUND_HINT}")


def test_dev_zero_under_the_default_bound_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_FILE_BYTES_ENV, raising=False)
    assert error_of(read_tools, "/dev/zero") == \
        f"/dev/zero: larger than {64 * 1024 * 1024} bytes, {BOUND_HINT}"


@pytest.mark.parametrize("value", ["", "10k", "-1", "1e6", " 5", "٣"])
def test_a_bad_bound_setting_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(MAX_FILE_BYTES_ENV, value)
    with pytest.raises(InputError) as info:
        read_bounded("/dev/null")
    assert str(info.value) == ("$MCP_PRECONDITIONS_MAX_FILE_BYTES: must be a whole number of bytes, "
                               f"got {value!r}")


# --- read_line (a token on standard input) ------------------------------------------------------
def test_read_line_reads_one_line() -> None:
    stream = io.TextIOWrapper(io.BytesIO(b"abc.def\nrest\n"), encoding="utf-8")
    assert read_line(stream, "--token -: standard input") == "abc.def\n"


@pytest.mark.parametrize(("data", "message"), [
    (None, "--token -: standard input: closed"),
    (b"\xff\n", "--token -: standard input: not UTF-8 (invalid start byte at byte 0)"),
    (b"x" * 40 + b"\n", "--token -: standard input: a line longer than 32 bytes, the input size bound"),
])
def test_read_line_problems(monkeypatch: pytest.MonkeyPatch, data: bytes | None, message: str) -> None:
    monkeypatch.setenv(MAX_FILE_BYTES_ENV, "32")
    stream = None if data is None else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_line(stream, "--token -: standard input")
    assert str(info.value) == message


@pytest.mark.parametrize(("name", "problem"), [
    ("bad\ud800.json", "cannot read: the file name is not valid Unicode"),
    ("nul\x00.json", "cannot read: embedded null byte"),
])
def test_an_unusable_file_name(name: str, problem: str) -> None:
    with pytest.raises(FileReadError) as info:
        read_bounded(name)
    assert (info.value.source, info.value.problem) == (name, problem)
