"""A token without `sub` names no subject (SPEC §14, issue 39.8), through a real gateway process and
the real oidc-provider: a client registered as `alice` holds an opaque client-credentials token,
whose introspection answer carries its `client_id` and no `sub`. Before, the gateway named that
caller `alice` and sent the person alice's per-subject secret to the server for it; now the call is
denied for `credential:legacy` and nothing reaches the server, while alice herself still gets her
own. Its decision record says the subject is unknown.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fixtures.credential_gateway import call, gateway, policy_text, secrets_file, text_of
from tests.fixtures.oidc import CRM, CRM_AUDIENCE, OPAQUE, OidcServer
from tests.fixtures.token_servers import token_server

pytestmark = pytest.mark.integration


def test_a_client_registered_as_alice_is_never_sent_alices_secret(oidc_server: OidcServer,
                                                                  tmp_path: Path) -> None:
    alices_secret = oidc_server.user_token("alice", resource=CRM, scope="crm:read")
    client_token = oidc_server.token("alice", resource=OPAQUE, scope="mission:read")
    assert client_token.count(".") == 0  # opaque: its introspection answer names no `sub`
    directory = tmp_path / "gateway"
    directory.mkdir()
    (tmp_path / "legacy").mkdir()
    secrets_file(directory, {f"{oidc_server.issuer} alice": f"Bearer {alices_secret}"})
    introspection = (f'[auth.introspection]\nendpoint = "{oidc_server.introspection_endpoint}"\n'
                     'client_id_env = "INTROSPECTION_ID"\nclient_secret_env = "INTROSPECTION_SECRET"\n')
    with token_server(oidc_server.issuer, CRM_AUDIENCE, tmp_path / "legacy") as legacy, gateway(
            directory, oidc_server,
            {"legacy": {"url": legacy.url, "headers": {"Authorization": "env:LEGACY_SERVICE"},
                        "credentials": {"kind": "per-subject", "secrets": "secrets.json"}}},
            policy=policy_text(oidc_server, extra=introspection),
            env={"INTROSPECTION_ID": "introspector", "INTROSPECTION_SECRET": "introspector-secret",
                 "LEGACY_SERVICE": "Bearer " + oidc_server.token("mission-control", resource=CRM,
                                                                 scope=None)}) as gw:
        refused = asyncio.run(call(gw.url, client_token, "legacy__whoami"))
        assert refused.is_error and refused.structured_content["unmet"] == ["credential:legacy"]
        record = gw.records()[-1]
        assert (record["tool"], record["subject"], record["unmet"]) == (
            "legacy__whoami", None, ["credential:legacy"])  # the subject is unknown, and said so
        assert legacy.calls() == [] and alices_secret not in legacy.tokens_seen()  # sent nowhere

        person = oidc_server.user_token("alice")  # the person alice: her own secret, as before
        assert text_of(asyncio.run(call(gw.url, person, "legacy__whoami"))) == "alice"
