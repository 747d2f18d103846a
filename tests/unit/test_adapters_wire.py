"""Reading the requirements a listed tool carries (`wire_requirements`, `meta_requirements`): both
places are read and united, and anything but a list of strings is refused, never read as none.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions.errors import RequirementError
from mcp_preconditions.wire import META_KEY, meta_requirements, wire_requirements


def test_execution_and_the_mirror_are_united_in_order() -> None:
    tool = {"name": "t", "execution": {"requirements": ["env:a", "env:b"]},
            "_meta": {META_KEY: ["env:b", "env:c"], "other": 1}}
    assert wire_requirements(tool) == ("env:a", "env:b", "env:c")


@pytest.mark.parametrize("tool", [{"name": "t"}, {"name": "t", "execution": {}},
                                  {"name": "t", "execution": None, "_meta": {"x": 1}},
                                  {"name": "t", "_meta": {META_KEY: []}}])
def test_a_tool_that_carries_nothing_has_no_requirements(tool: dict[str, Any]) -> None:
    assert wire_requirements(tool) == ()


@pytest.mark.parametrize(("tool", "message"), [
    ({"name": "t", "execution": ["env:a"]}, "tool 't': execution must be an object, not list"),
    ({"name": "t", "execution": {"requirements": "env:a"}},
     "tool 't': execution.requirements must be a list of requirement strings, not str"),
    ({"name": "t", "_meta": {META_KEY: ["env:a", 2]}},
     f"tool 't': _meta['{META_KEY}'] must be a list of requirement strings, not list"),
])
def test_a_malformed_list_is_refused(tool: dict[str, Any], message: str) -> None:
    with pytest.raises(RequirementError) as bad:
        wire_requirements(tool)
    assert str(bad.value) == message


def test_meta_requirements_reads_only_the_mirror_key() -> None:
    assert meta_requirements("t", None) == ()
    assert meta_requirements("t", {"other": ["env:a"]}) == ()
    assert meta_requirements("t", {META_KEY: ("env:a",)}) == ("env:a",)
