"""The kubernetes toolsets with the official client, against hand-written API responses in the shape a
kind cluster returns (tests/diagnostics/fixtures/kubernetes: the UIDs and timestamps are made up)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from diagnostics.toolsets.base import ReadToolset, WriteToolset
from diagnostics.toolsets.kubernetes import (
    KubernetesConfig,
    KubernetesReadToolset,
    KubernetesWriteToolset,
    ToolsetNotConfigured,
)
from tests.support.fixture_server import FixtureServer

NS = "shop"
CRASHING = "payment-worker-747ccfb9db-78qds"
OOM = "analytics-exporter-5f6d9c7b8d-x2kqp"
PENDING = "checkout-7d4b9c6f59-pnd42"


@pytest.fixture(scope="module")
def server() -> Iterator[FixtureServer]:
    tokens = {"read-token": {"GET"}, "write-token": {"GET", "PATCH"}}
    with FixtureServer("kubernetes", tokens).running() as fixture:
        yield fixture


def kubeconfig(path: Path, server_url: str, token: str) -> str:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: {server_url}
users:
- name: sa
  user:
    token: {token}
contexts:
- name: lab
  context:
    cluster: lab
    user: sa
    namespace: {NS}
current-context: lab
"""
    )
    return str(path)


@pytest.fixture
def config(server: FixtureServer, tmp_path: Path) -> KubernetesConfig:
    server.requests.clear()
    return KubernetesConfig(
        read_kubeconfig=kubeconfig(tmp_path / "read.yaml", server.url, "read-token"),
        write_kubeconfig=kubeconfig(tmp_path / "write.yaml", server.url, "write-token"),
        health_timeout_s=0,
    )


@pytest.fixture
def reader(config: KubernetesConfig) -> KubernetesReadToolset:
    return KubernetesReadToolset(config)


@pytest.fixture
def writer(config: KubernetesConfig) -> KubernetesWriteToolset:
    return KubernetesWriteToolset(config)


def test_toolsets_are_off_unless_configured(settings: Any) -> None:
    settings.DIAGNOSTICS_K8S_READ_KUBECONFIG = None
    settings.DIAGNOSTICS_K8S_WRITE_KUBECONFIG = None
    with pytest.raises(ToolsetNotConfigured):
        KubernetesReadToolset()
    with pytest.raises(ToolsetNotConfigured):
        KubernetesWriteToolset()
    # A read-only configuration gives no write toolset.
    with pytest.raises(ToolsetNotConfigured):
        KubernetesWriteToolset(KubernetesConfig(read_kubeconfig="/some/read.yaml"))


def test_get_pods_shows_each_failure_status(reader: KubernetesReadToolset) -> None:
    result = reader.call("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": NS})
    assert result.ok
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:]}
    assert "CrashLoopBackOff" in rows[CRASHING] and "0/1" in rows[CRASHING] and " 6 (" in rows[CRASHING]
    assert "CrashLoopBackOff" in rows[OOM]
    assert "ImagePullBackOff" in rows["inventory-api-64f7b9d8c-q9w3z"]
    assert "Pending" in rows[PENDING]
    assert "Running" in rows["frontend-6c9f8d7b5d-h7k2p"] and "1/1" in rows["frontend-6c9f8d7b5d-h7k2p"]


def test_describe_pod_shows_oomkilled_last_state_limits_and_events(reader: KubernetesReadToolset) -> None:
    out = reader.call("kubectl_describe", {"kind": "pod", "name": OOM, "namespace": NS}).output
    assert "Last State:     Terminated" in out
    assert "Reason:       OOMKilled" in out and "Exit Code:    137" in out
    assert "memory:  128Mi" in out
    assert "Back-off restarting failed container exporter" in out
    assert "Controlled By:  ReplicaSet/analytics-exporter-5f6d9c7b8d" in out


def test_describe_pending_pod_explains_why_it_is_unschedulable(reader: KubernetesReadToolset) -> None:
    out = reader.call("kubectl_describe", {"kind": "pod", "name": PENDING, "namespace": NS}).output
    assert "PodScheduled      False   Unschedulable" in out
    assert "didn't match Pod's node affinity/selector" in out
    assert "disktype=ssd" in out
    assert "FailedScheduling" in out


