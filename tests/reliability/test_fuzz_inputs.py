"""Fuzzing the inputs a user hands us: the policy loader (random bytes, TOML-ish text, random
structured policies written as TOML) and the tools, knowledge and claims readers through the
command line. Never a traceback: a policy is valid or a PolicyError listing its problems; the CLI
exits 0/1 or 2 with one `mcp-preconditions: error:` message.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_preconditions import PolicyError, PolicySource, parse_policy
from mcp_preconditions.cli import main

from .tally import TALLY

FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "mission-control.toml"
PREFIX = "mcp-preconditions: error: "

SCHEMA_KEYS = ["environment", "environment_variable", "confidential", "features", "flags",
               "openfeature", "provider", "path", "state", "values", "ttl_seconds", "redis", "url",
               "capabilities", "grants", "when", "claim", "tools", "requirements", "auth", "issuer",
               "audience", "jwks_uri", "keys", "algorithms", "leeway_seconds", "claim_aliases",
               "scope_implications", "introspection", "endpoint", "guard", "lookup_timeout_seconds",
               "denial", "list_filtering", "decision_log", "logger", "launch_rocket", "str", "int"]
REQUIREMENTS = ["auth:oauth2", "auth:claim:role:x", "auth:scope:a", "capability:c", "env:production",
                "state:k", "feature:f", "zz:q", "nonamespace", "", " env:production", "env:",
                "capability:capability:c", "auth:claim:role", "auth:bogus"]

keys = st.sampled_from(SCHEMA_KEYS) | st.text(min_size=1, max_size=12)
scalars = (st.text(max_size=24) | st.sampled_from(REQUIREMENTS) | st.booleans()
           | st.integers(-(2**63), 2**63 - 1) | st.floats())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=16)
structured = st.dictionaries(keys, values, max_size=8)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                           | st.text(max_size=16) | st.sampled_from(REQUIREMENTS),
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8) | st.sampled_from(
                               ["tools", "name", "execution", "requirements", "_meta",
                                "satisfied", "unsatisfiable", "sub", "role"]), inner, max_size=4),
                           max_leaves=20)
TOML_TOKENS = ["[", "]", "[[", "]]", "=", '"', "'", ",", ".", "\n", " ", "{", "}", "#", "\\",
               "true", "1e9", "nan", "-", "1979-05-27", *SCHEMA_KEYS, *REQUIREMENTS]
tomlish = st.lists(st.sampled_from(TOML_TOKENS) | st.text(max_size=3), max_size=40).map("".join)


# -- a tiny TOML writer for the structured policies ------------------------------------------------
def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) \
            else repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def to_toml(data: dict[str, Any]) -> bytes:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in data.items()).encode()


def parses_or_explains(data: bytes) -> None:
    """parse_policy returns a PolicySource or raises a PolicyError naming the file and problems."""
    try:
        result = parse_policy(data, "fuzz.toml")
    except PolicyError as exc:
        TALLY.add("fuzz", cases=1, calls=1)
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)
        assert str(exc).startswith("fuzz.toml: invalid policy (")
        return
    except Exception:
        TALLY.add("fuzz", cases=1, calls=1, tracebacks=1)
        raise
    TALLY.add("fuzz", cases=1, calls=1)
    assert isinstance(result, PolicySource)


@FUZZ
@given(st.binary(max_size=300))
def test_policy_loader_on_random_bytes(data: bytes) -> None:
    parses_or_explains(data)


@FUZZ
@given(tomlish)
def test_policy_loader_on_toml_ish_text(text: str) -> None:
    parses_or_explains(text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(structured)
def test_policy_loader_on_random_structured_policies(data: dict[str, Any]) -> None:
    encoded = to_toml(data)
    parses_or_explains(encoded)


def test_the_toml_writer_round_trips() -> None:
    import tomllib

    sample = {"tools": {"t": {"requirements": ["env:a", "x\n\"y"]}}, "n": 1, "f": 0.5, "b": False}
    assert tomllib.loads(to_toml(sample).decode()) == sample


# -- the command line on fuzzed files ----------------------------------------------------------------
@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def file_content(draw_value: Any) -> bytes:
    if isinstance(draw_value, bytes):
        return draw_value
    return json.dumps(draw_value, ensure_ascii=False).encode()


tool_defs = st.lists(st.fixed_dictionaries(
    {"name": st.text(max_size=6) | st.integers() | st.none()},
    optional={"execution": st.fixed_dictionaries({}, optional={
        "requirements": st.lists(st.sampled_from(REQUIREMENTS) | st.integers() | st.none(), max_size=5)
        | json_values}),
        "_meta": st.dictionaries(st.just("io.github.mcp-preconditions/requirements"), json_values)}),
    max_size=5)
tools_files = st.binary(max_size=80) | json_values | tool_defs | st.builds(lambda t: {"tools": t}, tool_defs)
knowledge_files = st.binary(max_size=80) | json_values | st.fixed_dictionaries({}, optional={
    "satisfied": st.lists(st.sampled_from(REQUIREMENTS) | st.integers(), max_size=4) | json_values,
    "unsatisfiable": st.lists(st.sampled_from(REQUIREMENTS), max_size=4) | json_values,
    "extra": st.none()})
claims_files = st.binary(max_size=40) | json_values | st.dictionaries(
    st.sampled_from(["sub", "role", "scope", "scp", "capabilities", "exp"]), json_values, max_size=4)


def run_cli(argv: list[str], ok: frozenset[int]) -> None:
    """One command: exit code in `ok` or 2 with the error line, never an exception or traceback."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except BaseException:
        TALLY.add("fuzz", cases=1, calls=1, tracebacks=1)
        raise
    TALLY.add("fuzz", cases=1, calls=1)
    stderr = err.getvalue()
    assert "Traceback" not in stderr
    assert code in ok | {2}, (argv, code, stderr)
    if code == 2:
        assert any(line.startswith(PREFIX) and len(line) > len(PREFIX)
                   for line in stderr.splitlines()), stderr


@FUZZ
@given(tools=tools_files, knowledge=knowledge_files)
def test_filter_on_fuzzed_tools_and_knowledge(workdir: Path, tools: Any, knowledge: Any) -> None:
    (workdir / "tools.json").write_bytes(file_content(tools))
    (workdir / "knowledge.json").write_bytes(file_content(knowledge))
    run_cli(["filter", "--tools", str(workdir / "tools.json"), "--knowledge",
             str(workdir / "knowledge.json")], frozenset({0}))


@FUZZ
@given(tools=tools_files, claims=claims_files)
def test_check_and_lint_on_fuzzed_tools_and_claims(workdir: Path, tools: Any, claims: Any) -> None:
    (workdir / "tools.json").write_bytes(file_content(tools))
    (workdir / "claims.json").write_bytes(file_content(claims))
    run_cli(["check", "--policy", str(POLICY), "--tools", str(workdir / "tools.json"), "--claims",
             str(workdir / "claims.json"), "--format", "json"], frozenset({0}))
    run_cli(["lint", "--tools", str(workdir / "tools.json")], frozenset({0, 1}))


@FUZZ
@given(data=st.binary(max_size=200) | tomlish.map(str.encode) | structured.map(to_toml))
def test_policy_validate_on_fuzzed_policies(workdir: Path, data: bytes) -> None:
    if b"callables" in data:
        data = data.replace(b"callables", b"callable_")  # never import modules named by a fuzzer
    (workdir / "policy.toml").write_bytes(data)
    run_cli(["policy", "validate", str(workdir / "policy.toml")], frozenset({0}))
