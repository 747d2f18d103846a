"""The gateway's deployment file (SPEC §12): which servers it guards and how to reach each, as a
`gateway.toml` or a desktop client's own `{"mcpServers": {...}}` JSON. Validated as a whole like a
policy (every problem by key path, unknown keys and loose types refused), never fetched from a URL.

    policy = "policy.toml"            # relative to this file, or an http(s) bundle URL
    listen = "http://127.0.0.1:8080"  # or "stdio"
    [servers.fs]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]
    env = { API_KEY = "env:FS_API_KEY" }   # "env:VAR": the gateway's own variable, passed through
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..addresses import http_address
from ..credentials.settings import CredentialSettings
from ..errors import FileReadError, PolicyError
from ..files import read_bounded
from ..policy.load import key_path, problems_of
from .config_credentials import CredentialsEntry, credential_settings, located
from .config_values import HEADER_NAME, Strict, env_value, http_url
from .upstream.client import field_problem

# A server's key becomes its default prefix (`KEY__`), so it must make a valid tool name.
KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
PREFIX_PATTERN = r"^[A-Za-z0-9_.-]{0,64}$"
WHAT = "invalid gateway config"


def listen_address(value: str) -> tuple[str, int] | None:
    """Where to listen: None for "stdio", else (host, port); ValueError saying what is wrong."""
    if value == "stdio":
        return None
    return http_address(value, "'stdio' or 'http://HOST:PORT'")


class ServerEntry(Strict):
    """One server: a stdio `command` the gateway starts, or a streamable-HTTP `url`."""

    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict,
                                description='values are literal, or "env:VAR" (the gateway\'s $VAR)')
    url: str | None = Field(default=None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict,
                                    description='values are literal, or "env:VAR"')
    prefix: str | None = Field(default=None, json_schema_extra={"pattern": PREFIX_PATTERN},
                               description='shown before each tool and prompt name; default "KEY__"')
    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = Field(
        default=None, description="optional, as desktop clients write it; must agree with command/url")
    credentials: CredentialsEntry | None = Field(
        default=None, description="how each caller's own credential is obtained (docs/credentials.md)")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return http_url(value)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(PREFIX_PATTERN, value):
            raise ValueError(f"not a usable prefix: {value!r}: use letters, digits, '_', '.' or '-' "
                             "(at most 64; \"\" keeps the server's names bare)")
        return value

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not HEADER_NAME.fullmatch(name):
                raise ValueError(f"not an HTTP header name: {name!r}")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ServerEntry:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of 'command' (a stdio server) or 'url' (streamable HTTP)")
        if self.command is not None and self.headers:
            raise ValueError("'headers' is for a 'url' server")
        if self.command is not None and self.credentials is not None:
            raise located("credentials", "for a 'url' server only: a stdio server is one process "
                                          "the gateway starts, not reached by each caller as themselves")
        if self.url is not None and (self.args or self.env):
            raise ValueError("'args' and 'env' are for a 'command' server")
        if self.type is not None and (self.type == "stdio") != (self.command is not None):
            raise ValueError(f"type {self.type!r} does not match "
                             f"{'command' if self.command is not None else 'url'}")
        return self


def _server_key(key: str) -> str:
    """A key checked with the other problems (a dict validator would run only if all else is valid)."""
    if not re.fullmatch(KEY_PATTERN, key):
        raise ValueError("not a usable server key: use letters, digits, '_', '.' or '-' (at most "
                         "64, starting with a letter or digit): it makes the default prefix KEY__")
    return key


ServerKey = Annotated[str, AfterValidator(_server_key)]


class GatewayFile(Strict):
    """A whole `gateway.toml`."""

    policy: str = Field(min_length=1, description="a path relative to this file, or an http(s) URL")
    listen: str = Field(default="stdio", min_length=1, description='"stdio" or "http://HOST:PORT"')
    claims: str | None = Field(default=None, min_length=1,
                               description="stdio only: JSON claims of the local caller")
    servers: dict[ServerKey, ServerEntry] = Field(
        min_length=1, json_schema_extra={"propertyNames": {"pattern": KEY_PATTERN}})

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        listen_address(value)
        return value

    @field_validator("claims")
    @classmethod
    def _claims_on_stdio(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("listen", "stdio") != "stdio":
            raise ValueError("for listen = \"stdio\" only; over HTTP each call's bearer token "
                             "decides who is calling")
        return value


class DesktopFile(BaseModel):
    """A desktop client's config: only `mcpServers` is ours; the client's other settings are its
    own business and left alone (rejecting them would make the file unusable here)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)
    mcpServers: dict[ServerKey, ServerEntry] = Field(
        min_length=1, json_schema_extra={"propertyNames": {"pattern": KEY_PATTERN}})


# -- what the gateway runs from ------------------------------------------------------------------
@dataclass(frozen=True)
class ServerSpec:
    """One server, ready to start: its key, the prefix of its names, and how to reach it
    (`command`/`args`/`env` overrides, or `url`/`headers`, and its per-caller `credentials`),
    `env:VAR` references resolved."""

    key: str
    prefix: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # How each caller's own credential for this server is obtained (SPEC §14); None: the static
    # `headers` only, for every caller.
    credentials: CredentialSettings | None = None


