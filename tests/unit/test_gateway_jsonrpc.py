"""The gateway's JSON-RPC codec (gateway/jsonrpc.py): what it reads, it writes back as the same
message, including what orjson refuses and the standard library reads (a lone surrogate, an
integer past 64 bits, NaN).
"""

from __future__ import annotations

import json
import math

from mcp_preconditions.gateway import jsonrpc

LONE = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"s":"\\ud800"}}}'


def test_a_lone_surrogate_is_relayed_as_its_escape_not_as_invalid_utf8() -> None:
    message = jsonrpc.loads(LONE)
    assert message["params"]["arguments"]["s"] == "\ud800"  # what the guard decides on
    out = jsonrpc.dumps(message)
    out.decode("utf-8")  # valid UTF-8 (ASCII, in fact): no raw surrogate bytes on the wire
    assert b'"\\ud800"' in out
    assert json.loads(out) == message  # the server reads the string the guard saw, not U+FFFD


def test_non_ascii_text_beside_a_lone_surrogate_survives() -> None:
    message = {"text": "caf\u00e9 \U0001f600 \udc00"}
    assert json.loads(jsonrpc.dumps(message)) == message


def test_what_orjson_refuses_round_trips() -> None:
    message = jsonrpc.loads(b'{"big":123456789012345678901234567890,"nan":NaN}')
    again = jsonrpc.loads(jsonrpc.dumps(message))
    assert again["big"] == 123456789012345678901234567890 and math.isnan(again["nan"])


def test_an_invalid_request_is_answered_only_when_it_has_an_id_to_answer() -> None:
    bad_params = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": ["echo"]}
    answer = jsonrpc.invalid_request(bad_params)
    assert answer is not None and answer["id"] == 4 and answer["error"]["code"] == -32600
    assert answer["error"]["message"] == ('Invalid Request: not a JSON-RPC 2.0 request (jsonrpc '
                                          '"2.0", a string method, params an object)')
    for unanswerable in ([bad_params], {**bad_params, "id": None}, {**bad_params, "id": True},
                         {"jsonrpc": "2.0", "id": 4, "result": []}, "tools/call"):
        assert jsonrpc.invalid_request(unanswerable) is None
