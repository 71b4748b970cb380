"""The `kubernetes` environment, with the official Python client. Off unless configured.

Read and write use different credentials: KubernetesReadToolset is built from
SKILLGATE_K8S_READ_KUBECONFIG (a service account bound to a read-only role: get/list/watch and
pods/log) and KubernetesWriteToolset from SKILLGATE_K8S_WRITE_KUBECONFIG (patch on deployments
and deployments/scale). Neither keeps a client: each call builds an ApiClient from its own
kubeconfig and closes it, so the read toolset holds nothing but a path to read-only credentials.
Read tools are named and shaped like HolmesGPT's kubectl tools (the replay recordings' format).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from diagnostics.toolsets.base import (
    ActionResult,
    HealthResult,
    ReadToolset,
    ToolResult,
    ToolSpec,
    WriteToolset,
    object_schema,
    validation_error,
)
from diagnostics.toolsets.kubernetes import custom
from diagnostics.toolsets.kubernetes.client import (
    APIS,
    CUSTOM,
    ENV_NAME_SCHEMA,
    KINDS,
    MAX_OUTPUT,
    NAME_SCHEMA,
    RESOURCES_SCHEMA,
    REVISION,
    SENSITIVE,
    KubernetesConfig,
    ToolsetNotConfigured,
    api_client,
    api_error,
    deployment_health,
    kind_schema,
)
from diagnostics.toolsets.kubernetes.custom import NotInstalled
from diagnostics.toolsets.kubernetes.render import as_yaml, describe, events_table, kind_title, name_of, table

__all__ = ["KubernetesConfig", "KubernetesReadToolset", "KubernetesWriteToolset", "ToolsetNotConfigured"]


class KubernetesReadToolset(ReadToolset):
    name: ClassVar[str] = "kubernetes"

    def __init__(self, config: KubernetesConfig | None = None) -> None:
        config = config or KubernetesConfig.from_settings()
        if not config.read_kubeconfig:
            raise ToolsetNotConfigured(
                "Set SKILLGATE_K8S_READ_KUBECONFIG to use the kubernetes read toolset."
            )
        self._kubeconfig = config.read_kubeconfig
        self._context = config.context
        self._read_secrets = config.read_secrets

    def tools(self) -> list[ToolSpec]:
        kinds = kind_schema(self._read_secrets)  # Secrets only where switched on
        ns = {"type": "string", "pattern": NAME_SCHEMA["pattern"]}
        limit = {"type": "integer", "minimum": 1, "maximum": 2000}
        name_ns = object_schema({"kind": kinds, "name": NAME_SCHEMA, "namespace": ns}, ["kind", "name"])
        logs = {"namespace": ns, "pod_name": NAME_SCHEMA, "container": NAME_SCHEMA, "limit": limit}
        return [
            ToolSpec(
                "kubectl_get_by_kind_in_namespace",
                "kubectl get KIND -n NAMESPACE -o wide",
                object_schema({"kind": kinds, "namespace": ns}, ["kind", "namespace"]),
            ),
            ToolSpec(
                "kubectl_get_by_kind_in_cluster",
                "kubectl get KIND -A -o wide",
                object_schema({"kind": kinds}, ["kind"]),
            ),
            ToolSpec("kubectl_get_by_name", "kubectl get KIND NAME -n NAMESPACE -o wide", name_ns),
            ToolSpec(
                "kubectl_find_resource",
                "Resources of KIND in any namespace whose name contains KEYWORD",
                object_schema(
                    {"kind": kinds, "keyword": {"type": "string", "minLength": 1}}, ["kind", "keyword"]
                ),
            ),
            ToolSpec(
                "kubectl_describe", "kubectl describe KIND NAME -n NAMESPACE (with its events)", name_ns
            ),
            ToolSpec("kubectl_get_yaml", "kubectl get KIND NAME -n NAMESPACE -o yaml", name_ns),
            ToolSpec(
                "kubectl_events",
                "kubectl events --for RESOURCE_TYPE/RESOURCE_NAME -n NAMESPACE",
                object_schema(
                    {"resource_type": kinds, "resource_name": NAME_SCHEMA, "namespace": ns},
                    ["resource_type", "resource_name", "namespace"],
                ),
            ),
            ToolSpec(
                "fetch_pod_logs",
                "The last LIMIT log lines of a pod (optionally only lines containing FILTER)",
                object_schema({**logs, "filter": {"type": "string"}}, ["namespace", "pod_name"]),
            ),
            ToolSpec(
                "kubectl_previous_logs",
                "Logs of the previous (crashed) container of a pod",
                object_schema(logs, ["namespace", "pod_name"]),
            ),
        ]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        specs = {spec.name: spec for spec in self.tools()}
        if tool not in specs:
            return ToolResult(tool, params, f"unknown tool {tool!r}", ok=False)
        kind = params.get("kind", params.get("resource_type"))
        if kind in SENSITIVE and not self._read_secrets:
            off = "Secrets are not read: SKILLGATE_K8S_READ_SECRETS is off (it needs get/list on secrets)"
            return ToolResult(tool, params, off, ok=False)
        error = validation_error(specs[tool].parameters, params)
        if error:
            return ToolResult(tool, params, f"invalid parameters: {error}", ok=False)
        handler: Callable[..., str] = getattr(self, f"_{tool}")
        try:
            with api_client(self._kubeconfig, self._context) as api:
                output = handler(api, **params)
        except NotInstalled as exc:  # a custom kind whose CRD is not installed: said, not a failure
            return ToolResult(tool, params, str(exc), ok=False, no_data=True)
        except ApiException as exc:
            if exc.status == 404:
                return ToolResult(tool, params, api_error(exc), ok=False, no_data=True)
            return ToolResult(tool, params, api_error(exc), ok=False)
        except (HTTPError, OSError, ValueError, k8s_config.ConfigException) as exc:
            return ToolResult(tool, params, api_error(exc), ok=False)
        if len(output) > MAX_OUTPUT:
            output = output[:MAX_OUTPUT] + "\n...(truncated)"
        return ToolResult(tool, params, output)

    # --- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def _list(api: k8s.ApiClient, kind: str, namespace: str | None) -> list[Any]:
        if kind in CUSTOM:
            return custom.list_objects(api, kind, namespace)
        group, resource, namespaced = KINDS[kind]
        target = APIS[group](api)
        if not namespaced:
            return list(getattr(target, f"list_{resource}")().items)
        if namespace:
            return list(getattr(target, f"list_namespaced_{resource}")(namespace).items)
        return list(getattr(target, f"list_{resource}_for_all_namespaces")().items)

    @staticmethod
    def _read(api: k8s.ApiClient, kind: str, name: str, namespace: str | None) -> Any:
        if kind in CUSTOM:
            return custom.read_object(api, kind, name, namespace)
        group, resource, namespaced = KINDS[kind]
        target = APIS[group](api)
        if namespaced:
            return getattr(target, f"read_namespaced_{resource}")(name, namespace or "default")
        return getattr(target, f"read_{resource}")(name)

    @staticmethod
    def _events_for(api: k8s.ApiClient, kind: str, name: str, namespace: str | None) -> list[Any]:
        selector = f"involvedObject.name={name},involvedObject.kind={kind_title(kind)}"
        core = k8s.CoreV1Api(api)
        if namespace and KINDS[kind][2]:
            return list(core.list_namespaced_event(namespace, field_selector=selector).items)
        return list(core.list_event_for_all_namespaces(field_selector=selector).items)

    # --- tools -----------------------------------------------------------------------------------

    def _kubectl_get_by_kind_in_namespace(self, api: k8s.ApiClient, kind: str, namespace: str) -> str:
        items = self._list(api, kind, namespace)
        return (
            table(kind, items, all_namespaces=False)
            if items
            else f"No resources found in {namespace} namespace."
        )

    def _kubectl_get_by_kind_in_cluster(self, api: k8s.ApiClient, kind: str) -> str:
        items = self._list(api, kind, None)
        return table(kind, items, all_namespaces=bool(KINDS[kind][2])) if items else "No resources found"

    def _kubectl_get_by_name(
        self, api: k8s.ApiClient, kind: str, name: str, namespace: str = "default"
    ) -> str:
        return table(kind, [self._read(api, kind, name, namespace)], all_namespaces=False)

    def _kubectl_find_resource(self, api: k8s.ApiClient, kind: str, keyword: str) -> str:
        items = [i for i in self._list(api, kind, None) if keyword.lower() in name_of(i).lower()]
        return table(kind, items, all_namespaces=bool(KINDS[kind][2])) if items else "No resources found"

    def _kubectl_describe(self, api: k8s.ApiClient, kind: str, name: str, namespace: str = "default") -> str:
        obj = self._read(api, kind, name, namespace)
        return describe(kind, obj, self._events_for(api, kind, name, namespace), api)

    def _kubectl_get_yaml(self, api: k8s.ApiClient, kind: str, name: str, namespace: str = "default") -> str:
        return as_yaml(kind, self._read(api, kind, name, namespace), api)

    def _kubectl_events(
        self, api: k8s.ApiClient, resource_type: str, resource_name: str, namespace: str
    ) -> str:
        events = self._events_for(api, resource_type, resource_name, namespace)
        return events_table(events) if events else f"No events found in {namespace} namespace."

    def _fetch_pod_logs(
        self,
        api: k8s.ApiClient,
        namespace: str,
        pod_name: str,
        container: str | None = None,
        limit: int = 100,
        filter: str | None = None,
        previous: bool = False,
    ) -> str:
        kwargs: dict[str, Any] = {
            "tail_lines": limit if not filter else max(limit, 2000),
            "previous": previous,
        }
        if container:
            kwargs["container"] = container
        text = str(k8s.CoreV1Api(api).read_namespaced_pod_log(pod_name, namespace, **kwargs))
        lines = text.splitlines()
        if filter:
            lines = [line for line in lines if filter.lower() in line.lower()][-limit:]
        return "\n".join(lines) if lines else "(no log lines)"

    def _kubectl_previous_logs(
        self,
        api: k8s.ApiClient,
        namespace: str,
        pod_name: str,
        container: str | None = None,
        limit: int = 100,
    ) -> str:
        return self._fetch_pod_logs(api, namespace, pod_name, container, limit, previous=True)


class KubernetesWriteToolset(WriteToolset):
    name: ClassVar[str] = "kubernetes"

    def __init__(self, config: KubernetesConfig | None = None) -> None:
        config = config or KubernetesConfig.from_settings()
        if not config.write_kubeconfig:
            raise ToolsetNotConfigured(
                "Set SKILLGATE_K8S_WRITE_KUBECONFIG to use the kubernetes write toolset."
            )
        self._config = config

    def actions(self) -> list[ToolSpec]:
        target = {
            "namespace": {"type": "string", "pattern": NAME_SCHEMA["pattern"]},
            "deployment": NAME_SCHEMA,
        }
        return [
            ToolSpec(
                "rollout_restart",
                "kubectl rollout restart deployment/DEPLOYMENT -n NAMESPACE",
                object_schema(target, ["namespace", "deployment"]),
            ),
            ToolSpec(
                "scale",
                "kubectl scale deployment/DEPLOYMENT --replicas=N -n NAMESPACE",
                object_schema(
                    {**target, "replicas": {"type": "integer", "minimum": 0, "maximum": 50}},
                    ["namespace", "deployment", "replicas"],
                ),
            ),
            ToolSpec(
                "rollback",
                "kubectl rollout undo deployment/DEPLOYMENT [--to-revision=N] -n NAMESPACE",
                object_schema(
                    {**target, "to_revision": {"type": "integer", "minimum": 1}}, ["namespace", "deployment"]
                ),
            ),
            ToolSpec(
                "patch",
                "Patch one container of a deployment: set or remove env vars, set resources",
                object_schema(
                    {
                        **target,
                        "container": NAME_SCHEMA,
                        "set_env": {
                            "type": "object",
                            "propertyNames": ENV_NAME_SCHEMA,
                            "additionalProperties": {"type": "string"},
                            "maxProperties": 20,
                        },
                        "remove_env": {"type": "array", "items": ENV_NAME_SCHEMA, "maxItems": 20},
                        "resources": RESOURCES_SCHEMA,
                    },
                    ["namespace", "deployment", "container"],
                ),
            ),
        ]

    def run(self, action: str, args: dict[str, Any]) -> ActionResult:
        specs = {spec.name: spec for spec in self.actions()}
        if action not in specs:
            return ActionResult(action, args, False, f"refused: {action!r} is not on the allow-list")
        error = validation_error(specs[action].parameters, args)
        if error:
            return ActionResult(action, args, False, f"refused: invalid arguments: {error}")
        allowed = self._config.write_namespaces
        if allowed and args["namespace"] not in allowed:
            return ActionResult(
                action, args, False, f"refused: namespace {args['namespace']!r} is not writable"
            )
        handler: Callable[..., str] = getattr(self, f"_{action}")
        try:
            with self._client() as api:
                return ActionResult(action, args, True, handler(k8s.AppsV1Api(api), **args))
        except (ApiException, HTTPError, OSError, ValueError, k8s_config.ConfigException) as exc:
            return ActionResult(action, args, False, f"failed: {api_error(exc)}")

    def health(self, target: str) -> HealthResult:
        """target: NAMESPACE/DEPLOYMENT. Healthy when the rollout is complete and no pod is failing."""
        namespace, _, name = target.partition("/")
        if not namespace or not name:
            return HealthResult(False, f"target must be NAMESPACE/DEPLOYMENT, got {target!r}")
        deadline = time.monotonic() + self._config.health_timeout_s
        while True:
            try:
                with self._client() as api:
                    healthy, detail = deployment_health(api, namespace, name)
            except (ApiException, HTTPError, OSError, k8s_config.ConfigException) as exc:
                healthy, detail = False, api_error(exc)
            if healthy or time.monotonic() >= deadline:
                return HealthResult(healthy, f"{target}: {detail}")
            time.sleep(2.0)

    @contextmanager
    def _client(self) -> Iterator[k8s.ApiClient]:
        assert self._config.write_kubeconfig is not None
        with api_client(self._config.write_kubeconfig, self._config.context) as api:
            yield api

    # --- actions ---------------------------------------------------------------------------------

    def _rollout_restart(self, apps: k8s.AppsV1Api, namespace: str, deployment: str) -> str:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": now}}}}
        }
        apps.patch_namespaced_deployment(deployment, namespace, body)
        return f"deployment.apps/{deployment} restarted"

    def _scale(self, apps: k8s.AppsV1Api, namespace: str, deployment: str, replicas: int) -> str:
        result = apps.patch_namespaced_deployment_scale(
            deployment, namespace, {"spec": {"replicas": replicas}}
        )
        return f"deployment.apps/{deployment} scaled to {result.spec.replicas}"

    def _rollback(
        self, apps: k8s.AppsV1Api, namespace: str, deployment: str, to_revision: int | None = None
    ) -> str:
        current = apps.read_namespaced_deployment(deployment, namespace)
        now = int((current.metadata.annotations or {}).get(REVISION, "0"))
        owned = [
            rs
            for rs in apps.list_namespaced_replica_set(namespace).items
            if any(ref.uid == current.metadata.uid for ref in rs.metadata.owner_references or [])
        ]
        by_revision = {int((rs.metadata.annotations or {}).get(REVISION, "0")): rs for rs in owned}
        if to_revision is None:
            older = [rev for rev in by_revision if 0 < rev < now]
            if not older:
                raise ValueError(f"no revision of {deployment} before {now} to roll back to")
            to_revision = max(older)
        if to_revision not in by_revision:
            raise ValueError(f"unable to find revision {to_revision} of {deployment}")
        template = apps.api_client.sanitize_for_serialization(by_revision[to_revision].spec.template)
        template.get("metadata", {}).get("labels", {}).pop("pod-template-hash", None)
        patch = [{"op": "replace", "path": "/spec/template", "value": template}]
        apps.patch_namespaced_deployment(deployment, namespace, patch)
        return f"deployment.apps/{deployment} rolled back from revision {now} to revision {to_revision}"

    def _patch(
        self,
        apps: k8s.AppsV1Api,
        namespace: str,
        deployment: str,
        container: str,
        set_env: dict[str, str] | None = None,
        remove_env: list[str] | None = None,
        resources: dict[str, Any] | None = None,
    ) -> str:
        current = apps.read_namespaced_deployment(deployment, namespace)
        if container not in [c.name for c in current.spec.template.spec.containers]:
            raise ValueError(f"deployment {deployment} has no container {container!r}")
        change: dict[str, Any] = {"name": container}
        env = [{"name": k, "value": v} for k, v in (set_env or {}).items()]
        env += [{"name": k, "$patch": "delete"} for k in remove_env or []]
        if env:
            change["env"] = env
        if resources:
            change["resources"] = resources
        if len(change) == 1:
            raise ValueError("nothing to patch: give set_env, remove_env or resources")
        apps.patch_namespaced_deployment(
            deployment, namespace, {"spec": {"template": {"spec": {"containers": [change]}}}}
        )
        changed = ", ".join(k for k in change if k != "name")
        return f"deployment.apps/{deployment} patched ({changed} of {container})"
