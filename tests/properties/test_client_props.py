"""Hypothesis properties of the client evaluator (SPEC §6), each checked against a tiny, obviously
correct reference written here: strictness, order and duplicate independence, exact matching,
soundness against a server's truth, and what each filter mode keeps.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mcp_preconditions.client import FilterMode, Knowledge, filter_tools, verdict_for
from mcp_preconditions.outcomes import Verdict

# A small alphabet so that tools share requirements and knowledge often matters.
REQS = st.sampled_from([f"{ns}:{k}" for ns in ("auth", "env", "state", "feature", "x") for k in "abcdef"])
REQ_LISTS = st.lists(REQS, max_size=8)


def reference(reqs: list[str], satisfied: set[str], unsatisfiable: set[str]) -> tuple[Verdict, set[str]]:
    """SEP-2487 in four lines: act only if every requirement is known and one is unsatisfiable."""
    if all(r in satisfied or r in unsatisfiable for r in reqs) and any(r in unsatisfiable for r in reqs):
        return Verdict.WILL_FAIL, {r for r in reqs if r in unsatisfiable}
    return Verdict.PROCEED, set()


@st.composite
def knowledge_sets(draw: st.DrawFn) -> tuple[set[str], set[str]]:
    known = draw(st.dictionaries(REQS, st.booleans()))
    return {r for r, ok in known.items() if ok}, {r for r, ok in known.items() if not ok}


def tool(name: str, reqs: list[str]) -> dict[str, Any]:
    return {"name": name, "execution": {"requirements": reqs}}


@given(REQ_LISTS, knowledge_sets())
def test_matches_the_reference(reqs: list[str], sets: tuple[set[str], set[str]]) -> None:
    sat, unsat = sets
    v = verdict_for(tool("t", reqs), Knowledge(sat, unsat))
    expected, named = reference(reqs, sat, unsat)
    assert v.verdict is expected
    assert set(v.unsatisfiable) == {r for r in reqs if r in unsat}
    if expected is Verdict.WILL_FAIL:
        assert set(v.unsatisfiable) == named and v.unknown == ()
    assert set(v.unknown) == {r for r in reqs if r not in sat and r not in unsat}


@given(REQ_LISTS, knowledge_sets(), st.text(min_size=1), st.randoms())
def test_one_unknown_requirement_always_means_proceed(reqs: list[str], sets: tuple[set[str], set[str]],
                                                      extra: str, rnd: Any) -> None:
    sat, unsat = sets
    unknown = "zz-unknown:" + extra  # never in the knowledge alphabet
    mixed = [*reqs, unknown]
    rnd.shuffle(mixed)
    v = verdict_for(tool("t", mixed), Knowledge(sat, unsat))
    assert v.verdict is Verdict.PROCEED and unknown in v.unknown


@given(REQ_LISTS, knowledge_sets(), st.randoms())
def test_order_and_duplicates_do_not_matter(reqs: list[str], sets: tuple[set[str], set[str]],
                                            rnd: Any) -> None:
    kn = Knowledge(*sets)
    base = verdict_for(tool("t", reqs), kn)
    shuffled = [*reqs, *rnd.sample(reqs, k=len(reqs) // 2)]
    rnd.shuffle(shuffled)
    other = verdict_for(tool("t", shuffled), kn)
    assert other.verdict is base.verdict
    assert sorted(other.unsatisfiable) == sorted(base.unsatisfiable)
    assert sorted(other.unknown) == sorted(base.unknown)
    assert len(set(other.unsatisfiable)) == len(other.unsatisfiable)


VARIANTS = [
    lambda s: s.upper(), lambda s: s + " ", lambda s: " " + s, lambda s: s + "\u200b",
    lambda s: s.replace("o", "\u043e"),               # Latin o -> Cyrillic о
    lambda s: s.replace("\u00e9", "e\u0301"),         # NFC é -> NFD e + combining acute
    lambda s: s.replace("e\u0301", "\u00e9"),         # NFD -> NFC
]


@given(st.sampled_from(["env:production", "state:door.open", "env:caf\u00e9", "env:cafe\u0301",
                        "auth:claim:role:ops"]), st.sampled_from(VARIANTS), st.booleans())
def test_distinct_strings_are_never_equal(known: str, variant: Any, known_ok: bool) -> None:
    other = variant(known)
    if other == known:  # this variant does not apply to this string
        other = known + "\u200b"
    kn = Knowledge(satisfied=[known] if known_ok else [], unsatisfiable=[] if known_ok else [known])
    v = verdict_for(tool("t", [other]), kn)
    assert v.verdict is Verdict.PROCEED and v.unknown == (other,)
    assert kn.state(other) is None


@st.composite
def worlds(draw: st.DrawFn) -> tuple[dict[str, bool], list[dict[str, Any]], set[str], set[str], list[str]]:
    """A server truth, tools over its requirements, client knowledge agreeing on a random subset,
    and denials the server might have sent (each names only truly unmet requirements)."""
    truth = draw(st.dictionaries(REQS, st.booleans(), min_size=1))
    names = sorted(truth)
    tools = [tool(f"t{i}", draw(st.lists(st.sampled_from(names), max_size=8)))
             for i in range(draw(st.integers(0, 12)))]
    known = draw(st.sets(st.sampled_from(names)))
    sat = {r for r in known if truth[r]}
    unsat = {r for r in known if not truth[r]}
    denied = draw(st.lists(st.sampled_from(names).filter(lambda r: not truth[r]), max_size=4)) \
        if not all(truth.values()) else []
    return truth, tools, sat, unsat, denied


@given(worlds(), st.sampled_from(list(FilterMode)))
def test_soundness_never_hides_a_tool_the_server_would_run(world: Any, mode: FilterMode) -> None:
    truth, tools, sat, unsat, denied = world
    kn = Knowledge(sat, unsat)
    kn.learn_denial({"error": "unmet_requirements", "tool": "t", "unmet": denied, "withheld": 0})
    result = filter_tools(tools, kn, mode)
    runnable = {t["name"] for t in tools if all(truth[r] for r in t["execution"]["requirements"])}
    hidden = {name for name, _ in result.hidden}
    failing = {v.name for v in result.verdicts if v.verdict is Verdict.WILL_FAIL}
    assert not hidden & runnable
    assert not failing & runnable
    # Everything the client acts on is truly unsatisfiable on the server, and it acts exactly as
    # the reference does with declared plus learned knowledge.
    assert all(not truth[r] for _, reqs in result.hidden for r in reqs)
    expected = {t["name"] for t in tools
                if reference(t["execution"]["requirements"], sat, unsat | set(denied))[0]
                is Verdict.WILL_FAIL}
    assert failing == expected
    assert hidden == (expected if mode is FilterMode.HIDE else set())


@given(worlds(), st.sampled_from([FilterMode.DEMOTE, FilterMode.ANNOTATE]))
def test_demote_and_annotate_keep_every_tool(world: Any, mode: FilterMode) -> None:
    _, tools, sat, unsat, _ = world
    result = filter_tools(tools, Knowledge(sat, unsat), mode)
    assert sorted(map(id, result.kept)) == sorted(map(id, tools)) and result.hidden == ()
    if mode is FilterMode.ANNOTATE:
        assert list(result.kept) == tools
    else:
        fails = [reference(t["execution"]["requirements"], sat, unsat)[0] is Verdict.WILL_FAIL
                 for t in tools]
        expected = [t for t, f in zip(tools, fails, strict=True) if not f] + \
                   [t for t, f in zip(tools, fails, strict=True) if f]
        assert [id(t) for t in result.kept] == [id(t) for t in expected]


@given(worlds())
def test_hide_keeps_the_order_of_the_rest(world: Any) -> None:
    _, tools, sat, unsat, _ = world
    result = filter_tools(tools, Knowledge(sat, unsat), FilterMode.HIDE)
    expected = [t for t in tools
                if reference(t["execution"]["requirements"], sat, unsat)[0] is Verdict.PROCEED]
    assert [id(t) for t in result.kept] == [id(t) for t in expected]
    assert result.to_json()["kept"] == [t["name"] for t in expected]
