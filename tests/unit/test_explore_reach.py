"""The explorer's rule for policies edited on the page: an edit may not reach anything (code, hosts,
files, the environment) that the policy file as read does not. Each reaching field of the policy
model, refused by its key path; the model's other fields, listed, so a new one must be classified.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from mcp_preconditions.explore import Inputs, Workbench
from mcp_preconditions.explore.reach import REACHING, new_reaches
from mcp_preconditions.explore.workbench import Caller
from mcp_preconditions.policy import parse_policy
from mcp_preconditions.policy.model import Policy
from mcp_preconditions.principal import ANONYMOUS_IDENTITY

TAIL = "; edit the file and restart explore"
# Every other field: nothing outside the text. `quotas.*.store = "redis"` is here because the
# explorer counts quotas in a fresh store of its own, never Redis (and Redis needs state.redis);
# `decision_log.logger` and `.opentelemetry` because the explorer records no decision;
# `approvals.*` (requirement strings, numbers, a store choice) like quotas: the explorer builds no
# approval store of its own yet, and must keep its approvals in a fresh memory store when it does.
PURE = {
    "environment", "confidential", "features.flags", "state.values", "state.ttl_seconds",
    "capabilities.grants[].capabilities", "capabilities.grants[].when",
    "capabilities.grants[].arguments", "capabilities.claim", "tools.*.requirements",
    "auth.audience", "auth.keys", "auth.algorithms", "auth.leeway_seconds", "auth.require_typ",
    "auth.max_token_bytes", "auth.fetch_timeout_seconds", "auth.jwks_refetch_interval_seconds",
    "auth.claim_aliases", "auth.scope_implications", "auth.cache_max_entries",
    "auth.cache_ttl_seconds", "guard.lookup_timeout_seconds", "guard.denial", "guard.list_filtering",
    "decision_log.logger", "decision_log.opentelemetry", "gateway.unlisted_tools",
    "gateway.call_timeout_seconds", "gateway.max_response_bytes", "gateway.max_event_bytes",
    "quotas.*.calls", "quotas.*.per_seconds", "quotas.*.by",
    "quotas.*.store", "approvals.*.approvers", "approvals.*.expires_seconds",
    "approvals.*.timeout_seconds", "approvals.*.store",
    "capabilities.grants[].argument_claims",
    "pdp_server.url", "pdp_server.actions", "pdp_server.subjects",  # `url` is only announced
}


def _section(annotation: object) -> tuple[str, type[BaseModel]] | None:
    """A section type in a field's type, with how its key path goes on: '[]' a list of them, '.*' a
    table of them, '' the section itself (or None)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    shapes: dict[object, tuple[str, tuple[object, ...]]] = {list: ("[]", args[:1]), dict: (".*", args[1:])}
    inner = shapes.get(origin, ("", (annotation, *args)))
    for arg in inner[1]:
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return inner[0], arg
    return None


def _fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every field's key path, down to the reaching ones (taken whole) and the leaves."""
    out: set[str] = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        inner = None if path in REACHING else _section(info.annotation)
        if inner is None:
            out.add(path)
        else:
            out |= _fields(inner[1], f"{path}{inner[0]}.")
    return out


def test_every_field_of_the_policy_model_is_classified() -> None:
    assert set(REACHING) <= _fields(Policy)
    assert _fields(Policy) - set(REACHING) == PURE


FILE = """\
environment = ["prod"]
[state.callables]
ready = "os:getcwd"
[auth]
issuer = "https://issuer.example"
audience = "mcp"
jwks_uri = "https://issuer.example/jwks"
public_keys_pem = ["keys/a.pem", "-----BEGIN PUBLIC KEY-----\\nAAAA\\n-----END PUBLIC KEY-----"]
[decision_log]
jsonl_path = "decisions.jsonl"
"""
DISCOVERY = 'issuer = "https://issuer.example"\naudience = "mcp"\ndiscovery = true\n'
REDIS = '[state.redis]\nurl = "redis://127.0.0.1:6379/0"\n'
FLAGD = '[features.openfeature]\npath = "flags.json"\n'
INTROSPECTION = ('[auth.introspection]\nendpoint = "https://issuer.example/introspect"\n'
                 'client_id_env = "ID"\nclient_secret_env = "SECRET"\n')


PDP = '[pdp.corp]\nurl = "http://127.0.0.1:3592"\n'


def problems(read: str, edited: str) -> list[str]:
    return new_reaches(parse_policy(edited.encode(), "p.toml").policy,
                       parse_policy(read.encode(), "p.toml").policy)


@pytest.mark.parametrize(("read", "edited", "expected"), [
    # environment_variable: whose value the env: labels are (an oracle for any variable)
    ("", 'environment_variable = "HOME"\n', {"environment_variable": "read the environment"}),
    ('environment_variable = "LABELS"\n', 'environment_variable = "HOME"\n',
     {"environment_variable": "read the environment"}),
    # state.callables: imported and called
    (FILE, FILE.replace('"os:getcwd"', '"os:getpid"'), {"state.callables.ready": "name code to run"}),
    (FILE, FILE.replace("[auth]", 'other = "os:getcwd"\n[auth]'),
     {"state.callables.other": "name code to run"}),
    ("", '[state.callables]\n"a.b" = "shutil:rmtree"\n',
     {'state.callables."a.b"': "name code to run"}),
    # state.redis: a host to connect to (url_env: a variable read)
    ("", REDIS, {"state.redis": "reach the network"}),
    (REDIS, REDIS.replace("127.0.0.1", "evil.example"), {"state.redis": "reach the network"}),
    (REDIS, '[state.redis]\nurl_env = "HOME"\n', {"state.redis": "reach the network"}),
    (REDIS, REDIS + 'prefix = "other:"\n', {"state.redis": "reach the network"}),
    # features.openfeature: a flag file read (and polled)
    ("", FLAGD, {"features.openfeature": "read a file"}),
    (FLAGD, FLAGD.replace("flags.json", "/etc/passwd"), {"features.openfeature": "read a file"}),
    # auth.jwks_uri, auth.discovery (with auth.issuer), auth.introspection: hosts to fetch from
    (FILE, FILE.replace("issuer.example/jwks", "evil.example/jwks"), {"auth.jwks_uri": "reach the network"}),
    (f"[auth]\n{DISCOVERY}", f"[auth]\n{DISCOVERY}".replace("issuer.example", "evil.example"),
     {"auth.issuer": "reach the network"}),
    ('[auth]\nissuer = "https://issuer.example"\naudience = "mcp"\n', f"[auth]\n{DISCOVERY}",
     {"auth.issuer": "reach the network", "auth.discovery": "reach the network"}),
    ("", INTROSPECTION.replace("[auth.introspection]", '[auth]\naudience = "mcp"\n[auth.introspection]'),
     {"auth.introspection": "reach the network"}),
    # auth.public_keys_pem: an entry that is not PEM text is a file read
    (FILE, FILE.replace('"keys/a.pem"', '"keys/a.pem", "/etc/shadow"'),
     {"auth.public_keys_pem[1]": "read a file"}),
    (FILE, FILE.replace('"keys/a.pem"', '"../a.pem"'), {"auth.public_keys_pem[0]": "read a file"}),
    ("", '[auth]\npublic_keys_pem = "/etc/shadow"\n', {"auth.public_keys_pem": "read a file"}),
    # decision_log.jsonl_path: a file written (the explorer records nothing, but the rule is one)
    (FILE, FILE.replace("decisions.jsonl", "/tmp/x.jsonl"), {"decision_log.jsonl_path": "write a file"}),
    # pdp.NAME: a decision point asked about each call (its token an env: reference)
    ("", PDP, {"pdp.corp": "reach the network"}),
    (PDP, PDP.replace("http://127.0.0.1", "https://evil.example"), {"pdp.corp": "reach the network"}),
])
def test_an_edit_that_reaches_further_is_refused_at_its_key_path(read: str, edited: str,
                                                                  expected: dict[str, str]) -> None:
    assert problems(read, edited) == [f"{path}: an edit on the page cannot {what}{TAIL}"
                                      for path, what in expected.items()]


