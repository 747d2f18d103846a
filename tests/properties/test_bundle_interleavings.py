"""Any interleaving of bundle publications (good, broken, tampered), polls and decisions, some of them
concurrent with a poll, gives decisions that each match exactly one revision: the decision a fresh
Guard of that revision's policy makes. Bundles come from a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_preconditions import Decision, Guard, Identity, Principal
from mcp_preconditions.drivers.bundle import BundleReloader, load_policy_url
from mcp_preconditions.policy.load import parse_policy, revision_of
from tests.integration.test_policy_bundles import BundleServer, Signer

TOOLS = {"launch": ["env:production"], "status": [], "fuel": ["state:go"], "abort": ["capability:x"]}
GRANT = '[[capabilities.grants]]\ncapabilities = ["x"]\nwhen = ["auth:claim:role:ops"]\n'
POLICIES = [
    b'environment = ["production"]\n',
    b'environment = ["staging"]\n[state.values]\ngo = true\n',
    ('environment = ["production"]\n[state.values]\ngo = true\n' + GRANT).encode(),
    ('[tools.status]\nrequirements = ["state:go"]\n' + GRANT).encode(),
    b'[tools.launch]\nrequirements = ["feature:f"]\n[features.flags]\nf = true\n',
]
BROKEN = b'environment = "production"\n'  # valid TOML, invalid policy
WHO = [Identity(), Identity(principal=Principal.from_claims({"sub": "u1", "role": "ops"}))]

publish_op = st.tuples(st.just("publish"), st.integers(0, len(POLICIES)), st.booleans())
decide_op = st.tuples(st.just("decide"), st.sampled_from(sorted(TOOLS)), st.integers(0, len(WHO) - 1))
burst_op = st.tuples(st.just("burst"), st.integers(1, 30), st.just(0))
poll_op = st.tuples(st.just("poll"), st.just(0), st.just(False))
operations = st.lists(st.one_of(publish_op, decide_op, burst_op, poll_op), max_size=25)


class NoRecords:
    def record(self, decision: Decision) -> None:
        pass


def fresh_guard(body: bytes) -> Guard:
    return Guard(parse_policy(body, "oracle.toml"), TOOLS, entry_points=False, recorder=NoRecords())


ORACLE = {revision_of(body): fresh_guard(body) for body in POLICIES}


def matches_its_revision(decision: Decision, who: Identity) -> bool:
    """The decision is what a fresh Guard of `decision.revision`'s policy decides, exactly."""
    expected = ORACLE[decision.revision].decide(decision.tool, who, record=False)
    return ((decision.allowed, decision.unmet, [o.status for o in decision.outcomes])
            == (expected.allowed, expected.unmet, [o.status for o in expected.outcomes]))


@pytest.fixture(scope="module")
def server() -> Iterator[BundleServer]:
    s = BundleServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return Signer(Path(tmp_path_factory.mktemp("bundle-key")))


def test_the_pool_decides_differently_per_revision() -> None:
    assert len(ORACLE) == len(POLICIES)  # one revision per policy, no two alike
    vectors = {tuple(g.decide(t, w, record=False).allowed for t in sorted(TOOLS) for w in WHO)
               for g in ORACLE.values()}
    assert len(vectors) == len(POLICIES)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_every_decision_matches_exactly_one_revision(
        server: BundleServer, signer: Signer, ops: list[tuple[str, int | str, int | bool]]) -> None:
    server.faults.clear()
    server.files.clear()
    published = _publish(server, signer, POLICIES[0], signed=True)
    guard = Guard(load_policy_url(published, signer.public_file), TOOLS, entry_points=False,
                  recorder=NoRecords())
    reloader = BundleReloader(guard, published, public_key=signer.public_file, timeout=5.0)
    in_force = served = revision_of(POLICIES[0])  # the model: what polls must converge to
    good = True  # the bundle served now is valid and validly signed
    for op, a, b in ops:
        if op == "publish":
            body = POLICIES[a] if isinstance(a, int) and a < len(POLICIES) else BROKEN
            _publish(server, signer, body, signed=bool(b))
            good = body is not BROKEN and bool(b)
            served = revision_of(body) if good else in_force
        elif op == "poll":
            reloader.reload()
            in_force = served
            assert guard.revision == in_force
            if good or revision_of(server.files["/policy.toml"]) != in_force:
                # (a bad signature on the body in force may go unseen: a 304 needs no signature)
                assert (reloader.last_error is None) == good
        elif op == "decide":
            decision = guard.decide(str(a), WHO[int(b)])
            assert decision.revision == in_force and matches_its_revision(decision, WHO[int(b)])
        else:
            before = in_force
            in_force = served
            for decision, who in _burst(guard, reloader, int(a)):
                assert decision.revision in {before, in_force}
                assert matches_its_revision(decision, who)
            assert guard.revision == in_force


def _publish(server: BundleServer, signer: Signer, body: bytes, *, signed: bool) -> str:
    """Serve `body`; with `signed` False its signature is another body's (a tampered bundle)."""
    server.files["/policy.toml"] = body
    other = POLICIES[(POLICIES.index(body) + 1) % len(POLICIES)] if body in POLICIES else POLICIES[0]
    server.files["/policy.toml.sig"] = signer.sign(body if signed else other)
    assert base64.b64decode(server.files["/policy.toml.sig"])  # a well-formed signature either way
    return server.url("/policy.toml")


def _burst(guard: Guard, reloader: BundleReloader, n: int) -> list[tuple[Decision, Identity]]:
    """`n` decisions on this thread while another thread polls once."""
    poller = threading.Thread(target=reloader.reload)
    poller.start()
    out = []
    for i in range(n):
        who = WHO[i % len(WHO)]
        out.append((guard.decide(sorted(TOOLS)[i % len(TOOLS)], who), who))
    poller.join()
    return out