@dataclass(frozen=True)
class GatewayConfig:
    """What `gateway --config` or `--servers` asks for (`policy`/`listen`/`claims` only from a
    gateway.toml; `--servers` takes them from the command line)."""

    servers: tuple[ServerSpec, ...]
    policy: str | None = None
    listen: str | None = None
    claims: str | None = None
    source: str = ""


def load_config(path: str) -> GatewayConfig:
    """Read a `gateway.toml`; PolicyError naming the file and every problem by key path."""
    raw = _parse(path, "toml")
    entry = _validated(GatewayFile, raw, path)
    assert isinstance(entry, GatewayFile)
    base = Path(path).parent
    policy = entry.policy if re.match(r"https?://", entry.policy) else str(base / entry.policy)
    claims = None if entry.claims is None else str(base / entry.claims)
    return GatewayConfig(_specs(entry.servers, path, "servers"), policy, entry.listen, claims, path)


def load_servers(path: str) -> GatewayConfig:
    """Read a desktop client's `{"mcpServers": {...}}` JSON as the gateway's servers."""
    raw = _parse(path, "json")
    entry = _validated(DesktopFile, raw, path)
    assert isinstance(entry, DesktopFile)
    return GatewayConfig(_specs(entry.mcpServers, path, "mcpServers"), source=path)


def single_server(spec: ServerSpec) -> GatewayConfig:
    """The single-upstream command line (`-- COMMAND`, `--upstream-url`): one server, no prefix."""
    return GatewayConfig((spec,))


def config_schema(kind: Literal["toml", "json"] = "toml") -> dict[str, Any]:
    """The JSON Schema of a gateway.toml (or of the desktop JSON), for editors."""
    schema = (GatewayFile if kind == "toml" else DesktopFile).model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mcp-preconditions gateway config" + (" (desktop JSON)" if kind == "json" else "")
    return schema


def _parse(path: str, kind: str) -> Any:
    try:
        data = read_bounded(path)
    except FileReadError as exc:
        raise PolicyError(path, [f"(file): {exc.problem}"], WHAT) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(path, [f"(file): not UTF-8 ({exc.reason} at byte {exc.start})"], WHAT) from None
    try:
        return tomllib.loads(text) if kind == "toml" else json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(path, [f"(file): not valid TOML: {exc}"], WHAT) from None
    except json.JSONDecodeError as exc:
        raise PolicyError(path, [f"(file): not valid JSON: {exc.msg} at line {exc.lineno} "
                                 f"column {exc.colno}"], WHAT) from None
    except RecursionError:
        raise PolicyError(path, ["(file): nested too deeply"], WHAT) from None


def _validated(model: type[BaseModel], raw: Any, path: str) -> BaseModel:
    if not isinstance(raw, dict):
        raise PolicyError(path, [f"(top level): expected an object, got {type(raw).__name__}"], WHAT)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(path, problems_of(exc, raw), WHAT) from None


def _specs(servers: Mapping[str, ServerEntry], path: str, top: str) -> tuple[ServerSpec, ...]:
    problems: list[str] = []
    specs = []
    for key, entry in servers.items():
        env = _resolved(entry.env, (top, key, "env"), problems)
        headers = _resolved(entry.headers, (top, key, "headers"), problems)
        for name, value in headers.items():  # literal, or from the environment: never written
            problem = field_problem(name, value)
            if problem is not None:
                problems.append(f"{key_path((top, key, 'headers', name))}: {problem}")
        prefix = entry.prefix if entry.prefix is not None else f"{key}__"
        if entry.command is not None and shutil.which(entry.command) is None:
            problems.append(f"{key_path((top, key, 'command'))}: cannot start the server: command "
                            f"not found: {entry.command}")
        if any(_same_file(arg, path) for arg in entry.args):
            problems.append(f"{key_path((top, key, 'args'))}: names this file: a gateway started on "
                            "it would start itself again and again (give --servers a copy of the "
                            "servers, not the config that launches the gateway)")
        credentials = None if entry.credentials is None else credential_settings(
            entry.credentials, (top, key, "credentials"), Path(path).parent, problems, entry.url)
        specs.append(ServerSpec(key, prefix, entry.command, tuple(entry.args), env, entry.url, headers,
                                credentials))
    if problems:
        raise PolicyError(path, problems, WHAT)
    return tuple(specs)


def _same_file(arg: str, path: str) -> bool:
    """Whether a server's argument names the deployment file being read (a desktop config whose
    one entry launches the gateway on that same config)."""
    try:
        return arg.endswith(Path(path).name) and Path(arg).resolve() == Path(path).resolve()
    except (OSError, ValueError):
        return False


def _resolved(values: Mapping[str, str], where: tuple[str, ...], problems: list[str]
              ) -> dict[str, str]:
    """`env:VAR` values read from the gateway's environment (each problem by key path)."""
    out: dict[str, str] = {}
    for name, value in values.items():
        found = env_value(value, (*where, name), problems)
        if found is not None:
            out[name] = found
    return out
