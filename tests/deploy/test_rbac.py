"""The RBAC of infra/k8s agrees with the `kubernetes` toolsets (diagnostics/toolsets/kubernetes).

The requests are not a list copied from the code: every tool and action the toolsets declare is run,
with arguments generated from its own parameter schema, against a stand-in API server that records what
it is sent; each request is then authorized the way the API server would (its verb, group, resource,
subresource and namespace against the rules bound to the ServiceAccount whose token the toolset's
kubeconfig uses). A new write action, or a new API call in an old one, fails here until the Executor's
Role allows it; a Probe rule that writes fails here too.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from diagnostics.toolsets.base import validation_error
from diagnostics.toolsets.kubernetes import KubernetesConfig, KubernetesReadToolset, KubernetesWriteToolset
from tests.deploy import kube_api
from tests.deploy.kube_api import Request, request_info
from tests.deploy.manifests import Manifest, config, containers, deployed, of_kind, one, pod_spec

READ_VERBS = {"get", "list", "watch"}
_STRING_CANDIDATES = [kube_api.NAME, "1", "LOG_LEVEL", "error"]


# --- arguments from a tool's JSON schema --------------------------------------------------------


def _value(schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "string":
        pattern = schema.get("pattern")
        return next(s for s in _STRING_CANDIDATES if pattern is None or re.search(pattern, s))
    if kind == "integer":
        return max(int(schema.get("minimum", 1)), 1)
    if kind == "array":
        return [_value(schema["items"])]
    if kind == "object":
        if schema.get("properties"):
            return {name: _value(sub) for name, sub in schema["properties"].items()}
        key = _value({"type": "string", **schema.get("propertyNames", {})})
        return {key: _value(schema.get("additionalProperties") or {"type": "string"})}
    raise AssertionError(f"no value for schema {schema}")


def arguments(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the schema's enum parameters, with every other parameter given (all of them,
    optional ones too, so every code path that reads one runs), and the same with required ones only."""
    props: dict[str, Any] = schema.get("properties", {})
    enums = {name: sub["enum"] for name, sub in props.items() if "enum" in sub}
    base = {name: _value(sub) for name, sub in props.items() if name not in enums}
    required = set(schema.get("required", []))
    out = []
    for combo in itertools.product(*enums.values()):
        full = {**base, **dict(zip(enums, combo, strict=True))}
        out += [full, {k: v for k, v in full.items() if k in required}]
    return out


# --- RBAC: who may do what -----------------------------------------------------------------------


