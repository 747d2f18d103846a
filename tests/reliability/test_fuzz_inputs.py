"""Fuzzing the inputs a user hands us: the policy loader (random bytes, TOML-ish text, random
structured policies written as TOML) and the tools, knowledge and claims readers through the
command line, with lone surrogates, bidi controls and control characters in file contents and file
names, and closed, full or broken standard streams. Never a traceback: a policy is valid or a
PolicyError listing its problems; the CLI exits 0/1 or 2 with `mcp-preconditions: error:` lines,
none of which shows a hidden character raw.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import sys
import unicodedata
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
# Lone surrogates (valid JSON escapes, not Unicode), bidi controls, C0/C1 controls and separators.
HOSTILE = ["\ud800", "\udfff", "\udc80", "\u202e", "\u202a", "\u2066", "\u2069", "\u200f", "\x1b",
           "\x00", "\n", "\r", "\x85", "\u2028", "\ufeff"]
hostile_text = st.lists(st.sampled_from(HOSTILE) | st.text(max_size=3), min_size=1, max_size=6).map(
    "".join)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                           | st.text(max_size=16) | st.sampled_from(REQUIREMENTS) | hostile_text,
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8) | hostile_text | st.sampled_from(
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
    # ASCII escapes: a lone surrogate can only be spelled so (`"\\ud800"`), as a real file would.
    return json.dumps(draw_value, ensure_ascii=True).encode()


tool_defs = st.lists(st.fixed_dictionaries(
    {"name": st.text(max_size=6) | hostile_text | st.integers() | st.none()},
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


class Failing(io.RawIOBase):
    """A standard stream whose writes fail: a reader that went away, or a full disk."""

    def __init__(self, code: int) -> None:
        self.code = code

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise OSError(self.code, "Broken pipe" if self.code == errno.EPIPE else
                      "No space left on device")


HOSTILE_SUITE = "fuzz: surrogates, bidi, closed streams"


def stdout_for(state: str) -> io.TextIOWrapper | None:
    """A real, strict UTF-8 text stdout (a StringIO would accept what a terminal refuses)."""
    if state == "closed":
        return None
    raw: io.BytesIO | Failing = io.BytesIO() if state == "open" else \
        Failing(errno.EPIPE if state == "broken" else errno.ENOSPC)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors="strict")


def shows_nothing_hidden(line: str) -> bool:
    return all(unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in line)


def run_cli(argv: list[str], ok: frozenset[int], stdout: str = "open", suite: str = "fuzz") -> None:
    """One command: exit code in `ok` or 2 with the error lines, never an exception or traceback.
    With stdout closed, full or broken, the exit code is 2 whatever the input."""
    out, err = stdout_for(stdout), io.StringIO()
    saved = sys.stdout
    try:
        sys.stdout = out
        with contextlib.redirect_stderr(err):
            code = main(argv)
    except BaseException:
        TALLY.add(suite, cases=1, calls=1, tracebacks=1)
        raise
    finally:
        sys.stdout = saved
    TALLY.add(suite, cases=1, calls=1)
    stderr = err.getvalue()
    assert "Traceback" not in stderr
    assert code in (ok | {2} if stdout == "open" else {2}), (argv, code, stderr)
    assert all(shows_nothing_hidden(line) for line in stderr.splitlines()), stderr
    if code == 2:
        assert stderr.splitlines() and all(
            line.startswith((PREFIX, "mcp-preconditions: warning: ")) and len(line) > len(PREFIX)
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


@FUZZ
@given(tools=tools_files, knowledge=knowledge_files, claims=claims_files,
       stdout=st.sampled_from(["open", "closed", "broken", "full"]),
       command=st.sampled_from(["check", "check-json", "filter", "filter-table", "lint", "present"]))
def test_hostile_contents_and_closed_streams(workdir: Path, tools: Any, knowledge: Any, claims: Any,
                                             stdout: str, command: str) -> None:
    (workdir / "tools.json").write_bytes(file_content(tools))
    (workdir / "knowledge.json").write_bytes(file_content(knowledge))
    (workdir / "claims.json").write_bytes(file_content(claims))
    t, k, c = (str(workdir / f) for f in ("tools.json", "knowledge.json", "claims.json"))
    argv = {"check": ["check", "--policy", str(POLICY), "--tools", t, "--claims", c],
            "check-json": ["check", "--policy", str(POLICY), "--tools", t, "--format", "json"],
            "filter": ["filter", "--tools", t, "--knowledge", k],
            "filter-table": ["filter", "--tools", t, "--knowledge", k, "--format", "table"],
            "lint": ["lint", "--tools", t],
            "present": ["present", "--tools", t, "--tier", "small"]}[command]
    run_cli(argv, frozenset({0, 1}), stdout, suite=HOSTILE_SUITE)


@FUZZ
@given(name=hostile_text.filter(lambda n: "/" not in n))
def test_hostile_file_names_are_escaped_in_messages(workdir: Path, name: str) -> None:
    run_cli(["check", "--policy", str(POLICY), "--tools", str(workdir / f"missing-{name}.json")],
            frozenset(), suite=HOSTILE_SUITE)
    run_cli(["policy", "validate", str(workdir / f"missing-{name}.toml")], frozenset(),
            suite=HOSTILE_SUITE)
