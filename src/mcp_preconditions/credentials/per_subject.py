"""`kind = "per-subject"`: a secret per verified caller, from a JSON file
`{"<issuer> <subject>": "Bearer ..."}`, read bounded (files.py) and checked whole: a bad file is one
error naming the entry, never a partly loaded table. The values never appear in a message.

After a server refuses a caller's secret the file is read again (an operator may have rotated it);
the same secret again is no credential.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Mapping

from ..errors import FileReadError, InputError, NoCredentialError
from ..files import read_bounded
from ..principal import Identity, Principal
from .caller import caller_of, known_caller
from .credential import Credential
from .settings import PER_SUBJECT, PerSubjectSettings

log = logging.getLogger("mcp_preconditions.credentials")

_VALUE = re.compile(r"[\x20-\x7e\t]+")  # a header value: visible ASCII, space and tab; no CR, LF, NUL


def load_secrets(path: str) -> dict[str, str]:
    """The file's table; InputError naming the file and the entry (never its value) otherwise."""
    try:
        data = json.loads(read_bounded(path).decode("utf-8"))
    except FileReadError:
        raise
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f'{path}: expected an object {{"<issuer> <subject>": "<header value>"}}, '
                         f"got {type(data).__name__}")
    for name, value in data.items():
        if not name.partition(" ")[2]:  # the issuer is up to the first space ("" for none)
            raise InputError(f'{path}: {json.dumps(name)}: a key is "<issuer> <subject>"')
        if not isinstance(value, str) or not value or not _VALUE.fullmatch(value) or \
                value != value.strip():
            raise InputError(f"{path}: {json.dumps(name)}: the value must be a non-empty header value "
                             "(visible ASCII, no line break, no leading or trailing space)")
    return data


class SubjectSecrets:
    """One server's per-subject secrets, read at start and again after a refusal."""

    kind = PER_SUBJECT

    def __init__(self, server: str, settings: PerSubjectSettings,
                 secrets: Mapping[str, str] | None = None) -> None:
        self.server = server
        self.settings = settings
        self._secrets = dict(secrets) if secrets is not None else load_secrets(settings.secrets)
        self._stamp = _stamp(settings.secrets)
        self._lock = threading.Lock()

    async def obtain(self, principal: Principal | None, token: str | None) -> tuple[Credential, bool]:
        known_caller(principal)  # NoCredentialError: unverified, or no subject (never a client_id)
        credential = self._secret(principal)
        if credential is None:
            raise NoCredentialError(f"no secret for this caller on server '{self.server}'")
        return credential, True

    def cached(self, identity: Identity, token: str | None) -> Credential | None:
        """The caller's secret, at once; None when there is none (`obtain` says why)."""
        return self._secret(identity.principal)

    def _secret(self, principal: Principal | None) -> Credential | None:
        caller = caller_of(principal)
        value = self._secrets.get(caller.key) if caller is not None else None
        return Credential(self.settings.header, value, self.kind) if value is not None else None

    async def renew(self, principal: Principal | None, token: str | None, stale: Credential,
                    challenge: str | None = None) -> tuple[Credential, bool]:
        """After the server refused `stale`: read the file again if it changed; the same secret
        again is none."""
        self.reload()
        credential, _ = await self.obtain(principal, token)
        if credential.same(stale):
            raise NoCredentialError(f"server '{self.server}' refused this caller's secret")
        return credential, True

    def reload(self) -> None:
        """Read the file again when it changed; a file that became unreadable or bad keeps the
        table in force (logged)."""
        stamp = _stamp(self.settings.secrets)
        if stamp == self._stamp:
            return
        try:
            secrets = load_secrets(self.settings.secrets)
        except InputError as exc:
            log.warning("credential for server %s: the secrets file was not reloaded: %s",
                        self.server, exc)
            return
        with self._lock:
            self._secrets, self._stamp = secrets, stamp


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino
