"""Exactness (SPEC §2): a requirement string matches only itself, code point for code point. For each
namespace, a policy that satisfies a base string never satisfies a perturbation of it: case, whitespace,
NFC/NFD/NFKC, confusable letters (Cyrillic о/а/е for Latin), zero-width characters, or any other text.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mcp_preconditions import Guard, Identity, Policy, PolicySource, Principal, merge
from mcp_preconditions.principal import ANONYMOUS_IDENTITY

SETTINGS = settings(max_examples=200, deadline=None)
NO_OVERRIDE = "MCP_PRECONDITIONS_TEST_UNSET_VARIABLE"  # keeps MCP_PRECONDITIONS_ENVIRONMENT out of it

CONFUSABLES = {"o": "о", "a": "а", "e": "е", "p": "р", "c": "с", "x": "х", "i": "і", "y": "у",
               "O": "О", "A": "А", "E": "Е", "P": "Р", "C": "С", "H": "Н", "K": "К", "T": "Т"}
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\x00"]
SPACES = [" ", "\t", "\n", "\u00a0", "\u2007", "\u3000"]

# Names with letters that have case, decompositions, compatibility forms and lookalikes.
alphabet = st.sampled_from([*"abcoepxyACEOPXY019._-", "é", "Å", "Å", "ﬁ", "Ａ", "ß", "ı", "К"])
names = st.text(alphabet, min_size=1, max_size=10)


def variants(base: str) -> list[str]:
    """Every systematic perturbation of `base` (some may equal it; callers skip those)."""
    out = [base.upper(), base.lower(), base.swapcase(), base.casefold(), base.title()]
    out += [unicodedata.normalize(form, base) for form in ("NFC", "NFD", "NFKC", "NFKD")]
    out += [base.replace(latin, other, 1) for latin, other in CONFUSABLES.items() if latin in base]
    out += [s + base for s in SPACES] + [base + s for s in SPACES]
    return out


@st.composite
def perturbed(draw: st.DrawFn, base: str) -> str:
    kind = draw(st.sampled_from(["systematic", "invisible", "other"]))
    if kind == "systematic":
        result = draw(st.sampled_from(variants(base)))
    elif kind == "invisible":
        at = draw(st.integers(0, len(base)))
        result = base[:at] + draw(st.sampled_from(INVISIBLE)) + base[at:]
    else:
        result = draw(st.text(min_size=1, max_size=12))
    assume(result != base)
    return result


def pair() -> st.SearchStrategy[tuple[str, str]]:
    return names.flatmap(lambda base: st.tuples(st.just(base), perturbed(base)))


def allowed(policy: dict[str, Any], requirement: str, claims: dict[str, Any] | None = None) -> bool:
    source = PolicySource(Policy.model_validate({"environment_variable": NO_OVERRIDE, **policy}),
                          "(generated)", "r", Path("."))
    # strict=False: a perturbation that is not even a valid form must still end unsatisfied
    guard = Guard(source, {"t": [requirement]}, entry_points=False, strict=False)
    identity = ANONYMOUS_IDENTITY if claims is None else Identity(principal=Principal.from_claims(claims))
    decision = guard.decide("t", identity, record=False)
    assert decision.errors == ()
    return decision.allowed


@SETTINGS
@given(pair())
def test_env(p: tuple[str, str]) -> None:
    base, other = p
    policy = {"environment": [base]}
    assert allowed(policy, f"env:{base}")
    assert not allowed(policy, f"env:{other}")


@SETTINGS
@given(pair())
def test_feature(p: tuple[str, str]) -> None:
    base, other = p
    policy = {"features": {"flags": {base: True}}}
    assert allowed(policy, f"feature:{base}")
    assert not allowed(policy, f"feature:{other}")


@SETTINGS
@given(pair())
def test_state(p: tuple[str, str]) -> None:
    base, other = p
    policy = {"state": {"values": {base: True}}}
    assert allowed(policy, f"state:{base}")
    assert not allowed(policy, f"state:{other}")


@SETTINGS
@given(pair(), pair())
def test_capability_grants_and_their_conditions(cap: tuple[str, str], label: tuple[str, str]) -> None:
    policy = {"environment": [label[0]],
              "capabilities": {"grants": [{"capabilities": [cap[0]], "when": [f"env:{label[0]}"]}]}}
    assert allowed(policy, f"capability:{cap[0]}")
    assert not allowed(policy, f"capability:{cap[1]}")
    policy["capabilities"]["grants"][0]["when"] = [f"env:{label[1]}"]  # type: ignore[index]
    assert not allowed(policy, f"capability:{cap[0]}")


@SETTINGS
@given(pair(), st.booleans())
def test_capability_claim(cap: tuple[str, str], as_list: bool) -> None:
    policy = {"capabilities": {"claim": "caps"}}
    claims = {"sub": "s", "caps": [cap[0]] if as_list else cap[0]}
    assert allowed(policy, f"capability:{cap[0]}", claims)
    assert not allowed(policy, f"capability:{cap[1]}", claims)


@SETTINGS
@given(pair(), st.booleans())
def test_claim_values(value: tuple[str, str], as_list: bool) -> None:
    claims = {"sub": "s", "c": [value[0]] if as_list else value[0]}
    assert allowed({}, f"auth:claim:c:{value[0]}", claims)
    assert not allowed({}, f"auth:claim:c:{value[1]}", claims)


@SETTINGS
@given(pair())
def test_claim_names_and_aliases(name: tuple[str, str]) -> None:
    base, other = name
    assume(":" not in other)
    assert allowed({}, f"auth:claim:{base}:v", {base: "v"})
    assert not allowed({}, f"auth:claim:{other}:v", {base: "v"})
    aliased = {"auth": {"claim_aliases": {"al": ["outer", base]}}}
    assert allowed(aliased, "auth:claim:al:v", {"outer": {base: "v"}})
    assert not allowed(aliased, "auth:claim:al:v", {"outer": {other: "v"}})


@SETTINGS
@given(st.one_of(st.booleans(), st.integers(-10**6, 10**6)), st.data())
def test_boolean_and_integer_claims_by_json_text(value: bool | int, data: st.DataObject) -> None:
    text = "true" if value is True else "false" if value is False else str(value)
    wrong = data.draw(st.sampled_from([
        text.upper(), text.title(), f" {text}", f"{text} ", f"{text}\u200b", f"{text}.0", f"+{text}",
        f"0{text}", "1" if value is True else "0", text.translate(str.maketrans("0123456789",
                                                                               "０１２３４５６７８９")),
        f'"{text}"', "True" if value is True else "False",
    ]))
    assume(wrong != text)
    assert allowed({}, f"auth:claim:c:{text}", {"c": value})
    assert not allowed({}, f"auth:claim:c:{wrong}", {"c": value})
    assert not allowed({}, f"auth:claim:c:{text}", {"c": float(value)})


@SETTINGS
@given(pair(), st.booleans())
def test_scopes_and_implications(scope: tuple[str, str], scp: bool) -> None:
    base, other = scope
    claims = {"sub": "s", **({"scp": [base]} if scp else {"scope": base})}
    assert allowed({}, f"auth:scope:{base}", claims)
    assert not allowed({}, f"auth:scope:{other}", claims)
    implying = {"auth": {"scope_implications": {base: ["implied"]}}}
    assert allowed(implying, "auth:scope:implied", claims)
    other_claims = {"sub": "s", **({"scp": [other]} if scp else {"scope": other})}
    assume(" " not in other)
    assert not allowed(implying, "auth:scope:implied", other_claims)


@SETTINGS
@given(pair())
def test_distinct_strings_are_never_merged(p: tuple[str, str]) -> None:
    base, other = p
    assert merge([f"env:{base}"], [f"env:{other}", f"env:{base}"]) == (f"env:{base}", f"env:{other}")
