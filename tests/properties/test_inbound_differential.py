"""gateway/inbound.py against the MCP SDK's own `mcp/shared/inbound.py`, on the same random inputs:
the header codec, the x-mcp-header rules, the Mcp-Param-* headers a call sends and their check, the
duplicated routing headers, the status table and the 2026-07-28 envelope ladder agree exactly.
"""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.shared import inbound as sdk

from mcp_preconditions.gateway import inbound as ours

PROTOCOL = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"

# Header values: anything, the codec's own outputs, and sentinels that are almost right.
_payload = st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode("ascii"))
header_text = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12),
    st.builds(lambda p, pre, post: f"{pre}=?base64?{p}?={post}", _payload,
              st.sampled_from(["", " ", "x"]), st.sampled_from(["", " ", "\n"])),
    st.builds(lambda p: f"=?base64?{p[:-1]}?=", _payload),  # non-canonical or broken
    st.builds(lambda t: ours.encode_header_value(t), st.text(max_size=8)),
)
tokens = st.one_of(st.sampled_from(["Region", "region", "X-Id", "id", "a b", "", "é"]),
                   st.integers(0, 3), st.none())
types_ = st.one_of(st.sampled_from(["string", "integer", "boolean", "number", "object"]), st.none(),
                   st.just(["string"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=True), st.text(max_size=6), st.just([1]), st.just({"a": 1}))
NAMES = ("a", "b", "c")


@st.composite
def properties(draw: st.DrawFn, depth: int, name: str) -> dict[str, Any]:
    """A property's schema: mostly a well-formed annotated scalar, sometimes a nested object or a
    misplaced, mistyped or clashing annotation."""
    shape = draw(st.integers(0, 9))
    if shape <= 4:  # the usual case: a scalar carrying a header
        return {"type": draw(st.sampled_from(["string", "integer", "boolean"])),
                "x-mcp-header": draw(st.sampled_from([f"{name}{depth}", f"P-{name}", "Region"]))}
    if shape == 5:
        return {"type": draw(st.sampled_from(["string", "integer"]))}
    if shape == 6 and depth > 0:
        return {"type": "object", "properties": draw(property_maps(depth - 1))}
    if shape == 7 and depth > 0:  # an annotation behind a keyword other than `properties`
        keyword = draw(st.sampled_from(["items", "allOf", "$defs", "not", "const", "default"]))
        sub = {"type": "string", "x-mcp-header": "Hidden"}
        return {"type": "array", keyword: [sub] if keyword == "allOf" else
                {"d": sub} if keyword == "$defs" else sub}
    node: dict[str, Any] = {}
    if draw(st.booleans()):
        node["type"] = draw(types_)
    node["x-mcp-header"] = draw(tokens)
    return node


@st.composite
def property_maps(draw: st.DrawFn, depth: int) -> dict[str, Any]:
    return {n: draw(properties(depth, n)) for n in draw(st.sets(st.sampled_from(NAMES), max_size=3))}


@st.composite
def schemas(draw: st.DrawFn) -> dict[str, Any]:
    """An input schema with x-mcp-header annotations where they are allowed and where they are not."""
    schema: dict[str, Any] = {"type": "object", "properties": draw(property_maps(2))}
    if draw(st.integers(0, 9)) == 0:
        schema["x-mcp-header"] = "Root"
    return schema


@st.composite
def arguments(draw: st.DrawFn, depth: int = 2) -> dict[str, Any]:
    return {n: (draw(arguments(depth - 1)) if depth > 0 and draw(st.integers(0, 3)) == 0
                else draw(scalars)) for n in draw(st.sets(st.sampled_from(NAMES), max_size=3))}


@given(header_text)
def test_the_header_codec_agrees(value: str) -> None:
    assert ours.decode_header_value(value) == sdk.decode_header_value(value)
    assert ours.encode_header_value(value) == sdk.encode_header_value(value)
    assert ours.decode_header_value(ours.encode_header_value(value)) == value


@settings(max_examples=300)
@given(schemas(), arguments())
def test_annotations_and_the_headers_a_call_sends_agree(schema: dict[str, Any],
                                                        args: dict[str, Any]) -> None:
    invalid = ours.find_invalid_x_mcp_header(schema)
    assert invalid == sdk.find_invalid_x_mcp_header(schema)
    if invalid is None:
        mapping = ours.x_mcp_header_map(schema)
        assert mapping == sdk.x_mcp_header_map(schema)
        assert ours.mcp_param_headers(mapping, args) == sdk.mcp_param_headers(mapping, args)


@settings(max_examples=300)
@given(schemas(), arguments(), st.one_of(arguments(), st.none()), st.lists(st.tuples(st.sampled_from(
    ["Mcp-Param-Region", "mcp-param-region", "Mcp-Param-a2", "Mcp-Param-P-b", "other"]), header_text),
    max_size=3), st.booleans())
def test_the_check_of_mcp_param_headers_agrees(schema: dict[str, Any], args: dict[str, Any],
                                               sent_for: dict[str, Any] | None,
                                               extra: list[tuple[str, str]], repeat: bool) -> None:
    sent: list[tuple[str, str]] = []
    if ours.find_invalid_x_mcp_header(schema) is None:  # what a client sends, for these or others
        mapping = ours.x_mcp_header_map(schema)
        sent = list(ours.mcp_param_headers(mapping, args if sent_for is None else sent_for).items())
    sent += extra + (sent[:1] if repeat else [])
    mine = ours.validate_mcp_param_headers(schema, args, sent)
    theirs = sdk.validate_mcp_param_headers(schema, args, _Raw(sent))
    assert (mine and (mine.code, mine.message, mine.data)) == \
        (theirs and (theirs.code, theirs.message, theirs.data))


class _Raw(dict[str, str]):
    """Raw header pairs as the SDK reads them (starlette's Headers: `items()` keeps repeats)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self._pairs = pairs

    def items(self) -> Any:
        return list(self._pairs)


METHODS = st.sampled_from(["tools/call", "prompts/get", "resources/read", "tools/list", "ping"])
versions = st.one_of(st.sampled_from(["2026-07-28", "2025-11-25", "2099-01-01", ""]), st.none(),
                     st.integers(0, 2))


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A request body: mostly a complete envelope, sometimes one missing a key, or malformed."""
    meta: Any = {PROTOCOL: draw(versions) if draw(st.integers(0, 3)) == 0 else "2026-07-28",
                 CAPABILITIES: {}}
    if draw(st.booleans()):
        meta[INFO] = {"name": "c", "version": "1"}
    broken = draw(st.integers(0, 9))
    if broken == 0:
        del meta[draw(st.sampled_from([PROTOCOL, CAPABILITIES]))]
    params: Any = {"_meta": meta if broken != 1 else draw(st.sampled_from([None, [], "m"]))}
    if draw(st.integers(0, 3)):
        params["name"] = draw(st.one_of(st.text(max_size=6), header_text, st.none()))
    if draw(st.booleans()):
        params["uri"] = draw(st.one_of(st.just("file:///a b"), header_text))
    if broken == 2:
        params = draw(st.sampled_from([None, "x", []]))
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": draw(METHODS)}
    if params is not None:
        body["params"] = params
    return body


@st.composite
def routing(draw: st.DrawFn, body: dict[str, Any]) -> dict[str, str] | None:
    if draw(st.integers(0, 6)) == 0:
        return None
    raw_params = body.get("params")
    params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    raw_meta = params.get("_meta")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    headers: dict[str, str] = {}
    version = meta.get(PROTOCOL)
    if draw(st.integers(0, 9)):
        headers["mcp-protocol-version"] = version if isinstance(version, str) else "2026-07-28"
    if draw(st.integers(0, 9)):
        headers["mcp-method"] = body["method"] if draw(st.integers(0, 9)) else "tools/list"
    named = params.get("name", params.get("uri"))
    if draw(st.integers(0, 5)):
        headers["mcp-name"] = (ours.encode_header_value(named) if isinstance(named, str)
                               and draw(st.integers(0, 5)) else draw(header_text))
    return headers


@settings(max_examples=500)
@given(st.data())
def test_the_envelope_ladder_agrees(data: st.DataObject) -> None:
    body = data.draw(bodies())
    headers = data.draw(routing(body))
    mine = ours.classify_inbound_request(body, headers=headers)
    theirs = sdk.classify_inbound_request(body, headers=headers)
    if isinstance(theirs, sdk.InboundModernRoute):
        assert isinstance(mine, ours.InboundModernRoute)
        assert (mine.protocol_version, mine.client_info, mine.client_capabilities) == \
            (theirs.protocol_version, theirs.client_info, theirs.client_capabilities)
    else:
        assert isinstance(mine, ours.InboundLadderRejection)
        assert (mine.code, mine.message, mine.data) == (theirs.code, theirs.message, theirs.data)


@given(st.lists(st.tuples(st.sampled_from(["Mcp-Method", "mcp-method", "MCP-Name", "mcp-name",
                                           "Mcp-Protocol-Version", "accept", "Mcp-Param-x"]),
                          st.just("v")), max_size=5))
def test_duplicated_routing_headers_agree(pairs: list[tuple[str, str]]) -> None:
    assert ours.find_duplicated_routing_header(pairs) == sdk.find_duplicated_routing_header(pairs)


@given(st.sampled_from(["2026-07-28", "2025-11-25", "", "x"]))
def test_the_unsupported_version_refusal_agrees(version: str) -> None:
    mine = ours.unsupported_protocol_version_rejection(version)
    theirs = sdk.unsupported_protocol_version_rejection(version)
    assert (mine and (mine.code, mine.message, mine.data)) == \
        (theirs and (theirs.code, theirs.message, theirs.data))


def test_the_tables_are_the_same() -> None:
    assert dict(ours.ERROR_CODE_HTTP_STATUS) == dict(sdk.ERROR_CODE_HTTP_STATUS)
    assert dict(ours.NAME_BEARING_METHODS) == dict(sdk.NAME_BEARING_METHODS)
    assert (ours.MCP_PROTOCOL_VERSION_HEADER, ours.MCP_METHOD_HEADER, ours.MCP_NAME_HEADER,
            ours.MCP_PARAM_HEADER_PREFIX, ours.X_MCP_HEADER_KEY) == \
        (sdk.MCP_PROTOCOL_VERSION_HEADER, sdk.MCP_METHOD_HEADER, sdk.MCP_NAME_HEADER,
         sdk.MCP_PARAM_HEADER_PREFIX, sdk.X_MCP_HEADER_KEY)
