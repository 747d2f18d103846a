"""Policy bundles: a policy file served over http(s), optionally signed (detached Ed25519 signature at
URL + ".sig"), fetched once at start and then polled with ETag / If-None-Match.

A bad signature, a broken file, a truncated body, an HTTP error or an unreachable server keeps the
last good policy (logged once per problem); only a first load that fails raises.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from ..errors import BundleError, BundleNotFound, InputError, PreconditionsError
from ..files import read_bounded
from ..policy.load import PolicySource, load_policy, parse_policy
from .reload import OnChange, PolicyChange, PolicyReloader, log

if TYPE_CHECKING:  # httpx2 and cryptography are imported when a bundle URL or a key is used: a
    # policy file needs neither (30 MB of a gateway's memory)
    import httpx2
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from ..guard import Guard

MAX_BUNDLE_BYTES = 16 << 20  # a 100,000-tool policy is a few MiB; anything far larger is not a policy
DEFAULT_TIMEOUT = 5.0  # seconds for a whole exchange (connect, headers, body), per request
SIGNATURE_SUFFIX = ".sig"
PublicKeyLike: TypeAlias = "Ed25519PublicKey | str | Path"
Timer = Callable[[], float]  # seconds, for a whole exchange's deadline (time.monotonic; tests: a fake)


@dataclass(frozen=True, slots=True)
class Bundle:
    """A verified, validated bundle and the ETag it was served with (None when the server sent none)."""

    source: PolicySource
    etag: str | None


# How often `--policy` is re-read unless `--policy-poll-seconds` says otherwise. A file every 2 s:
# a poll is a stat and a read of a small file, and a change is in force within ~2 s (plus the
# reloader's 0.1 s settle). A bundle URL every 10 s (OPA's bundle default is 60 s; replicas
# converge within one interval, and a 304 costs the bundle server one small request).
DEFAULT_FILE_POLL_SECONDS = 2.0
DEFAULT_BUNDLE_POLL_SECONDS = 10.0
MIN_POLL_SECONDS = 0.1


def is_policy_url(spec: str) -> bool:
    """True when a `--policy` value names a bundle (http:// or https://) rather than a file."""
    return spec[:8].lower().startswith(("http://", "https://"))  # a URL scheme has no case


def poll_seconds(poll: str | None) -> float | None:
    """`--policy-poll-seconds` as typed: None (not given), 0 (watching off) or a number of seconds
    of at least MIN_POLL_SECONDS; anything else raises InputError with one line."""
    if poll is None:
        return None
    try:
        seconds = float(poll)
    except ValueError:
        seconds = math.nan
    if seconds != 0 and not (math.isfinite(seconds) and seconds >= MIN_POLL_SECONDS):
        raise InputError(f"--policy-poll-seconds: expected 0 (off) or a number of seconds >= "
                         f"{MIN_POLL_SECONDS:g}, got {poll!r}")
    return seconds


def poll_interval(spec: str, seconds: float | None) -> float | None:
    """Seconds between polls of `--policy` (None: not watched): the flag's value, 0 turning
    watching off; else the default for a file or a bundle URL."""
    if seconds is None:
        return DEFAULT_BUNDLE_POLL_SECONDS if is_policy_url(spec) else DEFAULT_FILE_POLL_SECONDS
    return seconds or None


# -- keys and signatures ---------------------------------------------------------------------------

def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a file: PEM (SubjectPublicKeyInfo) or the 32 raw key bytes."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    data = read_bounded(path)  # FileReadError (an InputError) names the file and why
    try:
        key = (Ed25519PublicKey.from_public_bytes(data) if len(data) == 32
               else load_pem_public_key(data))
    except ValueError:
        key = None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(f"{path}: not an Ed25519 public key (expected PEM 'BEGIN PUBLIC KEY' or "
                         f"32 raw bytes)")
    return key


def _key(public_key: PublicKeyLike | None) -> Ed25519PublicKey | None:
    return public_key if public_key is None or not isinstance(public_key, str | Path) \
        else load_public_key(public_key)


def signature_bytes(data: bytes) -> bytes | None:
    """A detached signature file's 64 signature bytes: the raw bytes (exactly 64), or their base64
    text (ASCII white space around it ignored). None when it is neither."""
    if len(data) == 64:
        return data
    try:
        raw = base64.b64decode(data.strip(b" \t\r\n"), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 64 else None


def _verify(url: str, body: bytes, key: Ed25519PublicKey, timeout: float, timer: Timer) -> None:
    from cryptography.exceptions import InvalidSignature

    sig_url = url + SIGNATURE_SUFFIX
    try:
        fetched = _get(sig_url, None, timeout, timer)
    except BundleNotFound:
        raise BundleError(url, f"unsigned: {sig_url} answered HTTP 404, and a signature is "
                               f"required (a public key is configured)") from None
    except BundleError as exc:
        raise BundleError(url, f"signature: {exc}") from None
    signature = signature_bytes(fetched.body or b"")
    if signature is None:
        raise BundleError(url, f"signature {sig_url} is neither 64 raw bytes nor their base64")
    try:
        key.verify(signature, body)
    except InvalidSignature:
        raise BundleError(url, f"signature {sig_url} does not match the body for the configured "
                               f"public key (tampered, or signed with another key)") from None


# -- one HTTP exchange ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Fetched:
    body: bytes | None  # None: 304 Not Modified
    etag: str | None


def _get(url: str, etag: str | None, timeout: float, timer: Timer) -> _Fetched:
    """GET with an optional If-None-Match: each network wait, and the whole body (by `timer`),
    within `timeout` seconds. Every failure is a BundleError naming the URL; httpx2's exceptions
    never escape."""
    import httpx2

    from ..auth.fetch import describe
    from ..tls import client_context

    headers = {"Accept": "application/toml, text/plain;q=0.9, */*;q=0.1", "Cache-Control": "no-cache"}
    if etag is not None:
        headers["If-None-Match"] = etag
    try:
        if not httpx2.URL(url).host:
            raise BundleError(url, "not a usable URL: no host")
    except httpx2.InvalidURL as exc:
        raise BundleError(url, f"not a usable URL: {exc}") from None
    deadline = timer() + timeout
    try:
        with httpx2.Client(timeout=timeout, verify=client_context(), follow_redirects=False) as client, \
                client.stream("GET", url, headers=headers) as response:
            if response.status_code == 304 and etag is not None:
                return _Fetched(None, etag)
            if response.status_code != 200:
                error = BundleNotFound if response.status_code == 404 else BundleError
                raise error(url, f"answered HTTP {response.status_code}")
            body = _read_body(url, response, deadline, timeout, timer)
            return _Fetched(body, response.headers.get("etag"))
    except httpx2.RemoteProtocolError as exc:
        raise BundleError(url, f"body cut short or malformed: {describe(exc)}") from None
    except httpx2.TimeoutException:
        raise BundleError(url, f"no complete answer within {timeout:g} s") from None
    except httpx2.HTTPError as exc:
        raise BundleError(url, f"cannot fetch: {describe(exc)}") from None


def _read_body(url: str, response: httpx2.Response, deadline: float, timeout: float,
               timer: Timer) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_BUNDLE_BYTES:
            raise BundleError(url, f"larger than {MAX_BUNDLE_BYTES} bytes")
        if timer() > deadline:  # a server dripping bytes never resets the clock
            raise BundleError(url, f"no complete answer within {timeout:g} s")
    # A body shorter than its Content-Length, or a chunked body cut off, raises RemoteProtocolError
    # in httpx2's HTTP/1.1 parser. Only a close-delimited body (no length, no chunks) can be
    # cut short unseen: a signature catches that.
    return bytes(body)


def fetch_bundle(url: str, *, public_key: PublicKeyLike | None = None, etag: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, base_dir: Path | None = None,
                 timer: Timer = time.monotonic) -> Bundle | None:
    """Fetch, verify (when a key is given) and validate one bundle. None when the server answers
    304 to `etag`. Raises BundleError (fetch, signature) or PolicyError (the policy itself)."""
    fetched = _get(url, etag, timeout, timer)
    if fetched.body is None:
        return None
    key = _key(public_key)
    if key is not None:
        _verify(url, fetched.body, key, timeout, timer)
    return Bundle(parse_policy(fetched.body, url, base_dir), fetched.etag)


def load_policy_url(url: str, public_key: PublicKeyLike | None = None, *,
                    timeout: float = DEFAULT_TIMEOUT, base_dir: Path | None = None) -> PolicySource:
    """The first load of a bundle. Raises PolicyError (a BundleError names the URL and the problem in
    one line) when it cannot be fetched, is unsigned or badly signed while a key is given, or is
    invalid. Relative paths in the policy resolve against `base_dir` (default: the working folder)."""
    bundle = fetch_bundle(url, public_key=public_key, timeout=timeout, base_dir=base_dir)
    assert bundle is not None  # no etag was sent, so no 304
    return bundle.source


def load_policy_source(spec: str, public_key: PublicKeyLike | None = None, *,
                       timeout: float = DEFAULT_TIMEOUT) -> PolicySource:
    """`--policy` as given: a bundle URL, or a file (a public key applies to a URL only)."""
    if is_policy_url(spec):
        return load_policy_url(spec, public_key, timeout=timeout)
    if public_key is not None:
        raise InputError(f"{spec}: a policy public key applies to a policy URL (http:// or "
                         f"https://) only")
    return load_policy(spec)


# -- polling ---------------------------------------------------------------------------------------
class BundleReloader(PolicyReloader):
    """Keeps a Guard on the current bundle at `url`; the interface of PolicyReloader (reload(),
    start(), stop(), last_error, revision, add_listener, on_change).

    Only the ETag of the bundle in force is sent as If-None-Match: after a failed attempt the next
    poll fetches the body (and signature) again, so a signature published a moment after its body
    is picked up at the next poll. A body whose revision is the one in force is not recompiled.
    """

    def __init__(self, guard: Guard, url: str, *, interval: float = 10.0,
                 public_key: PublicKeyLike | None = None, timeout: float = DEFAULT_TIMEOUT,
                 on_change: OnChange | None = None, base_dir: Path | None = None,
                 timer: Timer = time.monotonic) -> None:
        super().__init__(guard, url, interval=interval, on_change=on_change)
        self.url = url
        self.public_key = _key(public_key)
        self.timeout = timeout
        self.base_dir = base_dir
        self._timer = timer  # each exchange's deadline
        self.etag: str | None = None  # of the bundle in force, once one was fetched here

    def reload(self, *, force: bool = False, settle: float = 0.0) -> PolicyChange | None:
        """Fetch once; compile and swap when the bundle changed (or `force`). Returns the change, or
        None when nothing was swapped (unchanged, or refused: see last_error). `settle` is the file
        reloader's guard against torn files; a bundle is whole when its body matches its length
        (and its signature), so it has no use here."""
        change = self._swap_in(force)
        if change is not None:
            self._notify(change)
        return change

    def _swap_in(self, force: bool) -> PolicyChange | None:
        """`reload()` without the callbacks: safe on a worker thread."""
        with self._lock:
            old = self.guard.revision
            try:
                bundle = fetch_bundle(self.url, public_key=self.public_key, timeout=self.timeout,
                                      etag=None if force else self.etag, base_dir=self.base_dir,
                                      timer=self._timer)
                if bundle is None or (not force and bundle.source.revision == old):
                    self.last_error = None  # the server serves what is in force
                    self.etag = self.etag if bundle is None else bundle.etag
                    return None
                self._apply(bundle.source)
            except PreconditionsError as exc:
                self._failed(str(exc), str(exc))
                return None
            except Exception as exc:  # a resolver's constructor: still never lose the old snapshot
                why = f"{self.url}: {type(exc).__name__}: {exc}"
                self._failed(why, why)
                return None
            self.etag = bundle.etag
            self.last_error = None
            self._tried = bundle.source.revision
            change = PolicyChange(self.url, old, self.guard.revision)
        log.info("policy %s reloaded: revision %s -> %s", self.url, old, change.new_revision)
        return change

    async def _poll_task(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            # The exchange and the compile run on a worker thread, so the event loop never waits
            # on them; callbacks run here, on the loop, as the file reloader's do.
            change = await asyncio.to_thread(self._swap_in, False)
            if change is not None:
                self._notify(change)


def policy_reloader(guard: Guard, spec: str, *, interval: float,
                    public_key: PublicKeyLike | None = None,
                    on_change: OnChange | None = None) -> PolicyReloader:
    """The reloader for `--policy` as given: a BundleReloader for a URL, else a file reloader."""
    if is_policy_url(spec):
        return BundleReloader(guard, spec, interval=interval, public_key=public_key,
                              on_change=on_change)
    return PolicyReloader(guard, spec, interval=interval, on_change=on_change)


