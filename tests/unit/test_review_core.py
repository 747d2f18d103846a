"""Review findings (core): policy settings that silently do nothing or silently weaken a policy, a
failure mode that escapes as an exception instead of an `error` outcome, and secrets in reprs.
Each test fails today.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions import ANONYMOUS, CallContext, Credentials, Guard, Status, parse_policy
from mcp_preconditions.auth import build_authenticator
from mcp_preconditions.errors import PolicyError
from mcp_preconditions.resolvers.env import environment_labels
from tests.unit.test_auth_jwt import RSA, authenticator, claims


async def test_the_policy_jsonl_decision_log_is_written(tmp_path: Path) -> None:
    # docs/live-facts.md: "The settings are read when the guard is built"; Guard never calls
    # build_recorder, so `[decision_log] jsonl_path` (the audit trail) is silently dropped.
    policy = parse_policy(b'[decision_log]\njsonl_path = "decisions.jsonl"\nopentelemetry = false\n',
                          str(tmp_path / "p.toml"), tmp_path)
    guard = Guard(policy, {"t": ["env:x"]}, entry_points=False)
    decision = await guard.check("t", ANONYMOUS)
    assert decision.allowed is False
    assert (tmp_path / "decisions.jsonl").is_file()


def test_a_grant_without_conditions_is_flagged() -> None:
    # `when` defaults to []: the grant then gives the capability to every caller, anonymous included.
    # That is a legitimate policy ("everyone may read the weather"), so it loads, with a warning.
    source = parse_policy(b'[[capabilities.grants]]\ncapabilities = ["rocket.launch"]\n', "p.toml")
    warnings = [str(f) for f in Guard(source, {}, entry_points=False).findings]
    assert warnings == ["p.toml: tool '(policy capabilities.grants[0])': grant of rocket.launch has no "
                        "'when' conditions: it applies to every caller, anonymous ones included"]


def test_introspection_without_an_audience_is_rejected() -> None:
    # An introspection-only policy with no audience accepts any active token the authorization
    # server issued, for any resource server (token passthrough / confused deputy).
    policy = parse_policy(b'[auth.introspection]\nendpoint = "https://as.test/introspect"\n'
                          b'client_id_env = "CID"\nclient_secret_env = "CSECRET"\n', "p.toml")
    with pytest.raises(PolicyError):
        build_authenticator(policy)


def test_an_empty_claim_alias_path_is_rejected() -> None:
    # `d = []` resolves the alias to the whole claims object.
    with pytest.raises(PolicyError):
        parse_policy(b"[auth]\nclaim_aliases = { d = [] }\n", "p.toml")


async def test_a_signed_token_with_an_absurd_exp_is_a_bad_token_not_a_crash() -> None:
    # math.isfinite(10**400) raises OverflowError: TokenAuthenticator.authenticate raises (its
    # contract says it never does) and the guard reports a backend `error` instead of a bad token.
    identity = await authenticator().authenticate(Credentials(token=RSA.sign(claims(exp=10**400))))
    assert identity.principal is None
    assert identity.error is False
    assert identity.failure == "token claim 'exp' is not a number"


class SelfCancelling:
    """A resolver whose own awaited work was cancelled (not the caller's request)."""

    namespace = "zz"

    def validate(self, requirement: str) -> str | None:
        return None

    async def resolve(self, requirement: str, context: CallContext) -> Any:
        raise asyncio.CancelledError


async def test_a_resolver_raising_cancelled_error_is_an_error_outcome() -> None:
    # The caller was not cancelled: the decision must still be made (error -> deny) and recorded,
    # not escape as a cancellation of the whole request.
    guard = Guard(parse_policy(b"", "p.toml"), {"t": ["zz:a"]}, resolvers=[SelfCancelling()],
                  entry_points=False)
    decision = await guard.check("t", ANONYMOUS)
    assert decision.allowed is False
    found = decision.outcome("zz:a")
    assert found is not None and found.status is Status.ERROR


def test_credentials_repr_does_not_show_the_token() -> None:
    assert "s3cr3t" not in repr(Credentials(token="s3cr3t"))


def test_environment_variable_labels_are_not_unicode_trimmed() -> None:
    # str.strip() removes NBSP, U+2003, U+0085...: `production<NBSP>` becomes `production` (SPEC §2).
    labels = environment_labels([], "V", {"V": "production\u00a0, eu\u2003"})
    assert "production" not in labels
    assert "eu" not in labels


def test_a_reload_racing_add_tool_loses_neither_the_tool_nor_the_new_policy() -> None:
    # Guard.reload/add_tool compile from fields read before the compile and swap after it. A reloader
    # thread interleaving with a runtime add_tool (started here at the switch point, in a real second
    # thread) must neither swap in a snapshot without the new tool nor revert the new policy.
    old = parse_policy(b'environment = ["a"]\n', "p.toml")
    new = parse_policy(b'environment = ["b"]\n', "p.toml")

    class Interleaved(Guard):
        hook: Any = None

        def _compile(self, source: Any, tools: Any, previous: Any = None) -> Any:
            hook, self.hook = self.hook, None
            if hook is not None:
                hook()  # another thread runs here, while this compile is in progress
            return super()._compile(source, tools, previous)

    guard = Interleaved(old, {"t": ["env:a"]}, entry_points=False)
    adder = threading.Thread(target=guard.add_tool, args=("late", ["auth:oauth2"]))

    def interleave() -> None:
        adder.start()
        adder.join(0.2)  # the adder runs now, while the reload's compile is in progress

    guard.hook = interleave
    guard.reload(new)
    adder.join(10)
    assert not adder.is_alive()
    assert guard.revision == new.revision
    assert guard.requirements_for("late") == ("auth:oauth2",)
