"""The image run as deploy/kubernetes/gateway.yaml runs it, with per-caller credentials, approvals
and sign-in (issue 40.7): two containers (read-only, no capabilities) from the ConfigMap's
gateway.toml and policy.toml, the Deployment's arguments (`--public-url` included) and exactly the
variables it sets from its Secrets, one redis-server between them, in front of two MCP SDK servers
that verify their own tokens at the session's oidc-provider. Only what cannot exist here is
replaced: the addresses, the example's tool names, scopes and roles (LOCAL, each found in the
manifest). A person's flows may go to either replica, request by request, as behind a Service with no
affinity: a token exchange, an approval asked on one and decided and used on the other, a connect
link made on one and completed across both. Without the shared pages key the image refuses to start.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.approvals import envelope
from tests.fixtures.containers import BUILD_TIMEOUT, HARDENED, Container, gateway_container, podman
from tests.fixtures.oidc import AUDIENCE, CRM, CRM_AUDIENCE, WIKI, OidcServer, sign_in
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer, redis_binary
from tests.fixtures.token_servers import TokenServer, token_server
from tests.unit.test_kubernetes_manifests import find, gateway_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(BUILD_TIMEOUT)]  # the first test may build
CONFIG = "/etc/mcp-preconditions"  # where the ConfigMap is mounted
NAMES = ("gw1", "gw2")


def local(text: str, table: dict[str, str]) -> str:
    """`text` with each manifest value of `table` replaced by the local one (each must be there)."""
    for manifest, here in table.items():
        assert manifest in text, manifest
        text = text.replace(manifest, here)
    return text


def configuration(oidc: OidcServer, crm: TokenServer, tickets: TokenServer) -> dict[str, str]:
    data = find("ConfigMap")["data"]
    return {
        "gateway.toml": local(data["gateway.toml"], {
            "http://crm.mcp-servers.svc.cluster.local:8000/mcp": crm.url,
            "https://auth.example.com/oauth2/token": f"{oidc.issuer}/token",
            '"https://crm.example.com"': f'"{CRM_AUDIENCE}"',
            "http://tickets.mcp-servers.svc.cluster.local:8000/mcp": tickets.url,
            "https://login.tickets.example.com": oidc.issuer,
            "https://tickets.example.com/mcp": WIKI,
            '"tickets:read"': '"wiki:read"'}),
        "policy.toml": local(data["policy.toml"], {
            '"https://auth.example.com"': f'"{oidc.issuer}"',
            "https://mcp.example.com/mcp": AUDIENCE,
            "auth:claim:role:crm_admin": "auth:claim:role:treasury",  # tess approves trent's call
            "auth:scope:crm:": "auth:scope:mission:",  # the scopes of the provider's people
            "crm__search_leads": "crm__whoami", "crm__delete_leads": "crm__note",
            "tickets__search": "tickets__whoami"}),
    }


def secrets(oidc: OidcServer, redis: RedisServer) -> dict[str, str]:
    """A value for every variable the Deployment takes from a Secret, as `kubectl create secret`
    would hold it (docs/deploy.md); the test fails if the Deployment sets another."""
    values = {
        "REDIS_URL": redis.url,
        "CRM_AUTHORIZATION": "Bearer " + oidc.token("mission-control", resource=CRM, scope=None),
        "TICKETS_AUTHORIZATION": "Bearer " + oidc.token("mission-control", resource=WIKI, scope=None),
        "TICKETS_CLIENT_ID": "connector", "TICKETS_CLIENT_SECRET": "connector-secret",
        "GW_CLIENT_ID": "gateway", "GW_CLIENT_SECRET": "gateway-secret",
        "GW_TOKEN_KEY": base64.b64encode(os.urandom(32)).decode(),
        "MCP_PRECONDITIONS_PAGES_KEY": base64.b64encode(os.urandom(32)).decode()}
    from_secrets = {v["name"] for v in gateway_spec()["env"] if "secretKeyRef" in v["valueFrom"]}
    assert from_secrets == set(values)
    return values


def arguments(public: str, metrics_port: int) -> list[str]:
    """The Deployment's arguments, its public address and metrics port made local."""
    args = gateway_spec()["args"]
    assert [a.split("=")[0] for a in args] == ["--config", "--metrics-listen", "--public-url"]
    return [args[0], f"--metrics-listen=http://127.0.0.1:{metrics_port}", f"--public-url={public}"]


@dataclass
class Balancer(httpx.BaseTransport):
    """What browsers reach at the public address: each request goes to the next replica in turn
    (harsher than a Service, which balances connections), the Host header left as it was sent."""

    public: httpx.URL
    replicas: list[httpx.URL]
    served: list[str] = field(default_factory=list)
    inner: httpx.HTTPTransport = field(default_factory=httpx.HTTPTransport)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if (request.url.host, request.url.port) == (self.public.host, self.public.port):
            replica = self.replicas[len(self.served) % len(self.replicas)]
            self.served.append(str(replica))
            request.url = request.url.copy_with(host=replica.host, port=replica.port)
        return self.inner.handle_request(request)


@dataclass
class Deployed:
    public: str
    replicas: dict[str, Container]
    crm: TokenServer
    tickets: TokenServer
    directory: Path
    env: dict[str, str]

    def browser(self) -> tuple[httpx.Client, Balancer]:
        balancer = Balancer(httpx.URL(self.public), [httpx.URL(c.url) for c in self.replicas.values()])
        return httpx.Client(transport=balancer, timeout=10), balancer