def _rule_allows(rule: dict[str, Any], req: Request) -> bool:
    return (
        (req.group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
        and (req.resource in rule.get("resources", []) or "*" in rule.get("resources", []))
        and (req.verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
        and (not rule.get("resourceNames") or req.name in rule["resourceNames"])
    )


def grants(docs: list[Manifest], namespace: str, account: str) -> list[tuple[str | None, dict[str, Any]]]:
    """(namespace the rule applies in, or None for the whole cluster; the rule) bound to a ServiceAccount."""
    out: list[tuple[str | None, dict[str, Any]]] = []
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    for binding in of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding"):
        if subject not in binding.get("subjects", []):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = (
            one(docs, "ClusterRole", ref["name"])
            if ref["kind"] == "ClusterRole"
            else next(
                r
                for r in of_kind(docs, "Role")
                if r["metadata"]["name"] == ref["name"] and r["metadata"]["namespace"] == scope
            )
        )
        out += [(scope, rule) for rule in role.get("rules", [])]
    return out


def allowed(granted: list[tuple[str | None, dict[str, Any]]], req: Request) -> bool:
    return any(
        (scope is None or (req.namespace == scope)) and _rule_allows(rule, req) for scope, rule in granted
    )


def service_account_of(docs: list[Manifest], kubeconfig_path: str) -> tuple[str, str]:
    """The ServiceAccount whose token a kubeconfig path uses, followed through the pod that mounts it: the
    kubeconfig's ConfigMap key, its tokenFile, the Secret mounted there and that Secret's account."""
    path = PurePosixPath(kubeconfig_path)
    for workload in of_kind(docs, "Deployment"):
        spec = pod_spec(workload)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in containers(workload):
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
            volume = mounts.get(str(path.parent))
            if not volume or "configMap" not in volume:
                continue
            cm = one(docs, "ConfigMap", volume["configMap"]["name"])
            kubeconfig = yaml.safe_load(cm["data"][path.name])
            (user,) = kubeconfig["users"]
            token = PurePosixPath(user["user"]["tokenFile"])
            secret_volume = mounts[str(token.parent)]
            secret = one(docs, "Secret", secret_volume["secret"]["secretName"])
            assert secret["type"] == "kubernetes.io/service-account-token"
            account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
            return secret["metadata"]["namespace"], account
    raise AssertionError(f"no pod mounts a kubeconfig at {kubeconfig_path}")


# --- running the toolsets against the recording API server ---------------------------------------


@pytest.fixture(scope="module")
def docs() -> list[Manifest]:
    return deployed()


@pytest.fixture(scope="module")
def write_namespaces(docs: list[Manifest]) -> list[str]:
    names = [n.strip() for n in config(docs)["SKILLGATE_K8S_WRITE_NAMESPACES"].split(",") if n.strip()]
    assert names, "the Executor must be limited to named namespaces"
    return names


@pytest.fixture(scope="module")
def read_requests(tmp_path_factory: pytest.TempPathFactory) -> list[Request]:
    with kube_api.recording_api() as server:
        path = kube_api.kubeconfig(tmp_path_factory.mktemp("kube") / "read", server, "probe-token")
        toolset = KubernetesReadToolset(KubernetesConfig(read_kubeconfig=path))
        for spec in toolset.tools():
            for args in arguments(spec.parameters):
                assert validation_error(spec.parameters, args) is None, (spec.name, args)
                result = toolset.call(spec.name, args)
                assert result.ok, (spec.name, args, result.output)
    assert server.tokens == {"Bearer probe-token"}
    return server.requests


@pytest.fixture(scope="module")
def write_requests(tmp_path_factory: pytest.TempPathFactory, write_namespaces: list[str]) -> list[Request]:
    with kube_api.recording_api() as server:
        path = kube_api.kubeconfig(tmp_path_factory.mktemp("kube") / "write", server, "executor-token")
        toolset = KubernetesWriteToolset(
            KubernetesConfig(
                write_kubeconfig=path, write_namespaces=tuple(write_namespaces), health_timeout_s=1
            )
        )
        for spec in toolset.actions():
            for number, args in enumerate(arguments(spec.parameters)):
                args["namespace"] = write_namespaces[0]
                assert validation_error(spec.parameters, args) is None, (spec.name, args)
                result = toolset.run(spec.name, args)
                if number % 2 == 0:  # every parameter given: the action must go through
                    assert result.ok, (spec.name, args, result.detail)
        health = toolset.health(f"{write_namespaces[0]}/{kube_api.NAME}")
        assert health.healthy, health.detail
    assert server.tokens == {"Bearer executor-token"}
    return server.requests


def test_request_info_reads_paths_as_the_api_server_does() -> None:
    scale = request_info("PATCH", "/apis/apps/v1/namespaces/apps/deployments/web/scale", {})
    assert scale == Request("patch", "apps", "deployments/scale", "apps", "web")
    assert request_info("GET", "/api/v1/namespaces/a/pods", {}) == Request("list", "", "pods", "a", "")
    assert request_info("GET", "/api/v1/pods", {"watch": ["true"]}).verb == "watch"
    assert request_info("GET", "/api/v1/namespaces/a", {}) == Request("get", "", "namespaces", "a", "a")
    assert request_info("GET", "/api/v1/nodes/n1", {}) == Request("get", "", "nodes", "", "n1")
    assert request_info("GET", "/api/v1/namespaces/a/pods/p/log", {}).resource == "pods/log"


def test_every_read_tool_request_is_allowed_for_the_probe(
    docs: list[Manifest], read_requests: list[Request]
) -> None:
    probe = grants(docs, *service_account_of(docs, config(docs)["SKILLGATE_K8S_READ_KUBECONFIG"]))
    assert read_requests
    denied = sorted({(r.verb, r.group, r.resource) for r in read_requests if not allowed(probe, r)})
    assert denied == []
    # the tools exercised what the toolset declares: every kind, and the logs
    assert {r.resource for r in read_requests} >= {"pods/log", "nodes", "deployments", "jobs", "events"}
    assert {r.resource for r in read_requests} >= {"cronjobs", "ingresses", "certificates"}
    assert "secrets" not in {r.resource for r in read_requests}  # off unless SKILLGATE_K8S_READ_SECRETS


def test_every_write_action_request_is_allowed_for_the_executor_in_its_namespaces(
    docs: list[Manifest], write_requests: list[Request], write_namespaces: list[str]
) -> None:
    executor = grants(docs, *service_account_of(docs, config(docs)["SKILLGATE_K8S_WRITE_KUBECONFIG"]))
    assert any(r.verb not in READ_VERBS for r in write_requests)
    denied = sorted({(r.verb, r.group, r.resource) for r in write_requests if not allowed(executor, r)})
    assert denied == []
    # the same requests anywhere else are refused: the Executor's rules hold only where it is bound
    elsewhere = [Request(r.verb, r.group, r.resource, "kube-system", r.name) for r in write_requests]
    assert not any(allowed(executor, r) for r in elsewhere)


def test_the_executor_is_granted_nothing_its_actions_do_not_send(
    docs: list[Manifest], write_requests: list[Request]
) -> None:
    executor = grants(docs, *service_account_of(docs, config(docs)["SKILLGATE_K8S_WRITE_KUBECONFIG"]))
    used = {(r.group, r.resource, r.verb) for r in write_requests}
    for _, rule in executor:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        granted = set(itertools.product(rule["apiGroups"], rule["resources"], rule["verbs"]))
        assert granted <= used, f"granted but never sent: {sorted(granted - used)}"


def test_the_probe_has_no_write_verb_no_wildcard_and_no_secrets(
    docs: list[Manifest], write_requests: list[Request]
) -> None:
    probe = grants(docs, *service_account_of(docs, config(docs)["SKILLGATE_K8S_READ_KUBECONFIG"]))
    assert probe
    for _, rule in probe:
        assert set(rule["verbs"]) <= READ_VERBS, rule
        assert "*" not in rule["resources"] + rule["apiGroups"], rule
        assert "secrets" not in rule["resources"], rule
    writes = [r for r in write_requests if r.verb not in READ_VERBS]
    assert writes and not any(allowed(probe, r) for r in writes)


def test_the_write_namespaces_setting_is_where_the_executor_is_bound(
    docs: list[Manifest], write_namespaces: list[str]
) -> None:
    account = service_account_of(docs, config(docs)["SKILLGATE_K8S_WRITE_KUBECONFIG"])
    scopes = {scope for scope, _ in grants(docs, *account)}
    assert None not in scopes, "the Executor must not be bound cluster-wide"
    assert scopes == set(write_namespaces)


def test_each_toolset_has_its_own_account_and_no_other_pod_holds_their_tokens(docs: list[Manifest]) -> None:
    read = service_account_of(docs, config(docs)["SKILLGATE_K8S_READ_KUBECONFIG"])
    write = service_account_of(docs, config(docs)["SKILLGATE_K8S_WRITE_KUBECONFIG"])
    assert read != write
    token_secrets = {
        s["metadata"]["name"]
        for s in of_kind(docs, "Secret")
        if s["type"] == "kubernetes.io/service-account-token"
    }
    holders = []
    for workload in of_kind(docs, "Deployment") + of_kind(docs, "Job"):
        spec = pod_spec(workload)
        assert spec.get("automountServiceAccountToken") is False, workload["metadata"]["name"]
        if {v.get("secret", {}).get("secretName") for v in spec.get("volumes", [])} & token_secrets:
            holders.append(workload["metadata"]["name"])
    consumer = {
        w["metadata"]["name"]
        for w in of_kind(docs, "Deployment")
        for c in containers(w)
        if config(docs)["SKILLGATE_DIAGNOSTICS_QUEUE"] in c.get("command", [])
    }
    assert holders == sorted(consumer), "only the worker that runs the diagnosis tasks holds the tokens"


def test_the_kubeconfigs_load_with_the_official_client(docs: list[Manifest], tmp_path: Path) -> None:
    from kubernetes import config as k8s_config

    cm = one(docs, "ConfigMap", "skillgate-kubeconfigs")
    for key, text in cm["data"].items():
        kubeconfig = yaml.safe_load(text)
        (user,) = kubeconfig["users"]
        token_file = tmp_path / f"{key}.token"
        token_file.write_text("t0ken")
        user["user"]["tokenFile"] = str(token_file)
        kubeconfig["clusters"][0]["cluster"].pop("certificate-authority")
        path = tmp_path / key
        path.write_text(yaml.safe_dump(kubeconfig))
        api = k8s_config.new_client_from_config(config_file=str(path), persist_config=False)
        try:
            assert api.configuration.host == "https://kubernetes.default.svc"
            assert api.configuration.api_key["BearerToken"] == "Bearer t0ken"
        finally:
            api.close()


def test_with_secrets_switched_on_the_documented_rule_is_all_the_probe_needs_more(
    docs: list[Manifest], tmp_path: Path
) -> None:
    """SKILLGATE_K8S_READ_SECRETS is off in the manifests; the README gives the rule to add with it. Every
    read tool run on the secret kind sends only what the Probe's rules plus that rule allow, and needs it."""
    readme = (Path(__file__).resolve().parents[2] / "infra/k8s/README.md").read_text()
    snippet = readme.split("then add this rule", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    (rule,) = yaml.safe_load(snippet)
    probe = grants(docs, *service_account_of(docs, config(docs)["SKILLGATE_K8S_READ_KUBECONFIG"]))
    assert config(docs).get("SKILLGATE_K8S_READ_SECRETS", "false") == "false"
    with kube_api.recording_api() as server:
        path = kube_api.kubeconfig(tmp_path / "read", server, "probe-token")
        toolset = KubernetesReadToolset(KubernetesConfig(read_kubeconfig=path, read_secrets=True))
        for spec in toolset.tools():
            for args in arguments(spec.parameters):
                if "secret" in args.values():
                    result = toolset.call(spec.name, args)
                    assert result.ok, (spec.name, args, result.output)
    denied = {(r.verb, r.group, r.resource) for r in server.requests if not allowed(probe, r)}
    assert denied == {("get", "", "secrets"), ("list", "", "secrets")}
    assert all(allowed([*probe, (None, rule)], r) for r in server.requests)
