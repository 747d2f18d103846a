"""Unit tests of the client-side strict evaluator (SPEC §6): knowledge sources and their precedence,
the per-tool verdict rule, malformed input, learning with a TTL, and the three filter modes.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from mcp_preconditions.client import (
    ARGUMENT_DEPENDENT_META_KEY,
    DENIAL_ERRORS_META_KEY,
    ClientResolver,
    FilterMode,
    FilterResult,
    Knowledge,
    ToolVerdict,
    filter_tools,
    verdict_for,
)
from mcp_preconditions.errors import InputError, RegistryError, ToolsFileError
from mcp_preconditions.outcomes import Verdict
from mcp_preconditions.wire import META_KEY

PROCEED, WILL_FAIL = Verdict.PROCEED, Verdict.WILL_FAIL


def tool(name: str, reqs: Any = None, *, meta: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if reqs is not None:
        out["execution"] = {"requirements": reqs}
    if meta is not None:
        out["_meta"] = {META_KEY: meta}
    return out


def denial(*unmet: Any, tool_name: str = "t") -> dict[str, Any]:
    return {"error": "unmet_requirements", "tool": tool_name, "unmet": list(unmet), "withheld": 0}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Resolver:
    """A client resolver double: answers from a dict, raises for 'boom', counts its calls."""

    def __init__(self, namespace: str, answers: dict[str, Any]) -> None:
        self.namespace = namespace
        self.answers = answers
        self.calls: list[str] = []

    def knows(self, requirement: str) -> Any:
        self.calls.append(requirement)
        if requirement.endswith("boom"):
            raise RuntimeError("backend down")
        return self.answers.get(requirement)


KN = Knowledge(satisfied=["auth:oauth2", "env:production"], unsatisfiable=["state:weather.clear"])


# --- the verdict rule ---------------------------------------------------------------------------
@pytest.mark.parametrize(("reqs", "expected"), [
    (None, ToolVerdict("t", PROCEED)),
    ([], ToolVerdict("t", PROCEED)),
    (["auth:oauth2", "env:production"], ToolVerdict("t", PROCEED)),
    (["auth:oauth2", "state:weather.clear"], ToolVerdict("t", WILL_FAIL, ("state:weather.clear",))),
    (["state:weather.clear", "feature:x"],
     ToolVerdict("t", PROCEED, ("state:weather.clear",), ("feature:x",))),
    (["feature:x"], ToolVerdict("t", PROCEED, (), ("feature:x",))),
    (["state:weather.clear", "auth:oauth2", "state:weather.clear"],
     ToolVerdict("t", WILL_FAIL, ("state:weather.clear",))),
])
def test_verdict_rule(reqs: Any, expected: ToolVerdict) -> None:
    assert verdict_for(tool("t", reqs), KN) == expected


def test_will_fail_names_only_the_unsatisfiable_in_tool_order() -> None:
    kn = Knowledge(satisfied=["a:1"], unsatisfiable=["b:2", "c:3"])
    v = verdict_for(tool("t", ["c:3", "a:1", "b:2"]), kn)
    assert v.will_fail and v.unsatisfiable == ("c:3", "b:2") and v.unknown == ()


def test_meta_mirror_is_read_and_wire_field_wins() -> None:
    assert verdict_for(tool("t", meta=["state:weather.clear"]), KN).verdict is WILL_FAIL
    assert verdict_for(tool("t", ["auth:oauth2"], meta=["state:weather.clear"]), KN).verdict is PROCEED


@pytest.mark.parametrize("variant", [
    "state:Weather.clear", "state:weather.clear ", " state:weather.clear", "state:weather.сlear",
    "state:weather.clear\u200b", "STATE:weather.clear", "state:weather",
])
def test_matching_is_exact(variant: str) -> None:
    assert verdict_for(tool("t", [variant]), KN) == ToolVerdict("t", PROCEED, (), (variant,))


def test_nfc_and_nfd_are_different_strings() -> None:
    kn = Knowledge(unsatisfiable=["env:caf\u00e9"])
    assert verdict_for(tool("t", ["env:cafe\u0301"]), kn).verdict is PROCEED
    assert verdict_for(tool("t", ["env:caf\u00e9"]), kn).verdict is WILL_FAIL


# --- malformed fields: proceed plus a warning -----------------------------------------------------
@pytest.mark.parametrize(("reqs", "warning"), [
    ({"a": 1}, "tool 't': requirements must be a list of strings, got dict; proceeding as if absent"),
    ("state:weather.clear",
     "tool 't': requirements must be a list of strings, got str; proceeding as if absent"),
    (["state:weather.clear", 5],
     "tool 't': requirement #1 must be a string, got int 5; proceeding as if absent"),
    (["state:weather.clear", ""], "tool 't': requirement #1 is empty; proceeding as if absent"),
    (["state:weather.clear", ["x"]],
     "tool 't': requirement #1 must be a string, got list ['x']; proceeding as if absent"),
    ([None, "state:weather.clear"],
     "tool 't': requirement #0 must be a string, got NoneType None; proceeding as if absent"),
])
def test_malformed_field_proceeds_with_warning(reqs: Any, warning: str) -> None:
    assert verdict_for(tool("t", reqs), KN) == ToolVerdict("t", PROCEED, warnings=(warning,))


def test_malformed_meta_mirror_proceeds_with_warning() -> None:
    v = verdict_for(tool("t", meta=7), KN)
    assert v == ToolVerdict("t", PROCEED, warnings=(
        "tool 't': requirements must be a list of strings, got int; proceeding as if absent",))


def test_tool_that_is_not_an_object_is_kept_with_warning() -> None:
    result = filter_tools([tool("a", ["state:weather.clear"]), "garbage"], KN, "hide")
    assert result.kept == ("garbage",)
    assert result.warnings == ("tool #1 is not an object (str); kept as is",)
    assert result.to_json() == {"kept": ["#1"], "hidden": [
        {"name": "a", "unsatisfiable": ["state:weather.clear"]}]}


def test_tool_without_a_string_name_is_named_by_position() -> None:
    result = filter_tools([tool("a"), {"execution": {"requirements": ["state:weather.clear"]}}], KN)
    assert result.hidden == (("#1", ("state:weather.clear",)),)


# --- declared knowledge and the knowledge file -----------------------------------------------------
def test_state_of_declared_and_unknown() -> None:
    assert KN.state("auth:oauth2") == "satisfied"
    assert KN.state("state:weather.clear") == "unsatisfiable"
    assert KN.state("auth:oauth2 ") is None


def test_from_dict_round_trip_and_missing_keys() -> None:
    data = {"satisfied": ["a:1", "b:2"], "unsatisfiable": ["c:3"]}
    assert Knowledge.from_dict(data).to_dict() == data
    assert Knowledge.from_dict({"unsatisfiable": ["c:3"]}).to_dict() == {
        "satisfied": [], "unsatisfiable": ["c:3"]}
    assert Knowledge.from_dict({}).to_dict() == {"satisfied": [], "unsatisfiable": []}


@pytest.mark.parametrize(("data", "message"), [
    ([], "invalid knowledge: must be a JSON object with keys 'satisfied' and 'unsatisfiable', got list"),
    ({"satisfied": [], "unsatisfied": []},
     "invalid knowledge: unknown key(s) 'unsatisfied' (expected 'satisfied', 'unsatisfiable')"),
    ({"satisfied": "a:1"}, "invalid knowledge: satisfied: must be a list of strings, got str"),
    ({"unsatisfiable": {"a": 1}}, "invalid knowledge: unsatisfiable: must be a list of strings, got dict"),
    ({"satisfied": ["a:1", "b:2", 3]}, "invalid knowledge: satisfied[2]: must be a string, got int"),
    ({"satisfied": ["a:1", None]}, "invalid knowledge: satisfied[1]: must be a string, got NoneType"),
    ({"unsatisfiable": [""]}, "invalid knowledge: unsatisfiable[0]: must not be empty"),
    ({"satisfied": ["a:1", "b:2"], "unsatisfiable": ["c:3", "b:2"]},
     "invalid knowledge: unsatisfiable[1]: 'b:2' is also in satisfied[1]"),
    ({"satisfied": [1], "unsatisfiable": [""]},
     "invalid knowledge: satisfied[0]: must be a string, got int; unsatisfiable[0]: must not be empty"),
])
def test_knowledge_file_errors(data: Any, message: str) -> None:
    with pytest.raises(ToolsFileError) as info:
        Knowledge.from_dict(data)
    assert str(info.value) == message
    with pytest.raises(ToolsFileError) as info:
        Knowledge.from_dict(data, source="k.json")
    assert str(info.value) == f"k.json: {message}"


def test_constructor_validates_like_the_file() -> None:
    with pytest.raises(ToolsFileError) as info:
        Knowledge(satisfied="auth:oauth2")
    assert str(info.value) == "invalid knowledge: satisfied: must be a list of strings, got str"
    assert Knowledge(satisfied={"a:1"}, unsatisfiable=(r for r in ["b:2"])).to_dict() == {
        "satisfied": ["a:1"], "unsatisfiable": ["b:2"]}


def test_learning_settings_are_validated() -> None:
    with pytest.raises(InputError) as info:
        Knowledge(learn_maxsize=0)
    assert str(info.value) == "learn_maxsize must be >= 1 and learn_ttl >= 0, got 0 and 300.0"


# --- learned knowledge ----------------------------------------------------------------------------
def test_learned_denial_is_unsatisfiable_until_the_ttl_expires() -> None:
    clock = FakeClock()
    kn = Knowledge(learn_ttl=60, clock=clock)
    t = tool("t", ["state:weather.clear"])
    assert verdict_for(t, kn).verdict is PROCEED
    assert kn.learn_denial(denial("state:weather.clear", "state:weather.clear")) == (
        "state:weather.clear",)
    assert verdict_for(t, kn) == ToolVerdict("t", WILL_FAIL, ("state:weather.clear",))
    clock.now += 59.9
    assert kn.learned() == frozenset({"state:weather.clear"})
    clock.now += 0.1
    assert verdict_for(t, kn).verdict is PROCEED
    assert kn.learned() == frozenset()


def test_learned_never_overrides_declared() -> None:
    kn = Knowledge(satisfied=["auth:oauth2"])
    kn.learn_denial(denial("auth:oauth2", "env:staging"))
    assert kn.state("auth:oauth2") == "satisfied"
    assert kn.state("env:staging") == "unsatisfiable"
    assert verdict_for(tool("t", ["auth:oauth2"]), kn).verdict is PROCEED


def test_learned_is_bounded_and_forgettable() -> None:
    kn = Knowledge(learn_maxsize=2)
    for req in ("a:1", "b:2", "c:3"):
        kn.learn_denial(denial(req))
    assert kn.learned() == frozenset({"b:2", "c:3"})
    kn.forget()
    assert kn.learned() == frozenset()


def test_learned_denial_with_withheld_only_learns_nothing() -> None:
    kn = Knowledge()
    assert kn.learn_denial({"error": "unmet_requirements", "tool": "t", "unmet": [], "withheld": 2}) == ()
    assert kn.learned() == frozenset()


@pytest.mark.parametrize(("payload", "problem"), [
    (None, "payload must be an object, got NoneType"),
    ({"error": "other", "unmet": ["a:1"]}, "'error' must be 'unmet_requirements', got 'other'"),
    ({"tool": "t", "unmet": ["a:1"]}, "'error' must be 'unmet_requirements', got None"),
    ({"error": "unmet_requirements", "unmet": "a:1"}, "'unmet' must be a list of strings, got str"),
    ({"error": "unmet_requirements"}, "'unmet' must be a list of strings, got NoneType"),
    ({"error": "unmet_requirements", "unmet": ["a:1", 2]}, "'unmet[1]' must be a non-empty string, got 2"),
    ({"error": "unmet_requirements", "unmet": [""]}, "'unmet[0]' must be a non-empty string, got ''"),
])
def test_malformed_denial_is_ignored_with_a_warning(payload: Any, problem: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    kn = Knowledge()
    with caplog.at_level(logging.WARNING, logger="mcp_preconditions.client"):
        assert kn.learn_denial(payload) == ()
    assert [r.getMessage() for r in caplog.records] == [f"ignored a server denial: {problem}"]
    assert kn.learned() == frozenset()


def test_requirements_that_ended_as_error_are_not_learned() -> None:
    # The server could not decide them (backend down): they may hold on the next call (SPEC §6).
    kn = Knowledge()
    assert kn.learn_denial(denial("state:door", "zz:backend"), ["zz:backend"]) == ("state:door",)
    assert kn.learned() == frozenset({"state:door"})


def test_a_json_rpc_denial_names_its_errors_in_data_meta() -> None:
    kn = Knowledge()
    data = {**denial("state:door", "zz:backend"), "_meta": {DENIAL_ERRORS_META_KEY: ["zz:backend"]}}
    assert kn.learn_denial(data) == ("state:door",)


@pytest.mark.parametrize("errors", ["zz:backend", [""], [3], {"zz:backend": 1}])
def test_a_malformed_error_list_ignores_the_denial(errors: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    kn = Knowledge()
    with caplog.at_level(logging.WARNING, logger="mcp_preconditions.client"):
        assert kn.learn_denial(denial("state:door", "zz:backend"), errors) == ()
    assert [r.getMessage() for r in caplog.records] == [
        "ignored a server denial: a list of requirements not to learn must be a list of non-empty "
        "strings"]
    assert kn.learned() == frozenset()


def test_argument_dependent_requirements_are_never_learned() -> None:
    # Another call of the same tool, with other arguments, may be allowed (SPEC §11).
    kn = Knowledge()
    meta = {ARGUMENT_DEPENDENT_META_KEY: ["capability:rocket.launch"],
            DENIAL_ERRORS_META_KEY: ["zz:backend"]}
    payload = denial("capability:rocket.launch", "zz:backend", "env:production")
    assert kn.learn_denial(payload, meta=meta) == ("env:production",)
    assert kn.learned() == frozenset({"env:production"})


def test_argument_dependent_requirements_in_json_rpc_data_meta_are_not_learned() -> None:
    kn = Knowledge()
    data = {**denial("capability:x", "env:a"), "_meta": {ARGUMENT_DEPENDENT_META_KEY: ["capability:x"]}}
    assert kn.learn_denial(data) == ("env:a",)


@pytest.mark.parametrize("bad", ["capability:x", [None], 7])
def test_a_malformed_argument_dependent_list_ignores_the_denial(bad: Any) -> None:
    kn = Knowledge()
    assert kn.learn_denial(denial("capability:x"), meta={ARGUMENT_DEPENDENT_META_KEY: bad}) == ()
    assert kn.learned() == frozenset()


# --- client-side resolvers --------------------------------------------------------------------------
def test_resolver_decides_its_namespace_and_is_memoised_per_call() -> None:
    auth = Resolver("auth", {"auth:oauth2": "satisfied", "auth:scope:admin": "unsatisfiable"})
    assert isinstance(auth, ClientResolver)
    kn = Knowledge(resolvers=[auth])
    tools = [tool("a", ["auth:oauth2", "auth:scope:admin"]), tool("b", ["auth:scope:admin"]),
             tool("c", ["auth:claim:x:y", "env:x"])]
    result = filter_tools(tools, kn, "annotate")
    assert result.verdicts == (ToolVerdict("a", WILL_FAIL, ("auth:scope:admin",)),
                               ToolVerdict("b", WILL_FAIL, ("auth:scope:admin",)),
                               ToolVerdict("c", PROCEED, (), ("auth:claim:x:y", "env:x")))
    assert auth.calls == ["auth:oauth2", "auth:scope:admin", "auth:claim:x:y"]


def test_precedence_declared_then_resolver_then_learned() -> None:
    auth = Resolver("auth", {"auth:oauth2": "unsatisfiable", "auth:scope:a": "satisfied"})
    kn = Knowledge(satisfied=["auth:oauth2"], resolvers=[auth])
    kn.learn_denial(denial("auth:scope:a", "auth:scope:b"))
    assert kn.state("auth:oauth2") == "satisfied"       # declared beats the resolver
    assert kn.state("auth:scope:a") == "satisfied"      # the resolver beats learned
    assert kn.state("auth:scope:b") == "unsatisfiable"  # the resolver does not know: learned


def test_failing_or_odd_resolver_means_unknown_with_a_warning() -> None:
    kn = Knowledge(resolvers=[Resolver("state", {"state:odd": True})])
    result = filter_tools([tool("t", ["state:boom", "state:odd"])], kn, "hide")
    assert result.verdicts == (ToolVerdict("t", PROCEED, (), ("state:boom", "state:odd")),)
    assert result.warnings == (
        "client resolver 'state' failed on 'state:boom': RuntimeError: backend down; treated as unknown",
        "client resolver 'state' answered True for 'state:odd'; treated as unknown")
    assert verdict_for(tool("t", ["state:boom"]), kn).warnings == (
        "client resolver 'state' failed on 'state:boom': RuntimeError: backend down; treated as unknown",)


def test_two_resolvers_for_one_namespace_is_an_error() -> None:
    with pytest.raises(RegistryError) as info:
        Knowledge(resolvers=[Resolver("env", {}), Resolver("env", {})])
    assert str(info.value) == "two client resolvers for namespace 'env'"


# --- filtering ----------------------------------------------------------------------------------------
TOOLS = [tool("a"), tool("b", ["state:weather.clear"]), tool("c", ["auth:oauth2"]),
         tool("d", ["state:weather.clear", "feature:x"]),
         tool("e", ["env:production", "state:weather.clear"]), tool("f", {"bad": True})]


def test_hide() -> None:
    result = filter_tools(TOOLS, KN, "hide")
    assert result.mode is FilterMode.HIDE
    assert [t["name"] for t in result.kept] == ["a", "c", "d", "f"]
    assert all(k is TOOLS[i] for k, i in zip(result.kept, result.kept_index, strict=True))
    assert result.hidden == (("b", ("state:weather.clear",)), ("e", ("state:weather.clear",)))
    assert result.warnings == (
        "tool 'f': requirements must be a list of strings, got dict; proceeding as if absent",)
    assert result.to_json() == {"kept": ["a", "c", "d", "f"], "hidden": [
        {"name": "b", "unsatisfiable": ["state:weather.clear"]},
        {"name": "e", "unsatisfiable": ["state:weather.clear"]}]}


def test_demote() -> None:
    result = filter_tools(TOOLS, KN, FilterMode.DEMOTE)
    assert [t["name"] for t in result.kept] == ["a", "c", "d", "f", "b", "e"]
    assert result.hidden == ()
    assert [v.name for v in result.verdicts] == ["a", "b", "c", "d", "e", "f"]
    js = result.to_json()
    assert js["kept"] == ["a", "c", "d", "f", "b", "e"] and js["hidden"] == []
    assert js["verdicts"][2] == {"name": "d", "verdict": "proceed",
                                 "unsatisfiable": ["state:weather.clear"], "unknown": ["feature:x"]}
    assert js["verdicts"][4] == {"name": "b", "verdict": "will_fail",
                                 "unsatisfiable": ["state:weather.clear"], "unknown": []}


def test_annotate() -> None:
    result = filter_tools(TOOLS, KN, "annotate")
    assert list(result.kept) == TOOLS
    assert [v.verdict for v in result.verdicts] == [PROCEED, WILL_FAIL, PROCEED, PROCEED, WILL_FAIL,
                                                     PROCEED]
    assert [v["name"] for v in result.to_json()["verdicts"]] == ["a", "b", "c", "d", "e", "f"]
    assert result.to_json("hide") == {"kept": ["a", "b", "c", "d", "e", "f"], "hidden": []}


def test_filter_does_not_modify_the_tools() -> None:
    before = repr(TOOLS)
    for mode in FilterMode:
        filter_tools(TOOLS, KN, mode)
    assert repr(TOOLS) == before


def test_empty_list_and_unknown_mode() -> None:
    assert filter_tools([], KN) == FilterResult(FilterMode.HIDE, (), (), (), (), ())
    with pytest.raises(InputError) as info:
        filter_tools(TOOLS, KN, "drop")
    assert str(info.value) == "unknown filter mode 'drop' (expected 'hide', 'demote' or 'annotate')"


def test_learning_while_filtering_from_many_threads() -> None:
    kn = Knowledge(satisfied=["auth:oauth2"], learn_maxsize=64)
    tools = [tool(f"t{i}", ["auth:oauth2", f"state:k{i % 50}"]) for i in range(200)]
    errors: list[BaseException] = []

    def learn(offset: int) -> None:
        try:
            for i in range(200):
                kn.learn_denial(denial(f"state:k{(i + offset) % 50}"))
        except BaseException as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(20):
                result = filter_tools(tools, kn, "hide")
                assert len(result.kept) + len(result.hidden) == 200
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=learn, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert filter_tools(tools, kn, "hide").to_json()["hidden"] == [
        {"name": f"t{i}", "unsatisfiable": [f"state:k{i % 50}"]} for i in range(200)]


@pytest.mark.parametrize(("tools", "message"), [
    ({"tools": []}, 'filter_tools: tools must be a list of tool definitions, got dict: pass its "tools" '
                    "array"),
    ("abc", "filter_tools: tools must be a list of tool definitions, got str"),
    (None, "filter_tools: tools must be a list of tool definitions, got NoneType"),
])
def test_filter_tools_refuses_what_is_not_a_list_of_tools(tools: Any, message: str) -> None:
    with pytest.raises(InputError) as err:
        filter_tools(tools, Knowledge())
    assert str(err.value) == message
