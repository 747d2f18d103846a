"""The reliability counts of the two tiers (tests/reliability/tally.py): `make pytest` runs them as two
pytest runs, and `.run/reliability.json` must hold the suite's whole count, not the last run's."""

from __future__ import annotations

import json
from pathlib import Path

from tests.reliability.tally import Tally, tier_file


def _tally(cases: int, wrong: int = 0) -> Tally:
    tally = Tally()
    tally.add("fuzz", cases=cases, calls=2 * cases, wrongly_allowed=wrong)
    return tally


def test_both_tiers_are_added_up_once_each_has_run(tmp_path: Path) -> None:
    artefact = tmp_path / "reliability.json"
    assert _tally(10).write(artefact, tier="default") is None  # the interop tier has not run
    assert not artefact.exists()
    both = _tally(3, wrong=1).write(artefact, tier="interop")
    assert both is not None and both.lines()[-1] == (
        "total: 13 cases, 26 calls, 1 wrongly allowed, 0 tracebacks, 0 confidential names seen")
    written = json.loads(artefact.read_text(encoding="utf-8"))
    assert written["total"]["cases"] == 13 and set(written["tiers"]) == {"default", "interop"}
    assert json.loads(tier_file("default", artefact).read_text(encoding="utf-8"))["total"][
        "cases"] == 10


def test_a_run_of_both_tiers_writes_its_own_counts(tmp_path: Path) -> None:
    artefact = tmp_path / "reliability.json"
    _tally(10).write(artefact, tier="interop")  # an earlier tier's file is not added to it
    assert _tally(4).write(artefact) is not None
    assert json.loads(artefact.read_text(encoding="utf-8"))["total"]["cases"] == 4
