"""Unit tests of the live fact sources with in-memory doubles: Redis settings and sharing, and the
OpenFeature source's evaluation context and error mapping (OpenFeature's InMemoryProvider)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from openfeature import api
from openfeature.evaluation_context import EvaluationContext
from openfeature.event import ProviderEventDetails
from openfeature.exception import GeneralError
from openfeature.flag_evaluation import FlagResolutionDetails
from openfeature.provider.in_memory_provider import InMemoryFlag, InMemoryProvider

from mcp_preconditions import (
    BackendError,
    CallContext,
    Guard,
    Identity,
    LiveSources,
    Principal,
    RequirementError,
    Status,
    parse_policy,
)
from mcp_preconditions.policy.model import Redis as RedisSettings
from mcp_preconditions.resolvers.feature_openfeature import NonBoolean, OpenFeatureFlagSource
from mcp_preconditions.resolvers.state_redis import RedisStateSource

_domains = itertools.count()
ALICE = Identity(principal=Principal.from_claims({
    "sub": "alice", "role": "ops", "groups": ["a", "b"], "nested": {"k": 1}, "nothing": None,
    "tool": "spoofed", "hidden": "never-selected"}))


# -- Redis: settings, sharing, secrets (no server needed) -----------------------------------------
def test_redis_url_env_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_REDIS_URL_UNSET", raising=False)
    with pytest.raises(RequirementError) as caught:
        RedisStateSource.from_policy(RedisSettings(url_env="TEST_REDIS_URL_UNSET"))
    assert caught.value.messages == [
        "state.redis.url_env: environment variable 'TEST_REDIS_URL_UNSET' is not set"]


def test_redis_url_env_supplies_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_REDIS_URL", "redis://:pw-from-env@127.0.0.1:1/0")
    source = RedisStateSource.from_policy(RedisSettings(url_env="TEST_REDIS_URL", prefix="env:"))
    assert source.prefix == "env:" and "pw-from-env" not in repr(source)


def test_a_malformed_redis_url_refuses_to_start() -> None:
    with pytest.raises(RequirementError) as caught:
        RedisStateSource.from_policy(RedisSettings(url="http://127.0.0.1:6379"))
    assert caught.value.messages == [
        "state.redis.url: not a usable Redis URL (Redis URL must specify one of the following schemes "
        "(redis://, rediss://, unix://))"]


def test_snapshots_with_the_same_redis_settings_share_one_source() -> None:
    text = b'[state.redis]\nurl = "redis://127.0.0.1:1/0"\n[tools.t]\nrequirements = ["state:k"]\n'
    guard = Guard(parse_policy(text, "a.toml"), entry_points=False)
    before = guard.snapshot.registry.get("state").source  # type: ignore[union-attr]
    guard.reload(parse_policy(text + b"# edited\n", "a.toml"))
    after = guard.snapshot.registry.get("state").source  # type: ignore[union-attr]
    assert isinstance(before, RedisStateSource) and before is after
    other = RedisStateSource.from_policy(RedisSettings(url="redis://127.0.0.1:1/0", prefix="x:"))
    assert other is not before


# -- OpenFeature: context and mapping ------------------------------------------------------------
class FailingProvider(InMemoryProvider):
    def resolve_boolean_details(self, flag_key: str, default_value: bool,
                                evaluation_context: EvaluationContext | None = None
                                ) -> FlagResolutionDetails[bool]:
        raise GeneralError("flag store exploded")

    async def resolve_boolean_details_async(self, flag_key: str, default_value: bool,
                                            evaluation_context: EvaluationContext | None = None
                                            ) -> FlagResolutionDetails[bool]:
        raise GeneralError("flag store exploded")


def source_with(provider: Any, claims: tuple[str, ...] = ()) -> OpenFeatureFlagSource:
    domain = f"unit-test-{next(_domains)}"
    api.set_provider_and_wait(provider, domain)
    return OpenFeatureFlagSource(api.get_client(domain), claims)


def flags(**values: Any) -> InMemoryProvider:
    return InMemoryProvider({k: InMemoryFlag("v", {"v": v}) for k, v in values.items()})


def test_the_context_is_subject_selected_claims_and_tool() -> None:
    source = source_with(flags(), ("role", "groups", "nested", "nothing", "tool", "absent"))
    ctx = source.context_for(CallContext("launch", ALICE))
    assert ctx.targeting_key == "alice"
    assert dict(ctx.attributes) == {"role": "ops", "groups": ["a", "b"], "nested": {"k": 1},
                                    "tool": "launch"}
    anonymous = source.context_for(CallContext("launch", Identity(failure="no access token")))
    assert anonymous.targeting_key is None and dict(anonymous.attributes) == {"tool": "launch"}


async def test_values_missing_and_non_boolean_flags() -> None:
    source = source_with(flags(on=True, off=False, name="blue", n=3))
    call = CallContext("launch", ALICE)
    assert await source.evaluate("on", call) is True
    assert await source.evaluate("off", call) is False
    assert await source.evaluate("missing", call) is None
    assert await source.evaluate("name", call) == "blue"
    assert await source.evaluate("n", call) == 3


async def test_a_provider_error_raises_backend_error() -> None:
    source = source_with(FailingProvider({}))
    with pytest.raises(BackendError) as caught:
        await source.evaluate("on", CallContext("launch", ALICE))
    assert str(caught.value) == "flag provider error GENERAL: flag store exploded"


async def test_a_provider_that_is_not_ready_raises_backend_error() -> None:
    source = source_with(flags(on=True))
    provider: Any = source.client.provider
    provider.emit_provider_error(ProviderEventDetails(message="lost its store"))
    with pytest.raises(BackendError) as caught:
        await source.evaluate("on", CallContext("launch", ALICE))
    assert str(caught.value) == "flag provider is error"


async def test_through_the_guard_a_provider_error_is_an_error_outcome() -> None:
    text = b'[tools.launch]\nrequirements = ["feature:on"]\n'
    guard = Guard(parse_policy(text, "p.toml"), entry_points=False,
                  live=LiveSources(flags=source_with(FailingProvider({}))))
    decision = await guard.check_identity("launch", ALICE)
    assert not decision.allowed and decision.outcomes[0].status is Status.ERROR
    assert decision.outcomes[0].reason == ("resolver 'feature' raised BackendError: flag provider "
                                           "error GENERAL: flag store exploded")


def test_non_boolean_marker_names_itself() -> None:
    assert type(NonBoolean()).__name__ == "NonBoolean"


async def test_a_source_whose_provider_was_closed_fails_closed() -> None:
    source = OpenFeatureFlagSource(api.get_client(f"unit-test-never-set-{next(_domains)}"))
    with pytest.raises(BackendError) as caught:
        await source.evaluate("on", CallContext("launch", ALICE))
    assert str(caught.value) == "no flag provider is registered for this source"
