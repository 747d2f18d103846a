"""The fault matrix, resolver side: each built-in namespace's resolver replaced by one that raises
(per call, or while the snapshot pre-decides), times out, finds its backend down, or returns
garbage (five kinds). Every call must be denied with an `error` outcome; none may raise.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions import Identity, Status

from .cases import ALICE, LAUNCH, allowed_everywhere, guard, run_case
from .faults import GARBAGE, Substitute, substitute

NAMESPACES = ("auth", "capability", "env", "feature", "state")
REQUIREMENT = {ns: next(r for r in LAUNCH if r.startswith(ns + ":")) for ns in NAMESPACES}
MATRIX = [(ns, "raises", None, False) for ns in NAMESPACES]
MATRIX += [(ns, "raises", None, True) for ns in NAMESPACES]
MATRIX += [(ns, fault, None, False) for ns in NAMESPACES for fault in ("times out", "backend down")]
MATRIX += [(ns, "returns garbage", g, False) for ns in NAMESPACES for g in GARBAGE]


def case_id(case: tuple[str, str, Any, bool]) -> str:
    ns, fault, garbage, at_compile = case
    extra = " while pre-deciding" if at_compile else f" {garbage!r}" if fault == "returns garbage" else ""
    return f"{ns}: {fault}{extra}"


@pytest.fixture(autouse=True)
def no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELIABILITY_ENVIRONMENT", raising=False)


async def test_the_control_allows_every_call_when_nothing_fails() -> None:
    await allowed_everywhere(guard(), ["launch_rocket", *NAMESPACES])


@pytest.mark.parametrize("case", MATRIX, ids=[case_id(c) for c in MATRIX])
async def test_a_failing_resolver_denies_every_call(monkeypatch: pytest.MonkeyPatch,
                                                    case: tuple[str, str, Any, bool]) -> None:
    namespace, fault, garbage, at_compile = case
    substitute(monkeypatch, namespace, lambda inner: Substitute(inner, fault, garbage, at_compile))
    problems = await run_case("resolver faults", guard(), [namespace, "launch_rocket"],
                              REQUIREMENT[namespace])
    assert problems == []


async def test_the_reasons_say_what_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    substitute(monkeypatch, "state", lambda inner: Substitute(inner, "times out"))
    d = await guard().check_identity("state", Identity(principal=ALICE))
    assert [(o.requirement, o.status, o.reason) for o in d.outcomes] == [
        ("state:weather.clear", Status.ERROR, "resolver 'state' timed out after 0.05 s")]
    assert d.errors == ("state:weather.clear",)


async def test_the_matrix_covers_every_namespace_and_fault() -> None:
    tried = {(ns, fault) for ns, fault, _, _ in MATRIX}
    assert tried == {(ns, f) for ns in NAMESPACES
                     for f in ("raises", "times out", "backend down", "returns garbage")}
    assert len(MATRIX) == 5 * (2 + 2 + len(GARBAGE)) == 45

