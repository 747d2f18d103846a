"""The approval binding (SPEC §15): RFC 8785 canonical JSON on the RFC's own examples and on what
matters for a binding (key order, unicode, numbers, nesting), and a binding that changes with any
of approval, tool, arguments, caller and revision.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from mcp_preconditions import Identity, Principal
from mcp_preconditions.approvals import MAX_ARGUMENTS_BYTES, Binding, Party, bind, canonical_json


def test_the_rfc_8785_main_example() -> None:
    """RFC 8785 §3.2.2's input and its canonical form."""
    source = ('{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], '
              '"string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/", '
              '"literals": [null, true, false]}')
    assert canonical_json(json.loads(source)) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')


def test_the_rfc_8785_sorting_example() -> None:
    """RFC 8785 §3.2.3: keys sorted by UTF-16 code units (the emoji's surrogates sort before
    U+FB33, though its code point is larger)."""
    source = {"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
              "1": "One", "\U0001f600": "Emoji: Grinning Face", "\u0080": "Control",
              "\u00f6": "Latin Small Letter O With Diaeresis"}
    assert list(json.loads(canonical_json(source))) == [
        "\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


@pytest.mark.parametrize(("bits", "text"), [
    # RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical numbers.
    (0x0000000000000000, "0"), (0x8000000000000000, "0"), (0x0000000000000001, "5e-324"),
    (0x8000000000000001, "-5e-324"), (0x7FEFFFFFFFFFFFFF, "1.7976931348623157e+308"),
    (0xFFEFFFFFFFFFFFFF, "-1.7976931348623157e+308"), (0x4340000000000000, "9007199254740992"),
    (0xC340000000000000, "-9007199254740992"), (0x4430000000000000, "295147905179352830000"),
    (0x44B52D02C7E14AF5, "9.999999999999997e+22"), (0x44B52D02C7E14AF6, "1e+23"),
    (0x44B52D02C7E14AF7, "1.0000000000000001e+23"), (0x444B1AE4D6E2EF4E, "999999999999999700000"),
    (0x444B1AE4D6E2EF4F, "999999999999999900000"), (0x444B1AE4D6E2EF50, "1e+21"),
    (0x3EB0C6F7A0B5ED8C, "9.999999999999997e-7"), (0x3EB0C6F7A0B5ED8D, "0.000001"),
    (0x41B3DE4355555553, "333333333.3333332"), (0x41B3DE4355555554, "333333333.33333325"),
    (0x41B3DE4355555555, "333333333.3333333"), (0x41B3DE4355555556, "333333333.3333334"),
    (0x41B3DE4355555557, "333333333.33333343"), (0xBECBF647612F3696, "-0.0000033333333333333333"),
    (0x43143FF3C1CB0959, "1424953923781206.2")])
def test_the_rfc_8785_numbers(bits: int, text: str) -> None:
    assert canonical_json(struct.unpack(">d", bits.to_bytes(8, "big"))[0]) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 2**53, {1: "x"},
                                   "\ud800", {"a": object()}])
def test_what_has_no_canonical_form_is_a_value_error(value: Any) -> None:
    with pytest.raises(ValueError):
        canonical_json(value)


@pytest.mark.parametrize(("a", "b"), [
    ({"b": 1, "a": 2}, {"a": 2, "b": 1}),  # key order
    ({"n": 1}, {"n": 1.0}),  # one JSON number
    ({"n": 100}, {"n": 1e2}),
    ({"x": {"z": [1, {"b": True, "a": None}], "y": "é"}},
     {"x": {"y": "é", "z": [1, {"a": None, "b": True}]}}),
])
def test_the_same_json_value_is_one_canonical_text(a: Any, b: Any) -> None:
    assert canonical_json(a) == canonical_json(b)


@pytest.mark.parametrize(("a", "b"), [
    ({"n": 1}, {"n": True}),  # 1 is not true
    ({"n": 1}, {"n": "1"}),
    ({"n": 0}, {"n": None}),
    ({"s": "é"}, {"s": "e\u0301"}),  # no Unicode normalization (SPEC §2)
    ({"s": "prod"}, {"s": "prod "}),
    ({"l": [1, 2]}, {"l": [2, 1]}),  # arrays keep their order
    ({"a": {"b": 1}}, {"a": {"b": 1, "c": None}}),
])
def test_a_different_json_value_is_another_text(a: Any, b: Any) -> None:
    assert canonical_json(a) != canonical_json(b)


def test_unicode_is_kept_as_utf_8_and_controls_escaped() -> None:
    assert canonical_json({"é": "€\u0007\n😀"}) == '{"é":"€\\u0007\\n😀"}'


ALICE = Identity(Principal.from_claims({"iss": "https://idp", "sub": "alice"}))


def test_a_binding_holds_the_call() -> None:
    binding = bind("deploy", "deploy_service", {"env": "prod", "replicas": 3.0}, ALICE, "r1")
    assert binding == Binding("deploy", "deploy_service", '{"env":"prod","replicas":3}',
                              Party("https://idp", "alice"), "r1")
    assert isinstance(binding, Binding) and len(binding.key) == 64
    assert "alice" not in binding.key and "prod" not in binding.key


def test_any_change_is_another_binding() -> None:
    base = bind("deploy", "t", {"a": 1}, ALICE, "r1")
    bob = Identity(Principal.from_claims({"iss": "https://idp", "sub": "bob"}))
    other_issuer = Identity(Principal.from_claims({"iss": "https://other", "sub": "alice"}))
    others = [bind("other", "t", {"a": 1}, ALICE, "r1"), bind("deploy", "u", {"a": 1}, ALICE, "r1"),
              bind("deploy", "t", {"a": 2}, ALICE, "r1"), bind("deploy", "t", {"a": 1}, bob, "r1"),
              bind("deploy", "t", {"a": 1}, other_issuer, "r1"), bind("deploy", "t", {"a": 1}, ALICE, "r2"),
              bind("deploy", "t", {"a": 1}, Identity(failure="no access token"), "r1")]
    assert isinstance(base, Binding)
    keys = {b.key for b in others if isinstance(b, Binding)}
    assert len(keys) == len(others) and base.key not in keys
    assert bind("deploy", "t", {"a": 1.0}, ALICE, "r1") == base  # the same call


def test_absent_arguments_are_the_empty_object() -> None:
    assert bind("d", "t", None, ALICE, "r") == bind("d", "t", {}, ALICE, "r")


def test_arguments_without_a_canonical_form_or_too_large_are_not_bound() -> None:
    assert bind("d", "t", {"n": 2**60}, ALICE, "r") == (
        "its arguments have no canonical JSON form (RFC 8785): 1152921504606846976 exceeds safe "
        "integer domain for JSON floats")
    big = {"x": "a" * MAX_ARGUMENTS_BYTES}
    assert bind("d", "t", big, ALICE, "r") == (
        f"its arguments are too large to approve ({MAX_ARGUMENTS_BYTES + 8} bytes of canonical JSON, "
        f"at most {MAX_ARGUMENTS_BYTES})")


def test_the_party_is_issuer_and_subject() -> None:
    assert Party.of(ALICE) == Party("https://idp", "alice")
    assert Party.of(Identity(Principal.from_claims({"sub": "ci"}))) == Party("", "ci")
    assert Party.of(Identity(Principal.from_claims({"client_id": "ci"}))) is None  # no sub: nobody
    assert Party.of(Identity(failure="no access token")) is None
