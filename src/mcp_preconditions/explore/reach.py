"""What a policy reaches outside its own text: code it imports, hosts it connects to, files it reads or
writes, the environment it reads. A policy edited on the page may reach only what the file as read
reaches (anyone who can reach the page can edit it): one rule, over the fields listed in `REACHING`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..policy.load import key_path
from ..policy.model import Policy

CODE = "name code to run"
NETWORK = "reach the network"
READ = "read a file"
WRITE = "write a file"
ENVIRONMENT = "read the environment"

# Every field of the policy model that reaches outside the text, by key path (tests/unit/
# test_explore_reach.py holds the model's other fields to this list). A table or a list is taken
# entry by entry, a section as a whole.
REACHING: dict[str, str] = {
    "environment_variable": ENVIRONMENT,
    "state.callables": CODE,
    "state.redis": NETWORK,  # url_env reads the environment too
    "features.openfeature": READ,
    "auth.issuer": NETWORK,  # with discovery only: its metadata is fetched
    "auth.discovery": NETWORK,
    "auth.jwks_uri": NETWORK,
    "auth.public_keys_pem": READ,  # an entry that is not PEM text is a file name
    "auth.introspection": NETWORK,  # its *_env fields read the environment too
    "auth.sign_in": ENVIRONMENT,  # its env: references; people sign in at auth.issuer
    "decision_log.jsonl_path": WRITE,
    "pdp": NETWORK,  # each [pdp.NAME] as a whole: its url is asked, its token an env: reference
}


@dataclass(frozen=True)
class Reach:
    """One thing a policy reaches: where it is written (`path`), what it does, and what it names
    (`key`: equal keys reach the same thing, wherever the entry sits in a list)."""

    path: str
    what: str
    key: tuple[str, str]


def _field(policy: Policy, dotted: str) -> Any:
    value: Any = policy
    for part in dotted.split("."):
        value = getattr(value, part)
    if dotted == "auth.issuer" and not policy.auth.discovery:
        return None
    if dotted == "auth.public_keys_pem":  # PEM text reads nothing: left out, in its place
        return _file_name(value) if isinstance(value, str) else [_file_name(e) for e in value]
    return value


def _file_name(pem: str) -> str | None:
    return None if pem.lstrip().startswith("-----BEGIN") else pem


def _leaves(loc: tuple[str | int, ...], value: Any, field: str) -> Iterator[tuple[str, str]]:
    """(key path, what it names) for each thing `value` names; nothing for an unset or false one."""
    if isinstance(value, BaseModel):  # a section as a whole: any change of it is a change
        yield key_path(loc), f"{field}={value.model_dump_json()}"
    elif isinstance(value, dict):
        for name, entry in value.items():
            yield from _leaves((*loc, name), entry, f"{field}.{name}")
    elif isinstance(value, list):
        for index, entry in enumerate(value):
            yield from ((key_path((*loc, index)), named) for _, named in _leaves((), entry, field))
    elif value is not None and value is not False:
        yield key_path(loc), f"{field}={value!r}"


def reaches(policy: Policy) -> list[Reach]:
    """Everything `policy` reaches outside its text, field by field."""
    return [Reach(path, what, (field, named))
            for field, what in REACHING.items()
            for path, named in _leaves(tuple(field.split(".")), _field(policy, field), field)]


def new_reaches(edited: Policy, read: Policy | None) -> list[str]:
    """The problem lines of an edit: each thing `edited` reaches that the file as read (`read`;
    None when it does not validate: then only what an empty policy reaches) does not."""
    known = {r.key for r in reaches(read if read is not None else Policy())}
    return [f"{r.path}: an edit on the page cannot {r.what}; edit the file and restart explore"
            for r in reaches(edited) if r.key not in known]
