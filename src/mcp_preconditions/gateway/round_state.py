"""The `requestState` the gateway issues for an input round it bridges (rounds.py), the keys it gives
the questions in a round, and what answers a question. A state names one call and one round of it,
expires, and is signed (HMAC-SHA256 under a key of this gateway's own) over what it is bound to as
well: the caller's principal, the request as the client named it (the tool's visible name and
arguments) and the server. A state altered, expired, from another round, or presented by anyone else
for anything else fails its check, and what failed is never told (one message for all).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .bridge import SERVER_RESULTS

_KEY_BYTES = 32
_MAX_STATE = 512  # a state the gateway issued is ~150 bytes; anything longer is not one
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_]+")
_MAX_KEY = 48


@dataclass(frozen=True)
class Round:
    """What a valid state names: one call and its round."""

    call: str
    number: int


class Sealer:
    """Issues and checks one gateway's round states (the key lives in memory only: a state is
    good on the gateway whose call waits for it, nowhere else)."""

    def __init__(self, clock: Callable[[], float] | None = None, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(_KEY_BYTES)
        self._clock = clock if clock is not None else time.monotonic

    def issue(self, round_: Round, lifetime: float, bound: tuple[str, str, str]) -> str:
        """A state for `round_`, good for `lifetime` seconds, bound to (caller, request, server)."""
        payload = _b64(json.dumps([round_.call, round_.number, self._clock() + lifetime],
                                  separators=(",", ":")).encode())
        return f"{payload}.{self._mac(payload, bound)}"

    def check(self, state: Any, bound: tuple[str, str, str]) -> Round | None:
        """The round `state` names when this gateway issued it for `bound` and it has not
        expired; else None."""
        if not isinstance(state, str) or len(state) > _MAX_STATE or state.count(".") != 1:
            return None
        payload, mac = state.split(".")
        if not hmac.compare_digest(mac.encode(), self._mac(payload, bound).encode()):
            return None
        try:
            call, number, expires = json.loads(_unb64(payload))
        except (ValueError, TypeError, binascii.Error):  # (signed by us: never expected)
            return None
        if not (isinstance(call, str) and isinstance(number, int)
                and isinstance(expires, int | float) and self._clock() < expires):
            return None
        return Round(call, number)

    def _mac(self, payload: str, bound: tuple[str, str, str]) -> str:
        message = "\n".join((payload, *bound)).encode("utf-8", "surrogatepass")
        return _b64(hmac.new(self._key, message, hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def question_key(method: str, params: Mapping[str, Any], taken: Callable[[str], bool]) -> str:
    """The key of a server's question in `inputRequests`: what it asks, named from the question
    itself, so that a client (or a retry without state) can tell answers apart by meaning, and the
    same question always gets the same key. An elicitation is the user's answer for the fields it
    asks (`user_name`, `user_city_zip`; `user_input` when it names none, `user_url` for a URL), a
    sampling request the model's reply, `roots/list` the client's roots; a key `taken` (another
    question of the round) gets `_2`, `_3`, ... Made of [A-Za-z0-9_], at most 48 characters plus
    the suffix."""
    if method == "elicitation/create":
        base = "user_" + _fields(params)
    elif method == "sampling/createMessage":
        base = "model_reply"
    elif method == "roots/list":
        base = "client_roots"
    else:
        base = "input"
    key, n = base, 1
    while taken(key):
        n += 1
        key = f"{base}_{n}"
    return key


def _fields(params: Mapping[str, Any]) -> str:
    if params.get("mode") == "url":
        return "url"
    schema = params.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    names = [_KEY_CHARS.sub("_", str(n)).strip("_") for n in properties] \
        if isinstance(properties, Mapping) else []
    joined = "_".join(n for n in names if n)[:_MAX_KEY - len("user_")].rstrip("_")
    return joined or "input"


@cache
def _answers(method: str) -> TypeAdapter[Any]:
    return TypeAdapter(SERVER_RESULTS[method])


def answers_question(method: str, answer: Any) -> bool:
    """Whether `answer` is a well-formed answer to a `method` question (the spec's result model;
    anything else leaves the question open, to be asked again)."""
    if not isinstance(answer, Mapping):
        return False
    try:
        _answers(method).validate_python(answer, by_name=False)
    except ValidationError:
        return False
    return True
