"""The Kubernetes manifests of deploy/kubernetes/, checked offline: every built-in object against the
Kubernetes schemas (PyPI kubernetes-validate, strict), the custom resources against a JSON Schema of
the fields they use, the PrometheusRule equal to examples/prometheus/alerts.yml and passing
`promtool check rules`, the policy and gateway.toml of the ConfigMap valid with exactly the
environment the Deployment gives, and the objects wired to one another.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from mcp_preconditions.cli import main
from tests.fixtures.prometheus import binary

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
ALERTS = ROOT / "examples" / "prometheus" / "alerts.yml"
VERSIONS = ("1.30", kubernetes_validate.latest_version())  # the oldest documented, the newest known
NAME = {"app.kubernetes.io/name": "mcp-preconditions"}


def _strict(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "required": required or []}


_STRING, _LABELS = {"type": "string", "minLength": 1}, {"type": "object",
                                                         "additionalProperties": {"type": "string"}}
_METADATA = _strict({"name": _STRING, "labels": _LABELS}, ["name"])
# The fields of the Prometheus Operator's monitoring.coreos.com/v1 CRDs these manifests use, with
# their types from the CRDs; any other field is refused, as kubernetes-validate --strict refuses one.
CUSTOM = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _strict({
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": _METADATA,
        "spec": _strict({
            "selector": _strict({"matchLabels": _LABELS}, ["matchLabels"]),
            "endpoints": {"type": "array", "minItems": 1, "items": _strict({
                "port": _STRING, "path": _STRING,
                "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"}}, ["port"])},
        }, ["selector", "endpoints"]),
    }, ["apiVersion", "kind", "metadata", "spec"]),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _strict({
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
        "metadata": _METADATA,
        "spec": _strict({"groups": {"type": "array", "minItems": 1, "items": _strict({
            "name": _STRING,
            "rules": {"type": "array", "minItems": 1, "items": _strict({
                "alert": _STRING, "expr": _STRING, "for": {"type": "string"},
                "labels": _LABELS, "annotations": _LABELS}, ["alert", "expr"])},
        }, ["name", "rules"])}}, ["groups"]),
    }, ["apiVersion", "kind", "metadata", "spec"]),
}


def documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document is not None:
                yield path.name, document


def find(kind: str, name: str = "mcp-preconditions") -> dict[str, Any]:
    found = [d for _, d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def validate(document: dict[str, Any], version: str) -> None:
    """kubernetes-validate --strict for a built-in kind, the schema above for a custom one."""
    custom = CUSTOM.get((document["apiVersion"], document["kind"]))
    if custom is not None:
        jsonschema.validate(document, custom)
    else:
        kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_passes_the_kubernetes_schemas_strictly(version: str) -> None:
    kinds = []
    for name, document in documents():
        try:
            validate(document, version)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
            pytest.fail(f"{name}: {document['kind']}/{document['metadata']['name']}: {exc.message} "
                        f"at {list(exc.path)}")
        kinds.append(document["kind"])
    assert sorted(kinds) == ["ConfigMap", "Deployment", "Deployment", "HorizontalPodAutoscaler",
                             "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
                             "ServiceAccount", "ServiceMonitor"]


def test_an_unknown_field_is_refused_in_a_built_in_and_in_a_custom_object() -> None:
    """The checks are strict: a typo is an error, not a field Kubernetes drops silently."""
    deployment = find("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/x"
    with pytest.raises(kubernetes_validate.ValidationError) as built_in:
        validate(deployment, VERSIONS[-1])
    assert built_in.value.message == "Additional properties are not allowed ('paht' was unexpected)"
    monitor = find("ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError) as custom:
        validate(monitor, VERSIONS[-1])
    assert custom.value.message == "Additional properties are not allowed ('intervall' was unexpected)"
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):  # why CUSTOM exists
        kubernetes_validate.validate(find("ServiceMonitor"), VERSIONS[-1], strict=True)


def test_the_prometheus_rule_is_the_shipped_alerts_file_and_promtool_checks_it(tmp_path: Path) -> None:
    text = (MANIFESTS / "prometheusrule.yaml").read_text(encoding="utf-8")
    alerts = ALERTS.read_text(encoding="utf-8")
    ours = text[text.index("spec:\n") + len("spec:\n"):]
    theirs = textwrap.indent(alerts[alerts.index("groups:"):], "  ")
    assert ours == theirs, "".join(difflib.unified_diff(
        theirs.splitlines(True), ours.splitlines(True), "alerts.yml, indented", "prometheusrule.yaml"))
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(find("PrometheusRule")["spec"]), encoding="utf-8")
    done = subprocess.run([binary("promtool"), "check", "rules", str(rules)], capture_output=True,
                          text=True, timeout=10)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def gateway_spec() -> dict[str, Any]:
    """The gateway's container in the Deployment (its args, env, probes)."""
    containers: list[dict[str, Any]] = find("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


KEY = "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="  # 32 bytes, base64: a placeholder key
CHECKED_AT_START = {"MCP_PRECONDITIONS_REPLICA_ID", "MCP_PRECONDITIONS_PAGES_KEY"}  # not by a validator


def _given() -> dict[str, str]:
    """The Deployment's variables, with placeholders of the right form for the Secrets' values."""
    values = {"REDIS_URL": "redis://127.0.0.1:6379/0", "GW_TOKEN_KEY": KEY,
              "MCP_PRECONDITIONS_PAGES_KEY": KEY}
    return {v["name"]: values.get(v["name"], "placeholder") for v in gateway_spec()["env"]}


def test_the_config_map_validates_with_exactly_the_environment_the_deployment_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """gateway.toml and policy.toml, as the pod sees them: valid with the variables the Deployment
    sets (placeholders for the Secrets' values), and the variables they name are all set by it."""
    data = find("ConfigMap")["data"]
    assert set(data) == {"gateway.toml", "policy.toml"}
    for name, content in data.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    given = _given()
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    assert main(["policy", "validate", str(tmp_path / "policy.toml")]) == 0
    assert main(["config", "validate", str(tmp_path / "gateway.toml")]) == 0
    assert "2 server(s): crm, tickets" in capsys.readouterr().out
    named = set(re.findall(r'"env:(\w+)"|url_env = "(\w+)"', "\n".join(data.values())))
    assert {a or b for a, b in named} | CHECKED_AT_START == set(given)  # none unused, none missing
    for name, value in given.items():  # each one is needed: without it, a file is refused
        if name in CHECKED_AT_START:  # (the image test starts the gateway without the pages key)
            continue
        monkeypatch.delenv(name)
        assert (main(["policy", "validate", str(tmp_path / "policy.toml")]) == 2
                or main(["config", "validate", str(tmp_path / "gateway.toml")]) == 2)
        assert "environment variable" in (err := capsys.readouterr().err) and name in err, err
        monkeypatch.setenv(name, value)


def test_secrets_come_by_reference_only() -> None:
    env = {v["name"]: v["valueFrom"] for v in gateway_spec()["env"]}
    assert all("value" not in v for v in gateway_spec()["env"])  # nothing inline
    assert env["MCP_PRECONDITIONS_REPLICA_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    secrets = {name: (ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"])
               for name, ref in env.items() if "secretKeyRef" in ref}
    upstream, oidc, keys = "mcp-preconditions-upstream", "mcp-preconditions-oidc", "mcp-preconditions-keys"
    assert secrets == {"REDIS_URL": ("mcp-preconditions-redis", "url"),
                       "CRM_AUTHORIZATION": (upstream, "crm-authorization"),
                       "TICKETS_AUTHORIZATION": (upstream, "tickets-authorization"),
                       "TICKETS_CLIENT_ID": (upstream, "tickets-client-id"),
                       "TICKETS_CLIENT_SECRET": (upstream, "tickets-client-secret"),
                       "GW_CLIENT_ID": (oidc, "client-id"), "GW_CLIENT_SECRET": (oidc, "client-secret"),
                       "GW_TOKEN_KEY": (keys, "token-key"),
                       "MCP_PRECONDITIONS_PAGES_KEY": (keys, "pages-key")}
    redis = find("Deployment", "mcp-preconditions-redis")["spec"]["template"]["spec"]["containers"][0]
    assert redis["env"] == [{"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {
        "name": "mcp-preconditions-redis", "key": "password"}}}]
    assert not [d for _, d in documents() if d["kind"] == "Secret"]  # created by kubectl (docs/deploy.md)
    header = (MANIFESTS / "gateway.yaml").read_text(encoding="utf-8").split("apiVersion:", 1)[0]
    for name, key in secrets.values():  # the file's header names each Secret and key to create
        assert name in header and f"`{key}`" in header, (name, key)


