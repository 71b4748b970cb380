"""Configuration, API access and argument schemas shared by the kubernetes toolsets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from diagnostics import conf as diagnostics_conf

MAX_OUTPUT = 12_000
# kind -> (API group, the client's snake_case resource name, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "pod": ("core", "pod", True),
    "service": ("core", "service", True),
    "configmap": ("core", "config_map", True),
    "persistentvolumeclaim": ("core", "persistent_volume_claim", True),
    "event": ("core", "event", True),
    "node": ("core", "node", False),
    "namespace": ("core", "namespace", False),
    "deployment": ("apps", "deployment", True),
    "replicaset": ("apps", "replica_set", True),
    "statefulset": ("apps", "stateful_set", True),
    "daemonset": ("apps", "daemon_set", True),
    "job": ("batch", "job", True),
    "cronjob": ("batch", "cron_job", True),
    "ingress": ("networking", "ingress", True),
    "secret": ("core", "secret", True),  # only with read_secrets, and redacted (secrets.py)
    # custom resources (CustomObjectsApi): API group and version, plural
    "certificate": ("cert-manager.io/v1", "certificates", True),
}
CUSTOM = {"certificate"}
SENSITIVE = {"secret"}
APIS = {
    "core": k8s.CoreV1Api,
    "apps": k8s.AppsV1Api,
    "batch": k8s.BatchV1Api,
    "networking": k8s.NetworkingV1Api,
}
NAME_SCHEMA = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}


def kind_schema(read_secrets: bool) -> dict[str, object]:
    """The kinds a read may name: Secrets only where switched on (SKILLGATE_K8S_READ_SECRETS)."""
    return {"type": "string", "enum": sorted(k for k in KINDS if read_secrets or k not in SENSITIVE)}


class ToolsetNotConfigured(ImproperlyConfigured):
    """The environment variables this toolset needs are not set (the integration is off)."""


@dataclass(frozen=True)
class KubernetesConfig:
    read_kubeconfig: str | None = None
    write_kubeconfig: str | None = None
    context: str | None = None
    write_namespaces: tuple[str, ...] = ()  # empty: any namespace
    health_timeout_s: float = 120.0
    read_secrets: bool = False  # Secrets are listed and read (redacted) only when switched on

    @classmethod
    def from_settings(cls) -> KubernetesConfig:
        return cls(
            read_kubeconfig=diagnostics_conf.get().environments.k8s_read_kubeconfig,
            write_kubeconfig=diagnostics_conf.get().environments.k8s_write_kubeconfig,
            context=diagnostics_conf.get().environments.k8s_context,
            write_namespaces=diagnostics_conf.get().environments.k8s_write_namespaces,
            health_timeout_s=diagnostics_conf.get().environments.k8s_health_timeout_s,
            read_secrets=diagnostics_conf.get().environments.k8s_read_secrets,
        )


@contextmanager
def api_client(kubeconfig: str, context: str | None) -> Iterator[k8s.ApiClient]:
    api = k8s_config.new_client_from_config(config_file=kubeconfig, context=context, persist_config=False)
    try:
        yield api
    finally:
        api.close()


def api_error(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"Error from server ({exc.reason}, HTTP {exc.status}): {(exc.body or '')[:500]}"
    return f"{type(exc).__name__}: {exc}"


QUANTITY_SCHEMA = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$"}
RESOURCES_SCHEMA = {
    "type": "object",
    "properties": {
        part: {
            "type": "object",
            "properties": {"cpu": QUANTITY_SCHEMA, "memory": QUANTITY_SCHEMA},
            "additionalProperties": False,
        }
        for part in ("limits", "requests")
    },
    "additionalProperties": False,
}
ENV_NAME_SCHEMA = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_.-]*$"}
REVISION = "deployment.kubernetes.io/revision"


def deployment_health(api: k8s.ApiClient, namespace: str, name: str) -> tuple[bool, str]:
    dep = k8s.AppsV1Api(api).read_namespaced_deployment(name, namespace)
    want = dep.spec.replicas if dep.spec.replicas is not None else 1
    status = dep.status
    updated, available = status.updated_replicas or 0, status.available_replicas or 0
    detail = f"{available}/{want} available, {updated} updated"
    if (status.observed_generation or 0) < (dep.metadata.generation or 0):
        return False, f"rollout not observed yet; {detail}"
    if updated < want or available < want or (status.replicas or 0) > want:
        return False, f"rollout in progress: {detail}"
    selector = ",".join(f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items())
    pods = k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    for pod in pods:
        for cs in pod.status.container_statuses or []:
            waiting = cs.state.waiting if cs.state else None
            if waiting and waiting.reason not in (None, "ContainerCreating", "PodInitializing"):
                return False, f"pod {pod.metadata.name} container {cs.name} is {waiting.reason}"
    return True, f"rollout complete: {detail}"