def test_events_and_logs_of_a_crashing_pod(reader: KubernetesReadToolset) -> None:
    events = reader.call(
        "kubectl_events", {"resource_type": "pod", "resource_name": CRASHING, "namespace": NS}
    ).output
    assert "BackOff" in events and f"pod/{CRASHING}" in events
    logs = reader.call("fetch_pod_logs", {"namespace": NS, "pod_name": CRASHING, "limit": 50})
    assert "Environment variable DEPLOY_ENV is undefined" in logs.output
    only_fatal = reader.call("fetch_pod_logs", {"namespace": NS, "pod_name": CRASHING, "filter": "fatal"})
    assert only_fatal.output.splitlines() == [line for line in logs.output.splitlines() if "FATAL" in line]
    previous = reader.call("kubectl_previous_logs", {"namespace": NS, "pod_name": OOM})
    assert "allocating buffer for 500000 rows" in previous.output


def test_nodes_deployments_and_yaml(reader: KubernetesReadToolset) -> None:
    nodes = reader.call("kubectl_get_by_kind_in_cluster", {"kind": "node"}).output
    assert "kind-control-plane" in nodes and "control-plane" in nodes and "v1.31.0" in nodes
    node = reader.call("kubectl_describe", {"kind": "node", "name": "kind-worker2"}).output
    assert "MemoryPressure       True    KubeletHasInsufficientMemory" in node
    assert "EvictionThresholdMet" in node and "ScalingReplicaSet" not in node
    deployments = reader.call(
        "kubectl_get_by_kind_in_namespace", {"kind": "deployment", "namespace": NS}
    ).output
    assert any(line.startswith("payment-worker") and " 0/1 " in line for line in deployments.splitlines())
    found = reader.call("kubectl_find_resource", {"kind": "deployment", "keyword": "payment"}).output
    assert "payment-worker" in found and "frontend" not in found
    described = reader.call(
        "kubectl_describe", {"kind": "deployment", "name": "payment-worker", "namespace": NS}
    )
    assert "1 desired | 1 updated | 1 total | 0 available | 1 unavailable" in described.output
    assert "ProgressDeadlineExceeded" in described.output
    as_yaml = reader.call(
        "kubectl_get_yaml", {"kind": "deployment", "name": "frontend", "namespace": NS}
    ).output
    assert "kind: Deployment" in as_yaml and "deployment.kubernetes.io/revision" in as_yaml


def test_missing_object_is_no_data_not_an_exception(reader: KubernetesReadToolset) -> None:
    result = reader.call("kubectl_describe", {"kind": "pod", "name": "nope", "namespace": NS})
    assert not result.ok and result.no_data and "NotFound" in result.output
    assert not reader.call("kubectl_describe", {"kind": "secret", "name": "x", "namespace": NS}).ok
    assert not reader.call("kubectl_delete", {"kind": "pod", "name": "x"}).ok


def test_read_toolset_only_gets_with_the_read_credentials(
    reader: KubernetesReadToolset, server: FixtureServer
) -> None:
    for spec in reader.tools():
        assert not any(word in spec.name for word in ("patch", "delete", "scale", "restart", "rollback"))
    reader.call("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": NS})
    reader.call("fetch_pod_logs", {"namespace": NS, "pod_name": CRASHING})
    assert server.requests
    assert {r.method for r in server.requests} == {"GET"}
    assert {r.headers["authorization"] for r in server.requests} == {"Bearer read-token"}
    # It keeps no API client, only where its read-only credentials are.
    assert not isinstance(reader, WriteToolset)
    assert all(isinstance(value, str | bool | type(None)) for value in vars(reader).values())
    assert not any(isinstance(value, k8s.ApiClient) for value in vars(reader).values())


def test_read_credentials_cannot_write(config: KubernetesConfig) -> None:
    misconfigured = KubernetesWriteToolset(
        KubernetesConfig(read_kubeconfig=config.read_kubeconfig, write_kubeconfig=config.read_kubeconfig)
    )
    result = misconfigured.run("rollout_restart", {"namespace": NS, "deployment": "payment-worker"})
    assert not result.ok and "Forbidden" in result.output


