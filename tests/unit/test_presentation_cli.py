"""The `route` and `present` commands and the files they read, through a small argparse harness."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions.cli.presentation_cmds import register
from mcp_preconditions.errors import InputError
from mcp_preconditions.presentation import load_catalog

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO = str(EXAMPLES / "demo-tools.json")
CATALOG = str(EXAMPLES / "catalog.json")
REGISTRY = str(EXAMPLES / "registry-80.json")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="mcp-preconditions")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def write(tmp_path: Path, name: str, content: Any) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


# --- route ------------------------------------------------------------------------------------------

def test_route_json_for_the_demo_server(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["route", "--tools", DEMO, "--catalog", CATALOG, "--format", "json"], capsys)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"routes": [
        {"tool": "list_items", "model": "claude-haiku-4",
         "reason": "weighted score 1.45 (intelligence 0.1, cost 0.9, speed 0.8)", "warnings": []},
        {"tool": "summarize_data", "model": "claude-sonnet-4",
         "reason": "weighted score 1.02 (intelligence 0.5, cost 0.5, speed 0.5)", "warnings": []},
        {"tool": "deep_analysis", "model": "claude-opus-4",
         "reason": "weighted score 1.02 (intelligence 0.9, cost 0.2, speed 0.3)", "warnings": []},
    ]}


def test_route_user_model_wins(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["route", "--tools", DEMO, "--catalog", CATALOG, "--user-model", "gpt-4.1",
                        "--format", "json"], capsys)
    assert code == 0
    assert {(r["model"], r["reason"]) for r in json.loads(out)["routes"]} == {("gpt-4.1", "user choice")}


def test_route_angie_precedence_ignores_the_default_user_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["route", "--tools", DEMO, "--catalog", CATALOG, "--user-model", "claude-sonnet-4",
                        "--precedence", "angie", "--format", "json"], capsys)
    reasons = {r["reason"] for r in json.loads(out)["routes"]}
    assert code == 0 and reasons == {"default: this routing policy does not use the preferences given"}


def test_route_cap(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["route", "--tools", DEMO, "--catalog", CATALOG, "--max-intelligence", "0.5",
                        "--format", "json"], capsys)
    deep = json.loads(out)["routes"][2]
    assert code == 0 and deep["model"] != "claude-opus-4"
    assert deep["warnings"] == ["intelligencePriority 0.9 capped to 0.5 by the client"]


def test_route_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    tools = write(tmp_path, "t.json", [
        {"name": "bad", "annotations": {"modelPreferences": {"costPriority": 7}}},
        {"name": "list_items", "annotations": {"modelPreferences": "haiku"}}])
    code, out, _ = run(["route", "--tools", tools, "--catalog", CATALOG], capsys)
    assert code == 0
    assert out.splitlines() == [
        "TOOL        MODEL            REASON",
        "bad         claude-sonnet-4  default: invalid preferences in annotations.modelPreferences",
        "    warning: CostPriority must be between 0 and 1",
        "list_items  claude-haiku-4   hint 'haiku' matched claude-haiku-4",
    ]


def test_route_unknown_user_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["route", "--tools", DEMO, "--catalog", CATALOG, "--user-model", "gpt-5"], capsys)
    assert (code, out) == (2, "")
    assert err == (f"mcp-preconditions: error: --user-model: {CATALOG}: no model named 'gpt-5' (models: "
                   "claude-haiku-4, gpt-4.1-mini, claude-sonnet-4, gpt-4.1, claude-opus-4)\n")


def test_route_bad_catalog(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    models = [{"name": n, "intelligence": 0.5, "cost": 0.5, "speed": 0.5} for n in "abc"]
    models[2]["cost"] = "cheap"
    catalog = write(tmp_path, "catalog.json", {"default": "a", "models": models})
    code, _, err = run(["route", "--tools", DEMO, "--catalog", catalog], capsys)
    assert code == 2
    assert err == f"mcp-preconditions: error: {catalog}: models[2].cost: must be a number between 0 and 1\n"


def test_route_bad_cap_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(["route", "--tools", DEMO, "--catalog", CATALOG, "--max-cost", "2"], capsys)
    assert exit_.value.code == 2
    assert "argument --max-cost: must be a number between 0 and 1, got '2'" in capsys.readouterr().err


# --- present ----------------------------------------------------------------------------------------

def test_present_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["present", "--tools", REGISTRY, "--tier", "small", "--format", "json"], capsys)
    result = json.loads(out)
    assert (code, err) == (0, "")
    assert len(result["tools"]) == 80 and result["tools"][0] == {
        "name": "filesystem_read", "description": "Read file",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
    compact = json.dumps(result["tools"], separators=(",", ":"), ensure_ascii=False)
    assert result["chars"] == len(compact) and result["approx_tokens"] == -(-len(compact) // 4)
    assert [g["category"] for g in result["groups"]][:2] == ["filesystem", "git"]


def test_present_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    tools = write(tmp_path, "t.json", {"tools": [
        {"name": "a", "description": "Alpha\nmore", "inputSchema": {
            "properties": {"x": {}, "y": {}}, "required": ["x"]},
         "capabilityHints": {"category": "c", "priority": 1}},
        {"name": "b", "inputSchema": {}}]})
    code, out, _ = run(["present", "--tools", tools, "--tier", "medium"], capsys)
    assert code == 0
    assert out.splitlines() == ["tier medium: 2 tools in 2 groups, 134 chars, ~34 tokens",
                                "[c]", "  a(x, y?)  Alpha", "[(no category)]", "  b()"]


def test_present_bad_tier_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(["present", "--tools", REGISTRY, "--tier", "tiny"], capsys)
    assert exit_.value.code == 2


@pytest.mark.parametrize(("content", "message"), [
    ('{"tools": [\n  {"name": "a"}\n  {"name": "b"}]}',
     "not valid JSON (line 3, column 3): Expecting ',' delimiter"),
    ('{"tools": 3}', "tools: must be an array of tools, got number"),
    ('{"tools": [{"name": "a"}, 4]}', "tools[1]: must be an object (a tool definition), got number"),
    ('[{"name": ""}]', "[0].name: must not be empty"),
    ('[{"description": "x"}]', '[0]: missing "name"'),
])
def test_bad_tools_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str,
                        message: str) -> None:
    tools = write(tmp_path, "x.json", content)
    for argv in (["present", "--tools", tools, "--tier", "small"],
                 ["route", "--tools", tools, "--catalog", CATALOG]):
        code, out, err = run(argv, capsys)
        assert (code, out, err) == (2, "", f"mcp-preconditions: error: {tools}: {message}\n")


def test_missing_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    for argv in (["present", "--tools", missing, "--tier", "small"],
                 ["route", "--tools", DEMO, "--catalog", missing]):
        code, out, err = run(argv, capsys)
        assert (code, out) == (2, "")
        assert err == f"mcp-preconditions: error: {missing}: cannot read: No such file or directory\n"


def test_catalog_that_is_not_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    catalog = write(tmp_path, "catalog.json", '{"default": "a",\n "models": [}')
    code, _, err = run(["route", "--tools", DEMO, "--catalog", catalog], capsys)
    assert code == 2
    assert err == (f"mcp-preconditions: error: {catalog}: not valid JSON (line 2, column 13): "
                   "Expecting value\n")


def test_load_catalog() -> None:
    catalog = load_catalog(CATALOG)
    assert catalog.source == CATALOG and catalog.default == "claude-sonnet-4"
    assert [m.name for m in catalog.models] == ["claude-haiku-4", "gpt-4.1-mini", "claude-sonnet-4",
                                                "gpt-4.1", "claude-opus-4"]


def test_load_catalog_bad_shape(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_catalog(write(tmp_path, "c.json", {"default": "a", "models": "a"}))
    assert str(err.value) == f"{tmp_path / 'c.json'}: models: must be a non-empty list"
