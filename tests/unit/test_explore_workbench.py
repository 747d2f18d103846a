"""The explorer's workbench as the server uses it: policies compiled off the event loop (compiling
builds a Guard, which would stall every other request), and kept compiled within a bound on their
number and on their total text.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.testclient import TestClient

from mcp_preconditions.explore import Inputs, Workbench, build_app
from mcp_preconditions.explore.workbench import COMPILED_KEPT, COMPILED_TEXT, Compiled, Overrides

POLICY = '[tools.t]\nrequirements = ["env:prod"]\n'


class Watched(Workbench):
    """Notes, for each policy compiled, whether an event loop was running in its thread."""

    def __init__(self, inputs: Inputs) -> None:
        super().__init__(inputs)
        self.on_loop: list[bool] = []

    def compile(self, text: str, overrides: Overrides | None = None) -> Compiled:
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)
        return super().compile(text, overrides)


def _bench(tmp_path: Path, cls: type[Workbench] = Workbench) -> Workbench:
    return cls(Inputs(str(tmp_path / "policy.toml"), POLICY, [{"name": "t"}], "tools.json"))


def test_a_policy_is_compiled_off_the_event_loop(tmp_path: Path) -> None:
    bench = _bench(tmp_path, Watched)
    assert isinstance(bench, Watched)
    with TestClient(build_app(bench, "t0ken", ["testserver"])) as client:
        for path, extra in (("/api/decisions", {}), ("/api/call", {"tool": "t"}), ("/api/client", {})):
            response = client.post(path, json={"policy": POLICY + "# edited\n", **extra},
                                   headers={"x-explore-token": "t0ken"})
            assert response.status_code == 200, response.text
    # Each request compiles the edit and the file as read, both in a worker thread.
    assert bench.on_loop == [False] * 6


def test_at_most_16_policies_are_kept(tmp_path: Path) -> None:
    bench = _bench(tmp_path)
    for n in range(40):
        bench.compile(POLICY + f"# {n}\n")
    assert len(bench._compiled) == COMPILED_KEPT == 16


def test_large_policies_are_kept_within_the_text_bound(tmp_path: Path) -> None:
    bench = _bench(tmp_path)
    large = COMPILED_TEXT // 5  # a fifth of the bound each: at most 4 at once, not 16
    for n in range(10):
        assert bench.compile(POLICY + f"# {n}" + "x" * large + "\n").guard is not None
    assert len(bench._compiled) == 4
    assert sum(len(key[0]) for key in bench._compiled) <= COMPILED_TEXT


def test_a_policy_larger_than_the_bound_is_compiled_but_not_kept(tmp_path: Path) -> None:
    bench = _bench(tmp_path)
    bench.compile(POLICY)
    huge = POLICY + "#" + "x" * COMPILED_TEXT + "\n"
    assert bench.compile(huge).guard is not None
    assert [key[0] for key in bench._compiled] == [POLICY]
