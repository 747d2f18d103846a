"""Policy bundles from a real HTTP server on 127.0.0.1 (stdlib http.server on a thread): ETag 304s,
new revisions, signatures (tampered, unsigned when required), truncated bodies, a body still
arriving past the deadline, 5xx, unreachable.

Every refusal keeps the revision in force; a first load that fails raises one clear PolicyError.
Polls are awaited on the change they make (a callback's event); the whole exchange's deadline runs
on a fake clock (tests/fixtures/clock.py) that the server moves while it answers.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from mcp_preconditions import Guard, Identity
from mcp_preconditions.decision_sinks import JsonlRecorder
from mcp_preconditions.drivers.bundle import (
    BundleReloader,
    is_policy_url,
    load_policy_source,
    load_policy_url,
    load_public_key,
    policy_reloader,
)
from mcp_preconditions.drivers.reload import PolicyChange, PolicyReloader
from mcp_preconditions.errors import InputError, PolicyError
from mcp_preconditions.logsummary import summarize
from mcp_preconditions.policy.load import revision_of
from mcp_preconditions.replica import replica_labels
from tests.fixtures.clock import FakeClock

NOBODY = Identity()
OPEN = b'environment = ["production"]\n[tools.launch]\nrequirements = ["env:production"]\n'
CLOSED = b'environment = ["staging"]\n[tools.launch]\nrequirements = ["env:production"]\n'
BROKEN = b'environment = "production"\n'
WAIT_SECONDS = 10.0  # the safety net of a wait for a poll's change


class BundleServer:
    """A real HTTP/1.1 server with strong ETags, and faults on demand per path: "500", "truncate"
    (half the body, then the connection closes), "hang" (no answer until the test ends), "slow"
    (`while_answering` runs between the headers and the body: a test's clock moves on)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, str] = {}
        self.while_answering: Callable[[], None] = lambda: None
        self.log: list[tuple[str, int]] = []  # (path, status) of every answer
        self._release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.answer(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        fault, body = self.faults.get(request.path), self.files.get(request.path)
        if fault == "hang":
            self._release.wait(10)
        if fault == "500" or body is None:
            status = 500 if fault == "500" else 404
            self.log.append((request.path, status))
            request.send_response(status)
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        if request.headers.get("If-None-Match") == etag:
            self.log.append((request.path, 304))
            request.send_response(304)
            request.send_header("ETag", etag)
            request.end_headers()
            return
        self.log.append((request.path, 200))
        request.send_response(200)
        request.send_header("Content-Type", "application/toml")
        request.send_header("Content-Length", str(len(body)))
        request.send_header("ETag", etag)
        request.end_headers()
        if fault == "slow":
            request.wfile.flush()
            self.while_answering()
        if fault == "truncate":
            request.wfile.write(body[: len(body) // 2])
            request.close_connection = True
        else:
            request.wfile.write(body)

    def close(self) -> None:
        self._release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class Signer:
    """An Ed25519 key pair; the public half written as PEM, signatures as base64 text."""

    def __init__(self, folder: Path) -> None:
        self.private = Ed25519PrivateKey.generate()
        self.public_file = folder / "policy-key.pem"
        self.public_file.write_bytes(self.private.public_key().public_bytes(
            Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))

    def sign(self, body: bytes) -> bytes:
        return base64.b64encode(self.private.sign(body)) + b"\n"


@pytest.fixture
def server() -> Iterator[BundleServer]:
    s = BundleServer()
    yield s
    s.close()


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path)


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def publish(server: BundleServer, body: bytes, signer: Signer | None = None) -> str:
    server.files["/policy.toml"] = body
    if signer is not None:
        server.files["/policy.toml.sig"] = signer.sign(body)
    return server.url("/policy.toml")


def allowed(guard: Guard) -> bool:
    return guard.decide("launch", NOBODY).allowed


# -- the happy paths -------------------------------------------------------------------------------
def test_an_unchanged_bundle_is_a_304_and_is_not_recompiled(server: BundleServer) -> None:
    url = publish(server, OPEN)
    source = load_policy_url(url)
    assert (source.source, source.revision) == (url, revision_of(OPEN))
    guard = Guard(source, entry_points=False)
    reloader = BundleReloader(guard, url)
    snapshot = guard.snapshot
    assert reloader.reload() is None  # first poll: no ETag yet, same revision, nothing compiled
    assert reloader.reload() is None and reloader.reload() is None
    assert server.log == [("/policy.toml", 200), ("/policy.toml", 200),
                          ("/policy.toml", 304), ("/policy.toml", 304)]
    assert guard.snapshot is snapshot and reloader.last_error is None


def test_a_new_revision_is_applied_and_decisions_carry_it(server: BundleServer) -> None:
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    reloader = BundleReloader(guard, url)
    assert allowed(guard)
    publish(server, CLOSED)
    assert reloader.reload() == PolicyChange(url, revision_of(OPEN), revision_of(CLOSED))
    decision = guard.decide("launch", NOBODY)
    assert (decision.allowed, decision.revision) == (False, revision_of(CLOSED))
    assert reloader.revision == revision_of(CLOSED)
    assert reloader.reload() is None and server.log[-1] == ("/policy.toml", 304)


def test_a_signed_bundle_verifies_with_a_pem_or_raw_key(
        server: BundleServer, signer: Signer, tmp_path: Path) -> None:
    url = publish(server, OPEN, signer)
    assert load_policy_url(url, signer.public_file).revision == revision_of(OPEN)
    raw_key = tmp_path / "raw.key"
    raw_key.write_bytes(load_public_key(signer.public_file).public_bytes_raw())
    server.files["/policy.toml.sig"] = signer.private.sign(OPEN)  # raw 64 bytes this time
    assert load_policy_url(url, raw_key).revision == revision_of(OPEN)


# -- refusals keep the last good policy ------------------------------------------------------------
def test_a_tampered_bundle_is_refused_and_the_old_revision_stays(
        server: BundleServer, signer: Signer, caplog: pytest.LogCaptureFixture) -> None:
    url = publish(server, OPEN, signer)
    guard = Guard(load_policy_url(url, signer.public_file), entry_points=False)
    reloader = BundleReloader(guard, url, public_key=signer.public_file)
    server.files["/policy.toml"] = CLOSED  # the body changed, the signature is still OPEN's
    expected = (f"{url}: signature {url}.sig does not match the body for the configured public key "
                f"(tampered, or signed with another key)")
    with caplog.at_level(logging.ERROR, logger="mcp_preconditions.policy"):
        for _ in range(3):
            assert reloader.reload() is None
    assert reloader.last_error == expected
    assert [r.getMessage() for r in caplog.records] == [
        f"policy reload failed, keeping revision {revision_of(OPEN)}: {expected}"]  # once
    assert guard.revision == revision_of(OPEN) and allowed(guard)
    # The publisher's signature lands a moment later: the next poll picks the pair up.
    server.files["/policy.toml.sig"] = signer.sign(CLOSED)
    assert reloader.reload() == PolicyChange(url, revision_of(OPEN), revision_of(CLOSED))
    assert reloader.last_error is None and not allowed(guard)


def test_unsigned_garbled_or_unfetchable_signatures_are_refused(
        server: BundleServer, signer: Signer) -> None:
    url = publish(server, OPEN, signer)
    guard = Guard(load_policy_url(url, signer.public_file), entry_points=False)
    reloader = BundleReloader(guard, url, public_key=signer.public_file)
    publish(server, CLOSED)
    for signature, fault, problem in [
            (None, None, f"unsigned: {url}.sig answered HTTP 404, and a signature is required (a "
                         f"public key is configured)"),
            (b"not a signature\n", None, f"signature {url}.sig is neither 64 raw bytes nor their base64"),
            (signer.sign(CLOSED), "500", f"signature: {url}.sig: answered HTTP 500")]:
        server.files.pop("/policy.toml.sig", None)
        if signature is not None:
            server.files["/policy.toml.sig"] = signature
        server.faults.pop("/policy.toml.sig", None)
        if fault is not None:
            server.faults["/policy.toml.sig"] = fault
        assert reloader.reload() is None
        assert reloader.last_error == f"{url}: {problem}"
        assert guard.revision == revision_of(OPEN) and allowed(guard)


def test_a_truncated_body_is_never_applied(server: BundleServer) -> None:
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    reloader = BundleReloader(guard, url)
    publish(server, CLOSED)
    server.faults["/policy.toml"] = "truncate"
    assert reloader.reload() is None
    half = len(CLOSED) // 2
    assert reloader.last_error == (
        f"{url}: body cut short or malformed: RemoteProtocolError: peer closed connection without "
        f"sending complete message body (received {half} bytes, expected {len(CLOSED)})")
    assert guard.revision == revision_of(OPEN) and allowed(guard)
    del server.faults["/policy.toml"]
    assert reloader.reload() is not None and guard.revision == revision_of(CLOSED)


def test_a_broken_policy_keeps_the_old_one_with_every_problem(server: BundleServer) -> None:
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    reloader = BundleReloader(guard, url)
    publish(server, BROKEN)
    assert reloader.reload() is None
    assert reloader.last_error == (f"{url}: invalid policy (1 problem(s)):\n"
                                   "  environment: Input should be a valid list")
    assert guard.revision == revision_of(OPEN)


def test_5xx_then_unreachable_keep_the_last_good_policy_and_log_each_once(
        server: BundleServer, caplog: pytest.LogCaptureFixture) -> None:
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    reloader = BundleReloader(guard, url, timeout=10.0)  # the 500 must arrive in time, loaded or not
    server.faults["/policy.toml"] = "500"
    with caplog.at_level(logging.ERROR, logger="mcp_preconditions.policy"):
        assert reloader.reload() is None and reloader.reload() is None
        assert reloader.last_error == f"{url}: answered HTTP 500"
        server.close()
        assert reloader.reload() is None and reloader.reload() is None
    assert reloader.last_error is not None
    assert reloader.last_error.startswith(f"{url}: cannot fetch: connection failed (")
    assert [r.getMessage() for r in caplog.records] == [
        f"policy reload failed, keeping revision {revision_of(OPEN)}: {url}: answered HTTP 500",
        f"policy reload failed, keeping revision {revision_of(OPEN)}: {reloader.last_error}"]
    assert guard.revision == revision_of(OPEN) and allowed(guard)


def test_a_body_still_arriving_past_the_deadline_is_cut_off(server: BundleServer) -> None:
    """The deadline is the whole exchange's: a server that keeps sending (each byte well within the
    network timeout) is cut off once the clock passes it, here moved on while the server answers."""
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    clock = FakeClock()
    reloader = BundleReloader(guard, url, timeout=5.0, timer=clock)
    publish(server, CLOSED)
    server.faults["/policy.toml"] = "slow"
    server.while_answering = lambda: clock.advance(5.1)
    assert reloader.reload() is None
    assert reloader.last_error == f"{url}: no complete answer within 5 s"
    assert guard.revision == revision_of(OPEN)
    server.while_answering = lambda: clock.advance(4.9)  # within it: the body is taken
    assert reloader.reload() is not None and guard.revision == revision_of(CLOSED)


def test_a_server_that_hangs_is_cut_off_at_the_timeout(server: BundleServer) -> None:
    """A server that sends nothing: the network timeout (httpx's own, in real time) cuts it off."""
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    reloader = BundleReloader(guard, url, timeout=0.5)
    server.faults["/policy.toml"] = "hang"
    assert reloader.reload() is None
    assert reloader.last_error == f"{url}: no complete answer within 0.5 s"
    assert guard.revision == revision_of(OPEN)


# -- the first load --------------------------------------------------------------------------------
def test_a_first_load_that_fails_raises_one_clear_line(
        server: BundleServer, signer: Signer, tmp_path: Path) -> None:
    url = publish(server, OPEN)
    server.faults["/policy.toml"] = "500"
    with pytest.raises(PolicyError) as error:
        load_policy_url(url)
    assert str(error.value) == f"{url}: answered HTTP 500"
    del server.faults["/policy.toml"]
    with pytest.raises(PolicyError) as error:
        load_policy_url(url, signer.public_file)
    assert str(error.value) == (f"{url}: unsigned: {url}.sig answered HTTP 404, and a signature is "
                                f"required (a public key is configured)")
    server.files["/policy.toml.sig"] = signer.sign(CLOSED)
    with pytest.raises(PolicyError) as error:
        load_policy_url(url, signer.public_file)
    assert str(error.value) == (f"{url}: signature {url}.sig does not match the body for the "
                                f"configured public key (tampered, or signed with another key)")
    missing = server.url("/nothing.toml")
    with pytest.raises(PolicyError) as error:
        load_policy_url(missing)
    assert str(error.value) == f"{missing}: answered HTTP 404"
    not_a_key = tmp_path / "key.pem"
    not_a_key.write_text("hello\n")
    with pytest.raises(InputError) as bad_key:
        load_policy_url(url, not_a_key)
    assert str(bad_key.value) == (f"{not_a_key}: not an Ed25519 public key (expected PEM 'BEGIN "
                                  f"PUBLIC KEY' or 32 raw bytes)")


def test_a_first_load_from_nowhere_names_the_url(server: BundleServer) -> None:
    url = server.url("/policy.toml")
    server.close()
    with pytest.raises(PolicyError) as error:
        load_policy_url(url, timeout=2.0)
    assert str(error.value).startswith(f"{url}: cannot fetch: connection failed (")
    assert "\n" not in str(error.value)


# -- polling, and the choice between a file and a URL -----------------------------------------------
def test_polling_on_a_thread_converges_to_a_new_bundle(server: BundleServer) -> None:
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    changes: list[PolicyChange] = []
    changed = threading.Event()
    reloader = BundleReloader(guard, url, interval=0.05, on_change=changes.append)
    reloader.add_listener(lambda _change: changed.set())
    reloader.start()
    try:
        publish(server, CLOSED)
        assert changed.wait(WAIT_SECONDS), "the poller never swapped the new bundle in"
    finally:
        reloader.stop()
    assert guard.revision == revision_of(CLOSED)
    assert changes == [PolicyChange(url, revision_of(OPEN), revision_of(CLOSED))]


async def test_polling_in_an_event_loop_runs_callbacks_there(server: BundleServer) -> None:
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    seen: list[str] = []
    threads: list[int] = []
    called = asyncio.Event()

    async def on_change(change: PolicyChange) -> None:
        await asyncio.sleep(0)
        seen.append(change.new_revision)
        called.set()

    reloader = BundleReloader(guard, url, interval=0.05, on_change=on_change)
    reloader.add_listener(lambda _change: threads.append(threading.get_ident()))
    reloader.start()
    try:
        publish(server, CLOSED)
        await asyncio.wait_for(called.wait(), WAIT_SECONDS)
    finally:
        reloader.stop()
    assert seen == [revision_of(CLOSED)]
    assert threads == [threading.get_ident()]  # a plain callback runs on the loop's thread too


def test_policy_specs_pick_a_bundle_or_a_file(server: BundleServer, tmp_path: Path) -> None:
    assert is_policy_url("http://127.0.0.1:1/p.toml") and is_policy_url("https://h/p")
    assert not is_policy_url("policy.toml") and not is_policy_url("file:///p.toml")
    url = publish(server, OPEN)
    guard = Guard(load_policy_url(url), entry_points=False)
    assert isinstance(policy_reloader(guard, url, interval=1.0), BundleReloader)
    local = tmp_path / "p.toml"
    local.write_bytes(OPEN)
    file_reloader = policy_reloader(guard, str(local), interval=1.0)
    assert type(file_reloader) is PolicyReloader
    assert load_policy_source(str(local)).revision == revision_of(OPEN)
    assert load_policy_source(url).source == url
    with pytest.raises(InputError) as error:
        load_policy_source(str(local), tmp_path / "key.pem")
    assert str(error.value) == (f"{local}: a policy public key applies to a policy URL (http:// or "
                                f"https://) only")
    for bad, problem in [("http://", "no host"), ("http://[::1", "Invalid port: ':1'")]:
        with pytest.raises(PolicyError) as error:
            load_policy_source(bad)
        assert str(error.value) == f"{bad}: not a usable URL: {problem}"


def _setting(event: threading.Event) -> Callable[[PolicyChange], None]:
    return lambda _change: event.set()


def test_three_replicas_converge_as_their_decision_logs_show(
        server: BundleServer, signer: Signer, tmp_path: Path) -> None:
    """Three guards (replicas r1..r3) poll one signed bundle and log to one JSONL file; after a
    publication, `log summarize` shows every replica's latest record on the new revision."""
    url = publish(server, OPEN, signer)
    log_file = tmp_path / "decisions.jsonl"
    recorders = [JsonlRecorder(log_file, replica_labels(replica=f"r{i}")) for i in (1, 2, 3)]
    guards = [Guard(load_policy_url(url, signer.public_file), entry_points=False, recorder=r)
              for r in recorders]
    reloaders = [BundleReloader(g, url, interval=0.05, public_key=signer.public_file) for g in guards]
    changed = [threading.Event() for _ in reloaders]
    for reloader, event in zip(reloaders, changed, strict=True):
        reloader.add_listener(_setting(event))
    for guard in guards:
        assert allowed(guard)
    for reloader in reloaders:
        reloader.start()
    try:
        publish(server, CLOSED, signer)
        for guard, event in zip(guards, changed, strict=True):
            assert event.wait(WAIT_SECONDS), "a replica never swapped the new bundle in"
            assert guard.revision == revision_of(CLOSED)
            assert not allowed(guard)
    finally:
        for reloader in reloaders:
            reloader.stop()
        for recorder in recorders:
            recorder.close()
    summary = summarize([str(log_file)], on_bad=lambda *bad: pytest.fail(f"bad line {bad}"))
    assert {name: r.last_revision for name, r in summary.replicas.items()} == {
        "r1": revision_of(CLOSED), "r2": revision_of(CLOSED), "r3": revision_of(CLOSED)}
    assert list(summary.revisions) == [revision_of(OPEN), revision_of(CLOSED)]
    assert (summary.tools["launch"].allowed, summary.tools["launch"].denied) == (3, 3)
