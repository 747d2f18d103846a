"""Token-verification benchmarks: a first-seen JWT through the full verifier (cache off) against a bare
`jwt.decode` of the same token and key, and a cached repeat. Goals: within 1.2x, and <= 3 us median.

Static keys, no network. Run: .venv/bin/python -m bench.bench_auth
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from bench import interleaved, percentile, sample, timer_overhead_ns
from mcp_preconditions.auth import IdentityCache, JwtVerifier, KeySet, TokenAuthenticator
from mcp_preconditions.auth.keys import key_from_jwk
from mcp_preconditions.policy.model import Auth
from mcp_preconditions.principal import Credentials, Identity

ISSUER = "https://auth.example.com"
AUDIENCE = "urn:mcp:mission-server"
RUNS = 20_000


def _finish(coroutine: Coroutine[Any, Any, Identity]) -> Identity:
    """Run a coroutine that never suspends (static keys, or a cache hit) without an event loop, so
    the numbers are the verifier's, not asyncio's scheduling."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        identity: Identity = done.value
        return identity
    raise RuntimeError("the verifier suspended: this benchmark must not touch the network")


def _token(private: Any, alg: str, kid: str) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "mission-control", "client_id": "mission-control",
              "iat": now, "exp": now + 3600, "jti": "bench-token", "scope": "mission:read mission:write",
              "role": "mission_control", "roles": ["mission_control", "engineer"], "tenant": "acme"}
    return str(jwt.encode(claims, private, algorithm=alg, headers={"kid": kid, "typ": "at+jwt"}))


def _authenticator(public_jwk: dict[str, Any], cached: bool) -> TokenAuthenticator:
    settings = Auth(issuer=ISSUER, audience=AUDIENCE, keys=[public_jwk], require_typ="at+jwt")
    verifier = JwtVerifier(settings, KeySet([key_from_jwk(public_jwk)]))
    cache = IdentityCache(10_000, 300) if cached else IdentityCache(0, 0)
    return TokenAuthenticator(jwt_verifier=verifier, cache=cache)


def measure(alg: str) -> dict[str, float]:
    """First-seen vs bare decode (interleaved, same token and key) and cached repeats, for `alg`."""
    private: Any = (rsa.generate_private_key(public_exponent=65537, key_size=2048) if alg == "RS256"
                    else ec.generate_private_key(ec.SECP256R1()))
    algorithm = jwt.algorithms.RSAAlgorithm if alg == "RS256" else jwt.algorithms.ECAlgorithm
    public_jwk = {**algorithm.to_jwk(private.public_key(), as_dict=True), "kid": "k1", "alg": alg}
    public = private.public_key()
    token = _token(private, alg, "k1")
    credentials = Credentials(token=token)
    full = _authenticator(public_jwk, cached=False)
    cached = _authenticator(public_jwk, cached=True)
    assert _finish(full.authenticate(credentials)).principal is not None
    assert _finish(cached.authenticate(credentials)).principal is not None

    def bare() -> object:
        return jwt.decode(token, public, algorithms=[alg], audience=AUDIENCE, issuer=ISSUER, leeway=30,
                          options={"require": ["exp", "iss", "aud"]})

    calls: dict[str, Callable[[], object]] = {
        "jwt_decode": bare, "first_seen": lambda: _finish(full.authenticate(credentials))}
    samples = interleaved(calls, RUNS)
    hits = sample(lambda: _finish(cached.authenticate(credentials)), RUNS * 5)
    out: dict[str, float] = {}
    for name, values in {**samples, "cached_token": hits}.items():
        out[f"{name}_p50_us"] = percentile(values, 50) / 1000
        out[f"{name}_p99_us"] = percentile(values, 99) / 1000
    out["first_seen_ratio_vs_jwt_decode"] = out["first_seen_p50_us"] / out["jwt_decode_p50_us"]
    return out


def run() -> dict[str, float]:
    """The harness entry point (bench/run.py): RS256 figures unprefixed, ES256 ones prefixed."""
    results = measure("RS256")
    results.update({f"es256_{k}": v for k, v in measure("ES256").items()})
    results["timer_overhead_ns"] = timer_overhead_ns()
    return results


if __name__ == "__main__":
    numbers = run()
    print(json.dumps({k: round(v, 3) for k, v in numbers.items()}, indent=2))
    verdicts = {"first-seen within 1.2x of jwt.decode": numbers["first_seen_ratio_vs_jwt_decode"] <= 1.2,
                "cached repeat <= 3 us median": numbers["cached_token_p50_us"] <= 3.0}
    for goal, met in verdicts.items():
        print(f"{'met' if met else 'MISSED'}: {goal}")
