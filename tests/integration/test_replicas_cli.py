"""`mcp-preconditions gateway` with replica flags: each bad value, and each first bundle load that
fails (unreachable, 404, unsigned or tampered while a key is given), is one line and exit 2, before
anything starts; the poll defaults; a stdio gateway following its bundle. Bundles come from a real
HTTP server on 127.0.0.1 (on a thread of this process).

`main(argv)` in the test's own process for the bad input; the stdio gateway in-process
(tests/fixtures/inprocess.py: wired from its command line in the test's event loop, its upstream in
memory), the new bundle awaited on the reloader's log line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from mcp_preconditions.cli import main
from mcp_preconditions.gateway.replicas import options_from
from tests.fixtures.inprocess import cli_gateway
from tests.fixtures.memory_upstream import MemoryServers, logging_env
from tests.fixtures.ports import free_port
from tests.integration.test_replicas_cluster import BundleServer

POLICY = b'[tools.echo]\nrequirements = ["env:production"]\n'
UPSTREAM = ["--upstream-url", "http://127.0.0.1:1/mcp"]


@pytest.fixture
def bundles() -> Iterator[BundleServer]:
    server = BundleServer()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


POLL = "--policy-poll-seconds: expected 0 (off) or a number of seconds >= 0.1, got "


@pytest.mark.parametrize(("args", "message"), [
    (["--policy-poll-seconds", "0.05"], POLL + "'0.05'"),
    (["--policy-poll-seconds", "-1"], POLL + "'-1'"),
    (["--policy-poll-seconds", "soon"], POLL + "'soon'"),
    (["--policy-poll-seconds", "nan"], POLL + "'nan'"),
    (["--policy-poll-seconds", "inf"], POLL + "'inf'"),
    (["--replica-id", ""], "--replica-id: must not be empty"),
])
def test_bad_replica_flags_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                args: list[str], message: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_bytes(POLICY)
    assert main(["gateway", "--policy", str(policy), *args, *UPSTREAM]) == 2
    assert capsys.readouterr().err == f"mcp-preconditions: error: {message}\n"


def test_a_public_key_with_a_policy_file_is_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    policy, key = tmp_path / "policy.toml", tmp_path / "key.raw"
    policy.write_bytes(POLICY)
    key.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes_raw())
    assert main(["gateway", "--policy", str(policy), "--policy-public-key", str(key), *UPSTREAM]) == 2
    assert capsys.readouterr().err == (f"mcp-preconditions: error: {policy}: a policy public key "
                                       f"applies to a policy URL (http:// or https://) only\n")


def test_a_first_bundle_load_that_fails_exits_2_naming_the_url(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], bundles: BundleServer) -> None:
    signer, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    key = tmp_path / "policy-public.pem"
    key.write_bytes(signer.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    url, down = bundles.url, f"http://127.0.0.1:{free_port()}/gateway.toml"

    def first_load(policy_url: str, *flags: str) -> str:
        assert main(["gateway", "--policy", policy_url, *flags, *UPSTREAM]) == 2
        return capsys.readouterr().err

    assert first_load(down) == (f"mcp-preconditions: error: {down}: cannot fetch: connection failed "
                                f"([Errno 111] Connection refused)\n")
    assert first_load(url) == f"mcp-preconditions: error: {url}: answered HTTP 404\n"
    bundles.files["/gateway.toml"] = POLICY  # no signature beside it
    assert first_load(url, "--policy-public-key", str(key)) == (
        f"mcp-preconditions: error: {url}: unsigned: {url}.sig answered HTTP 404, and a signature "
        f"is required (a public key is configured)\n")
    bundles.publish(POLICY, other.sign(POLICY))
    assert first_load(url, "--policy-public-key", str(key)) == (
        f"mcp-preconditions: error: {url}: signature {url}.sig does not match the body for the "
        f"configured public key (tampered, or signed with another key)\n")


def test_a_url_is_polled_every_10_s_and_a_file_every_2_s_by_default_0_is_off() -> None:
    assert options_from("https://p.example/gw.toml", None, None, None).interval == 10.0
    assert options_from("HTTP://p.example/gw.toml", "2.5", None, None).interval == 2.5
    assert options_from("HTTP://p.example/gw.toml", "0", None, None).interval is None
    assert options_from("gw.toml", None, None, None).interval == 2.0
    assert options_from("gw.toml", "0", None, None).interval is None
    assert options_from("gw.toml", "1", None, None).interval == 1.0
    assert options_from("gw.toml", None, None, "pod-7").replica() == "pod-7"


@pytest.mark.asyncio(loop_scope="module")
async def test_a_stdio_gateway_follows_its_bundle(tmp_path: Path, bundles: BundleServer) -> None:
    """The poller runs over stdio too: a published bundle turns a denial into an allow, without a
    restart, at its next poll."""
    closed = b'environment = ["staging"]\n[tools.echo]\nrequirements = ["env:production"]\n'
    opened = b'environment = ["production"]\n[tools.echo]\nrequirements = ["env:production"]\n'
    bundles.files["/gateway.toml"] = closed
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.logging_upstream(**logging_env(tmp_path / "upstream.jsonl"))
        async with cli_gateway(["--policy", bundles.url, "--policy-poll-seconds", "0.2", "--",
                                *upstream]) as gw, gw.client() as client:
            denied = (await client.call_tool("echo", {"text": "hi"})).is_error
            bundles.files["/gateway.toml"] = opened
            await gw.logged(f"policy {bundles.url} reloaded: revision ")
            allowed = not (await client.call_tool("echo", {"text": "hi"})).is_error
    assert (denied, allowed) == (True, True)