def test_credentials_approvals_and_sign_ins_are_shared_by_the_replicas_in_redis() -> None:
    """What a replica must not keep to itself (docs/deploy.md, session affinity): the connected
    accounts, the approval requests and, with them, the sign-ins in progress live in Redis; the
    links and redirects are made with the public https address."""
    data = find("ConfigMap")["data"]
    policy, gateway = tomllib.loads(data["policy.toml"]), tomllib.loads(data["gateway.toml"])
    assert policy["state"]["redis"] == {"url_env": "REDIS_URL"}
    assert set(policy["auth"]["sign_in"]) == {"client_id", "client_secret"}
    assert [a["store"] for a in policy["approvals"].values()] == ["redis"]
    kinds = {key: s["credentials"]["kind"] for key, s in gateway["servers"].items()}
    assert kinds == {"crm": "token-exchange", "tickets": "oauth"}
    assert gateway["servers"]["tickets"]["credentials"]["store"] == "redis"
    public = [a for a in gateway_spec()["args"] if a.startswith("--public-url=")]
    assert public == ["--public-url=https://mcp.example.com"]
    redis = find("Deployment", "mcp-preconditions-redis")["spec"]["template"]["spec"]["containers"][0]
    args = redis["args"]
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"  # full: writes refused, no loss
    assert args[args.index("--maxmemory") + 1] == "192mb"
    assert redis["resources"]["limits"]["memory"] == "256Mi"  # above it: Redis's own overhead


def test_probes_ports_and_selectors_fit_together() -> None:
    container, service = gateway_spec(), find("Service")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080, "metrics": 9464}
    assert "listen = \"http://0.0.0.0:8080\"" in find("ConfigMap")["data"]["gateway.toml"]
    assert "--metrics-listen=http://0.0.0.0:9464" in container["args"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    pod = find("Deployment")["spec"]["template"]
    assert pod["metadata"]["labels"] == NAME == service["spec"]["selector"]
    assert find("Deployment")["spec"]["selector"]["matchLabels"] == NAME
    assert find("PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == NAME
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"http": "http",
                                                                             "metrics": "metrics"}
    monitor = find("ServiceMonitor")["spec"]
    assert monitor["selector"]["matchLabels"] == service["metadata"]["labels"]
    assert monitor["endpoints"][0]["port"] == "metrics" and monitor["endpoints"][0]["path"] == "/metrics"
    target = find("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "mcp-preconditions")
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 10001  # the image's user
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
