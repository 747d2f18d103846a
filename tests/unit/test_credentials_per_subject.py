"""`kind = "per-subject"`: a secret per verified caller from a JSON file, read bounded and checked
whole (every bad file is one message naming the entry, never its value), looked up by issuer and
subject exactly, and read again after a server refuses a secret.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mcp_preconditions.credentials import PerSubjectSettings, SubjectSecrets, load_secrets
from mcp_preconditions.credentials.resolver import CredentialResolver
from mcp_preconditions.errors import InputError
from mcp_preconditions.principal import ANONYMOUS_IDENTITY
from tests.unit.credentials_doubles import ISSUER, caller

REQ = "credential:legacy"


def secrets_file(tmp_path: Path, content: object, name: str = "secrets.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def resolver(path: Path, header: str = "Authorization") -> CredentialResolver:
    return CredentialResolver({"legacy": SubjectSecrets("legacy", PerSubjectSettings(str(path), header))})


async def test_each_caller_gets_their_own_secret_exactly(tmp_path: Path) -> None:
    path = secrets_file(tmp_path, {f"{ISSUER} alice": "Bearer alice-secret",
                                   f"{ISSUER} bob": "Bearer bob-secret", " local": "Token l"})
    resolve = resolver(path, "X-Api-Key")
    alice = await resolve.obtain(REQ, caller("alice"), None)
    assert alice.credential is not None and alice.credential.headers() == {"X-Api-Key": "Bearer alice-secret"}
    assert (alice.result, alice.kind) == ("cached", "per-subject")
    assert (await resolve.obtain(REQ, caller("bob"), None)).credential.headers() == {  # type: ignore[union-attr]
        "X-Api-Key": "Bearer bob-secret"}
    local = await resolve.obtain(REQ, caller("local", issuer=""), None)  # claims without `iss`
    assert local.outcome.ok
    none = "no secret for this caller on server 'legacy'"
    for who, reason in ((caller("Alice"), none), (caller("alice", issuer=ISSUER + "/"), none),
                        (ANONYMOUS_IDENTITY, "the caller is not verified: a credential is kept per "
                                             "known caller")):
        obtained = await resolve.obtain(REQ, who, None)
        assert (obtained.result, obtained.outcome.reason) == ("refused", reason)
        assert "secret" not in repr(obtained.credential)


async def test_a_refused_secret_is_read_again_and_the_same_one_is_none(tmp_path: Path) -> None:
    path = secrets_file(tmp_path, {f"{ISSUER} alice": "Bearer old"})
    resolve = resolver(path)
    stale = (await resolve.obtain(REQ, caller(), None)).credential
    assert stale is not None
    refused = await resolve.renew(REQ, caller(), None, stale)
    assert (refused.result, refused.outcome.reason) == (
        "refused", "server 'legacy' refused this caller's secret")
    secrets_file(tmp_path, {f"{ISSUER} alice": "Bearer rotated"})
    os.utime(path, ns=(1, 1))  # a new stamp even within the file system's time granularity
    renewed = await resolve.renew(REQ, caller(), None, stale)
    assert renewed.credential is not None and renewed.credential.headers() == {
        "Authorization": "Bearer rotated"}


async def test_a_file_that_turned_bad_keeps_the_table_in_force(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    path = secrets_file(tmp_path, {f"{ISSUER} alice": "Bearer a"})
    resolve = resolver(path)
    stale = (await resolve.obtain(REQ, caller(), None)).credential
    assert stale is not None
    path.write_text("{", encoding="utf-8")
    os.utime(path, ns=(2, 2))
    assert (await resolve.renew(REQ, caller(), None, stale)).result == "refused"
    assert (await resolve.obtain(REQ, caller(), None)).outcome.ok
    assert "the secrets file was not reloaded" in caplog.text and "Bearer a" not in caplog.text


BAD_FILES = [
    ("[]", "expected an object {\"<issuer> <subject>\": \"<header value>\"}, got list"),
    ("{", "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    (json.dumps({"alice": "Bearer x"}), '"alice": a key is "<issuer> <subject>"'),
    (json.dumps({"iss ": "Bearer x"}), '"iss ": a key is "<issuer> <subject>"'),
    (json.dumps({"iss alice": 3}), '"iss alice": the value must be a non-empty header value (visible '
                                   "ASCII, no line break, no leading or trailing space)"),
    (json.dumps({"iss alice": "Bearer x\r\nX-Evil: 1"}), '"iss alice": the value must be a non-empty '
     "header value (visible ASCII, no line break, no leading or trailing space)"),
    (json.dumps({"iss alice": ""}), '"iss alice": the value must be a non-empty header value (visible '
                                    "ASCII, no line break, no leading or trailing space)"),
]


@pytest.mark.parametrize(("content", "problem"), BAD_FILES)
def test_a_bad_secrets_file_names_the_entry_never_the_value(tmp_path: Path, content: str, problem: str
                                                            ) -> None:
    path = secrets_file(tmp_path, content)
    with pytest.raises(InputError) as bad:
        load_secrets(str(path))
    assert str(bad.value) == f"{path}: {problem}"
    assert "Bearer x" not in str(bad.value)


def test_a_missing_or_huge_secrets_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="cannot read: No such file or directory"):
        load_secrets(str(tmp_path / "none.json"))
    monkeypatch.setenv("MCP_PRECONDITIONS_MAX_FILE_BYTES", "10")
    path = secrets_file(tmp_path, {"iss alice": "Bearer xxxxxxxxx"})
    with pytest.raises(InputError, match="larger than 10 bytes"):
        load_secrets(str(path))