@pytest.fixture(scope="module")
def deployed(oidc_server: OidcServer, wiki: TokenServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Deployed]:
    tmp = tmp_path_factory.mktemp("image-credentials")
    redis = RedisServer(redis_binary(), tmp).start()
    public = f"http://127.0.0.1:{free_port()}"  # nothing listens: Balancer routes it
    try:
        with token_server(oidc_server.issuer, CRM_AUDIENCE, tmp) as crm, ExitStack() as stack:
            mounts = {}
            for name, text in configuration(oidc_server, crm, wiki).items():
                (tmp / name).write_text(text, encoding="utf-8")
                mounts[tmp / name] = f"{CONFIG}/{name}"
            env = secrets(oidc_server, redis)
            replicas = {name: stack.enter_context(gateway_container(
                free_port(), arguments(public, free_port()), mounts=mounts,
                env={**env, "MCP_PRECONDITIONS_REPLICA_ID": name})) for name in NAMES}
            yield Deployed(public, replicas, crm, wiki, tmp, env)
    finally:
        redis.stop()


async def _decline(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="decline")


async def call(container: Container, token: str, tool: str, arguments: dict[str, Any] | None = None
               ) -> mcp_types.CallToolResult:
    """One call from a client that declares elicitation, URL mode included (it gets the links)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=10)
    async with Client(streamable_http_client(container.url + "/mcp", http_client=http),
                      elicitation_callback=_decline) as client:
        return await client.call_tool(tool, arguments or {})


def text(result: mcp_types.CallToolResult) -> str:
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


def link(result: mcp_types.CallToolResult, unmet: str) -> str:
    assert result.is_error and result.structured_content is not None, result
    assert result.structured_content["unmet"] == [unmet]
    found = envelope(result)
    assert found is not None and found[0] == "available", result.meta
    urls = [hint["url"] for hint in found[1] if hint["type"] == "url"]
    assert len(urls) == 1, found
    return str(urls[0])


async def test_each_caller_reaches_the_crm_as_themselves_on_either_replica(
        deployed: Deployed, oidc_server: OidcServer) -> None:
    tokens = {who: oidc_server.user_token(who) for who in ("trent", "tess")}
    for name, container in deployed.replicas.items():
        for who, token in tokens.items():
            assert text(await call(container, token, "crm__whoami")) == who, name
    seen = [(c["subject"], c["client_id"]) for c in deployed.crm.calls() if c["tool"] == "whoami"]
    assert seen[-4:] == [("trent", "gateway"), ("tess", "gateway")] * 2  # exchanged by the gateway
    assert not set(tokens.values()) & deployed.crm.tokens_seen()  # a caller's own never went on


async def test_an_approval_asked_on_one_replica_is_decided_and_used_on_the_other(
        deployed: Deployed, oidc_server: OidcServer) -> None:
    trent, tess = oidc_server.user_token("trent"), oidc_server.user_token("tess")
    gw1, gw2 = deployed.replicas["gw1"], deployed.replicas["gw2"]
    asked = {"text": "delete the 42 leads of ACME"}
    url = link(await call(gw1, trent, "crm__note", asked), "approval:crm_bulk")
    assert url.startswith(deployed.public + "/approvals/")  # made with --public-url
    decided = httpx.post(gw2.url + url.removeprefix(deployed.public), json={"decision": "approve"},
                         headers={"Authorization": f"Bearer {tess}"}, timeout=10)
    assert (decided.status_code, decided.json()["state"]) == (200, "approved"), decided.text
    assert text(await call(gw2, trent, "crm__note", asked)) == "trent: delete the 42 leads of ACME"
    again = await call(gw1, trent, "crm__note", asked)  # single use, across replicas
    assert link(again, "approval:crm_bulk") != url
    assert [c["subject"] for c in deployed.crm.calls() if c["tool"] == "note"] == ["trent"]


async def test_a_connect_link_made_on_one_replica_is_completed_across_both(
        deployed: Deployed, oidc_server: OidcServer) -> None:
    trent = oidc_server.user_token("trent")
    gw1, gw2 = deployed.replicas["gw1"], deployed.replicas["gw2"]
    url = link(await call(gw1, trent, "tickets__whoami"), "credential:tickets")
    assert url.startswith(deployed.public + "/connect/")
    browser, balancer = deployed.browser()
    with browser:
        callback = sign_in(browser, url, deployed.public + "/oauth/callback", "trent")
        done = browser.get(callback)
    message = html.unescape(done.text)
    assert done.status_code == 200 and "Your account is connected for 'tickets'." in message, message
    assert set(balancer.served) == {c.url for c in deployed.replicas.values()}  # both took part
    assert len(balancer.served) >= 3  # the link, the sign-in's callback, the authorization's
    for container in (gw2, gw1):
        assert text(await call(container, trent, "tickets__whoami")) == "trent"
    assert [c["subject"] for c in deployed.tickets.calls()][-2:] == ["trent", "trent"]


def test_without_the_shared_pages_key_the_image_refuses_to_start(deployed: Deployed) -> None:
    """Replicas that share sign-ins in Redis must share the key that seals them: one line, exit 2."""
    command = ["run", "--rm", "--network=host", *HARDENED]
    for name in ("gateway.toml", "policy.toml"):
        command += ["--volume", f"{deployed.directory / name}:{CONFIG}/{name}:ro"]
    for key, value in deployed.env.items():
        if key != "MCP_PRECONDITIONS_PAGES_KEY":
            command += ["--env", f"{key}={value}"]
    done = podman(*command, "localhost/mcp-preconditions:dev",
                  *arguments(deployed.public, free_port()), "--listen", f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines()[-1] == (
        "mcp-preconditions: error: $MCP_PRECONDITIONS_PAGES_KEY is not set: replicas that share "
        "sign-ins in Redis must share the key that seals them (32 bytes, base64: openssl rand "
        "-base64 32)"), done.stderr