@pytest.mark.parametrize("edited", [
    FILE,  # as read
    FILE + '[tools.t]\nrequirements = ["state:ready"]\n[state.values]\nx = true\n',  # pure keys
    FILE.replace('ready = "os:getcwd"\n', ""),  # less: a callable removed
    FILE.replace('"keys/a.pem", ', '"-----BEGIN PUBLIC KEY-----\\nBBBB\\n-----END PUBLIC KEY-----", '
                 '"keys/a.pem", '),  # PEM text added (read from nowhere); the file moved in the list
    FILE.replace('jsonl_path = "decisions.jsonl"\n', ""),
    FILE.replace('issuer = "https://issuer.example"', 'issuer = "https://other.example"'),  # no discovery
])
def test_an_edit_that_reaches_nothing_new_is_taken(edited: str) -> None:
    assert problems(FILE, edited) == []


def test_against_a_file_that_does_not_validate_an_edit_reaches_what_an_empty_policy_does() -> None:
    edited = parse_policy(f"environment = []\n{REDIS}".encode(), "p.toml").policy
    assert new_reaches(edited, None) == [f"state.redis: an edit on the page cannot reach the "
                                         f"network{TAIL}"]


def _bench(tmp_path: Path, text: str) -> Workbench:
    policy = tmp_path / "policy.toml"
    policy.write_text(text, encoding="utf-8")
    return Workbench(Inputs(str(policy), text, [{"name": "t"}], "tools.json"))


def test_a_callable_named_on_the_page_is_never_imported(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The module would leave a file behind at import; the page's edit names it, the file says
    nothing of it: a problem line, the module never imported."""
    marker = tmp_path / "imported"
    (tmp_path / "explore_side_effect.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef ready():\n    return True\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    read = '[tools.t]\nrequirements = ["state:ready"]\n'
    bench = _bench(tmp_path, read)
    compiled = bench.compile(read + '[state.callables]\nready = "explore_side_effect:ready"\n')
    assert compiled.guard is None and compiled.problems == [
        f"{tmp_path / 'policy.toml'}: state.callables.ready: an edit on the page cannot name code to "
        f"run{TAIL}"]
    assert not marker.exists() and "explore_side_effect" not in sys.modules


async def test_the_file_s_own_callable_still_decides(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("explore_file_callable")
    module.ready = lambda: True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "explore_file_callable", module)
    read = ('[tools.t]\nrequirements = ["state:ready"]\n[state.callables]\n'
            'ready = "explore_file_callable:ready"\n')
    bench = _bench(tmp_path, read)
    edited = bench.compile(read + '[state.values]\nother = false\n')
    assert edited.problems == [] and edited.guard is not None
    caller = Caller(ANONYMOUS_IDENTITY, "anonymous")
    assert [d.allowed for d in await bench.decide(edited.guard, caller)] == [True]


async def test_the_file_s_decision_log_is_never_written(tmp_path: Path) -> None:
    read = '[tools.t]\nrequirements = ["env:prod"]\n[decision_log]\njsonl_path = "decisions.jsonl"\n'
    bench = _bench(tmp_path, read)
    guard = bench.compile(read).guard
    assert guard is not None
    assert [d.allowed for d in await bench.decide(guard, Caller(ANONYMOUS_IDENTITY, "a"))] == [False]
    assert not (tmp_path / "decisions.jsonl").exists()


def test_a_file_that_does_not_validate_can_be_fixed_on_the_page(tmp_path: Path) -> None:
    bench = _bench(tmp_path, "a = 1\n")
    assert bench.compile("a = 1\n").guard is None
    fixed = bench.compile('[tools.t]\nrequirements = ["env:prod"]\n')
    assert fixed.problems == [] and fixed.guard is not None
