"""`mcp-preconditions log summarize`: per tool, revision and replica summaries of JSONL decision logs
written by the real JsonlRecorder; bad lines named and skipped (exit 1), unreadable files exit 2,
and memory that does not grow with the number of lines."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions import Guard, Identity
from mcp_preconditions.cli import main
from mcp_preconditions.decision_sinks import JsonlRecorder
from mcp_preconditions.logsummary import MAX_LINE_BYTES, BadLines, Summary, Timeline, read_records
from mcp_preconditions.policy.load import parse_policy

POLICY_A = b'environment = ["production"]\n[tools.launch]\nrequirements = ["env:production", "state:go"]\n'
POLICY_B = b'environment = ["production"]\n[state.values]\ngo = true\n' \
           b'[tools.launch]\nrequirements = ["env:production", "state:go"]\n'


def write_log(path: Path, replica: str, policy: bytes, calls: list[str]) -> str:
    """Decisions of a real Guard written by the real JSONL sink; returns the policy revision."""
    recorder = JsonlRecorder(path, {"replica": replica})
    source = parse_policy(policy, "p.toml")
    guard = Guard(source, {"status": []}, entry_points=False, recorder=recorder)
    for tool in calls:
        guard.decide(tool, Identity())
    recorder.close()
    return source.revision


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["log", "summarize", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def test_two_replicas_summarised_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "decisions.jsonl"
    rev_a = write_log(log, "r1", POLICY_A, ["launch", "launch", "status"])
    rev_b = write_log(log, "r2", POLICY_B, ["launch"])
    write_log(log, "r1", POLICY_B, ["launch"])
    code, out, err = run(capsys, str(log), "--format", "json")
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert (summary["records"], summary["skipped"]) == (5, 0)
    assert summary["tools"] == [
        {"tool": "launch", "allowed": 2, "denied": 2, "errors": 0,
         "top_unmet": [{"requirement": "state:go", "count": 2}],
         "revisions": [rev_a, rev_b], "replicas": ["r1", "r2"]},
        {"tool": "status", "allowed": 1, "denied": 0, "errors": 0, "top_unmet": [],
         "revisions": [rev_a], "replicas": ["r1"]}]
    assert [(r["revision"], r["records"], r["replicas"]) for r in summary["revisions"]] == [
        (rev_a, 3, ["r1"]), (rev_b, 2, ["r2", "r1"])]
    assert summary["replicas"] == [
        {"replica": "r1", "records": 4, "revisions": [rev_a, rev_b], "last_revision": rev_b},
        {"replica": "r2", "records": 1, "revisions": [rev_b], "last_revision": rev_b}]


def test_the_table_names_tools_revisions_and_replicas(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "decisions.jsonl"
    rev = write_log(log, "r1", POLICY_A, ["launch", "status"])
    code, out, _ = run(capsys, str(log))
    lines = out.splitlines()
    assert code == 0
    assert lines[:3] == ["tool    allowed  denied  errors  top unmet     revisions",
                         f"launch  0        1       0       state:go (1)  {rev}",
                         f"status  1        0       0       -             {rev}"]
    assert lines[4].split() == ["revision", "records", "first", "seen", "(UTC)", "last", "seen",
                                "(UTC)", "replicas"]
    assert lines[5].startswith(f"{rev}  2") and lines[5].endswith("r1")
    assert lines[7:] == ["replica  records  last revision  revisions",
                         f"r1       2        {rev}   {rev}", "", "2 decision record(s)"]


def test_top_unmet_are_the_most_frequent_ties_in_code_point_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "d.jsonl"
    rows = [["b", "a"], ["b"], ["c"], ["a", "a"]]  # a requirement counts once per call
    log.write_text("".join(json.dumps({"tool": "t", "allowed": False, "unmet": u}) + "\n"
                           for u in rows))
    code, out, _ = run(capsys, str(log), "--format", "json", "--top", "2")
    assert code == 0
    assert json.loads(out)["tools"][0]["top_unmet"] == [{"requirement": "a", "count": 2},
                                                       {"requirement": "b", "count": 2}]


def test_bad_lines_are_named_skipped_and_exit_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "d.jsonl"
    good = json.dumps({"tool": "t", "allowed": True, "unmet": []})
    log.write_bytes("\n".join([good, "{oops", "", "[1]", '{"tool": "t"}', good,
                               '{"tool": "t", "allowed": true, "unmet": [1]}',
                               '{"tool": "t", "allowed": true, "unmet": [], "revision": 7}']).encode()
                    + b"\n\xff\n")
    code, out, err = run(capsys, str(log), "--format", "json")
    assert code == 1
    assert err.splitlines() == [
        f"mcp-preconditions: warning: {log}:2: not JSON (Expecting property name enclosed in "
        f"double quotes at column 2); line skipped",
        f"mcp-preconditions: warning: {log}:4: not a JSON object; line skipped",
        f'mcp-preconditions: warning: {log}:5: not a decision record: no "allowed" true/false; '
        f"line skipped",
        f'mcp-preconditions: warning: {log}:7: not a decision record: "unmet" is not a list of '
        f"strings; line skipped",
        f'mcp-preconditions: warning: {log}:8: not a decision record: "revision" is not a string; '
        f"line skipped",
        f"mcp-preconditions: warning: {log}: 1 more bad line(s) skipped"]
    summary = json.loads(out)
    assert (summary["records"], summary["skipped"]) == (2, 6)


def test_an_unreadable_file_is_exit_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    assert run(capsys, str(missing)) == (
        2, "", f"mcp-preconditions: error: {missing}: cannot read: No such file or directory\n")
    assert run(capsys, str(tmp_path)) == (
        2, "", f"mcp-preconditions: error: {tmp_path}: cannot read: Is a directory\n")
    code, _, err = run(capsys, str(tmp_path / "x.jsonl"), "--top", "0")
    assert (code, err) == (2, "mcp-preconditions: error: --top must be 1 or more, got 0\n")


def test_an_overlong_line_is_skipped_without_being_held(tmp_path: Path) -> None:
    bad: list[tuple[str, int, str]] = []
    good = json.dumps({"tool": "t", "allowed": True, "unmet": []}).encode() + b"\n"
    stream = io.BytesIO(good + b"x" * (3 * MAX_LINE_BYTES) + b"\n" + good)
    records = list(read_records("s", stream, lambda *a: bad.append(a)))
    assert len(records) == 2 and bad == [("s", 2, f"longer than {MAX_LINE_BYTES} bytes")]


def test_memory_does_not_grow_with_the_number_of_lines(tmp_path: Path) -> None:
    line = json.dumps({"tool": "t", "allowed": False, "unmet": ["state:go"], "revision": "r",
                       "replica": "a", "time": 1.0}).encode() + b"\n"

    def peak(lines: int) -> int:
        summary, stream = Summary(), io.BytesIO(line * lines)
        tracemalloc.start()  # after the input is in memory: only the reading is measured
        for record in read_records("s", stream, lambda *a: None):
            summary.add(record)
        peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert summary.records == lines
        return peak_bytes

    small, large = peak(500), peak(10_000)
    assert large < small * 2, (small, large)


def test_standard_input_is_read_with_a_dash(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    record: dict[str, Any] = {"tool": "t", "allowed": True, "unmet": []}

    class Stdin:
        buffer = io.BytesIO(json.dumps(record).encode() + b"\n")

    monkeypatch.setattr("sys.stdin", Stdin())
    code, out, _ = run(capsys, "-", "--format", "json")
    assert code == 0 and json.loads(out)["records"] == 1


def test_the_latest_revision_is_by_record_time_not_file_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def line(revision: str, when: float | None) -> str:
        record: dict[str, Any] = {"tool": "t", "allowed": True, "unmet": [], "revision": revision,
                                  "replica": "r1"}
        if when is not None:
            record["time"] = when
        return json.dumps(record) + "\n"

    newer, older = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    newer.write_text(line("new", 200.0))
    older.write_text(line("old", 100.0))
    code, out, _ = run(capsys, str(newer), str(older), "--format", "json")
    assert code == 0 and json.loads(out)["replicas"][0]["last_revision"] == "new"
    untimed = tmp_path / "c.jsonl"
    untimed.write_text(line("first", None) + line("second", None))
    code, out, _ = run(capsys, str(untimed), "--format", "json")
    assert json.loads(out)["replicas"][0]["last_revision"] == "second"


def test_a_time_too_large_for_a_float_is_no_time(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "d.jsonl"
    log.write_text('{"time": 1' + "0" * 400 + ', "tool": "t", "allowed": true, "unmet": [], '
                   '"revision": "r"}\n', encoding="utf-8")
    code, out, _ = run(capsys, str(log), "--format", "json")
    assert code == 0
    assert json.loads(out)["revisions"] == [{"revision": "r", "records": 1, "first_time": None,
                                             "last_time": None, "replicas": []}]


def _record(when: Any, tool: str = "t", allowed: bool = True) -> dict[str, Any]:
    return {"time": when, "tool": tool, "allowed": allowed, "unmet": []}


def test_the_timeline_widens_its_buckets_and_keeps_every_count() -> None:
    timeline = Timeline(max_buckets=10)
    for second in range(0, 3600, 7):  # an hour, a record every 7 s, every third one denied
        timeline.add(_record(1_000_000 + second, allowed=second % 3 != 0))
    timeline.add(_record(None))
    starts = timeline.buckets()
    assert timeline.width == 600 and len(starts) <= 10  # 1 s, 5 s, ... 10 min: 7 buckets
    assert starts == list(range(starts[0], starts[-1] + 600, 600))
    counts = [timeline.counts.get(s, {}).get("t", [0, 0]) for s in starts]
    expected_denied = sum(1 for second in range(0, 3600, 7) if second % 3 == 0)
    assert sum(a for a, _ in counts) == 515 - expected_denied
    assert sum(d for _, d in counts) == expected_denied
    assert timeline.untimed == 1


def test_bad_lines_are_told_five_per_file_then_counted() -> None:
    told: list[str] = []
    bad = BadLines(told.append)
    for number in range(1, 9):
        bad("a.jsonl", number, "not JSON")
    bad("b.jsonl", 3, "not UTF-8")
    bad.report_rest()
    assert told == [*(f"a.jsonl:{n}: not JSON; line skipped" for n in range(1, 6)),
                    "b.jsonl:3: not UTF-8; line skipped", "a.jsonl: 3 more bad line(s) skipped"]