def test_rollout_restart_and_scale_send_patches(
    writer: KubernetesWriteToolset, server: FixtureServer
) -> None:
    restart = writer.run("rollout_restart", {"namespace": NS, "deployment": "payment-worker"})
    assert restart.ok, restart.output
    patch = server.requests[-1]
    assert (
        patch.method == "PATCH" and patch.path == f"/apis/apps/v1/namespaces/{NS}/deployments/payment-worker"
    )
    assert patch.headers["content-type"] == "application/strategic-merge-patch+json"
    assert patch.headers["authorization"] == "Bearer write-token"
    assert "kubectl.kubernetes.io/restartedAt" in patch.body["spec"]["template"]["metadata"]["annotations"]

    scale = writer.run("scale", {"namespace": NS, "deployment": "payment-worker", "replicas": 3})
    assert scale.ok and "scaled to 3" in scale.output
    assert server.requests[-1].path.endswith("/deployments/payment-worker/scale")
    assert server.requests[-1].body == {"spec": {"replicas": 3}}


def test_rollback_replaces_the_template_with_the_previous_revision(
    writer: KubernetesWriteToolset, server: FixtureServer
) -> None:
    result = writer.run("rollback", {"namespace": NS, "deployment": "payment-worker"})
    assert result.ok, result.output
    assert "from revision 2 to revision 1" in result.output
    patch = server.requests[-1]
    assert patch.headers["content-type"] == "application/json-patch+json"
    [op] = patch.body
    assert op["op"] == "replace" and op["path"] == "/spec/template"
    container = op["value"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/acme/payment-worker:2.2.4"
    assert {"name": "DEPLOY_ENV", "value": "production"} in container["env"]
    assert "pod-template-hash" not in op["value"]["metadata"]["labels"]
    missing = writer.run("rollback", {"namespace": NS, "deployment": "payment-worker", "to_revision": 7})
    assert not missing.ok and "revision 7" in missing.output


def test_patch_sets_env_and_resources_of_one_container(
    writer: KubernetesWriteToolset, server: FixtureServer
) -> None:
    args = {
        "namespace": NS,
        "deployment": "payment-worker",
        "container": "payment-worker",
        "set_env": {"DEPLOY_ENV": "production"},
        "resources": {"limits": {"memory": "512Mi"}},
    }
    assert writer.run("patch", args).ok
    change = server.requests[-1].body["spec"]["template"]["spec"]["containers"][0]
    assert change == {
        "name": "payment-worker",
        "env": [{"name": "DEPLOY_ENV", "value": "production"}],
        "resources": {"limits": {"memory": "512Mi"}},
    }
    wrong = writer.run("patch", {**args, "container": "sidecar"})
    assert not wrong.ok and "no container 'sidecar'" in wrong.output


def test_actions_off_the_allow_list_or_schema_are_refused(
    writer: KubernetesWriteToolset, config: KubernetesConfig, server: FixtureServer
) -> None:
    refused = [
        writer.run("delete_pod", {"namespace": NS, "name": CRASHING}),
        writer.run("scale", {"namespace": NS, "deployment": "payment-worker", "replicas": 500}),
        writer.run("scale", {"namespace": NS, "deployment": "payment-worker", "replicas": 1, "force": True}),
        writer.run("patch", {"namespace": NS, "deployment": "x", "container": "c", "set_env": {"A": 1}}),
        writer.run("patch", {"namespace": NS, "deployment": "x", "container": "c", "image": "evil:latest"}),
    ]
    assert all(not r.ok and r.output.startswith("refused") for r in refused)
    only_prod = KubernetesWriteToolset(
        KubernetesConfig(write_kubeconfig=config.write_kubeconfig, write_namespaces=("prod",))
    )
    denied = only_prod.run("rollout_restart", {"namespace": NS, "deployment": "payment-worker"})
    assert not denied.ok and "not writable" in denied.output
    assert not [r for r in server.requests if r.method == "PATCH"]


def test_health_of_a_deployment(writer: KubernetesWriteToolset) -> None:
    assert writer.health(f"{NS}/frontend").healthy
    failing = writer.health(f"{NS}/payment-worker")
    assert not failing.healthy and "0/1 available" in failing.detail
    assert not writer.health("payment-worker").healthy


def test_toolsets_implement_the_interfaces(
    reader: KubernetesReadToolset, writer: KubernetesWriteToolset
) -> None:
    assert isinstance(reader, ReadToolset) and reader.name == "kubernetes"
    assert isinstance(writer, WriteToolset) and writer.name == "kubernetes"
    assert not {s.name for s in reader.tools()} & {a.name for a in writer.actions()}
