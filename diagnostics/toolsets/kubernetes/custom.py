"""Custom resources the read toolset knows (``client.CUSTOM``: cert-manager's Certificate), through the
client's CustomObjectsApi. They come back as dicts, not models, so their listing, describe and YAML are
rendered here. A custom kind whose API group the cluster does not serve (its CRD is not installed) is
``NotInstalled``: said as kubectl says it ("the server doesn't have a resource type"), never a failed read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from diagnostics.toolsets.kubernetes.client import KINDS

# The product that installs each custom kind's CRD, for the "not installed" answer.
PRODUCTS = {"certificate": "cert-manager"}


class NotInstalled(Exception):
    """The cluster serves no API for this custom kind (its CRD is not installed)."""


def _parts(kind: str) -> tuple[str, str, str]:
    group_version, plural, _ = KINDS[kind]
    group, _, version = group_version.partition("/")
    return group, version, plural


def _installed(api: k8s.ApiClient, kind: str) -> bool:
    group, version, _ = _parts(kind)
    groups = k8s.ApisApi(api).get_api_versions().groups or []
    return any(g.name == group and any(v.version == version for v in g.versions or []) for g in groups)


def _not_installed(api: k8s.ApiClient, kind: str, exc: ApiException) -> Exception:
    if exc.status != 404 or _installed(api, kind):
        return exc
    group, version, plural = _parts(kind)
    return NotInstalled(
        f'error: the server doesn\'t have a resource type "{plural}": {PRODUCTS.get(kind, group)} is not '
        f"installed (the cluster serves no {group}/{version} API)"
    )


def list_objects(api: k8s.ApiClient, kind: str, namespace: str | None) -> list[dict[str, Any]]:
    group, version, plural = _parts(kind)
    target = k8s.CustomObjectsApi(api)
    try:
        if namespace:
            found = target.list_namespaced_custom_object(group, version, namespace, plural)
        else:
            found = target.list_cluster_custom_object(group, version, plural)
    except ApiException as exc:
        raise _not_installed(api, kind, exc) from exc
    items = found.get("items") if isinstance(found, dict) else None
    return [i for i in items or [] if isinstance(i, dict)]


def read_object(api: k8s.ApiClient, kind: str, name: str, namespace: str | None) -> dict[str, Any]:
    group, version, plural = _parts(kind)
    try:
        found = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, namespace or "default", plural, name
        )
    except ApiException as exc:
        raise _not_installed(api, kind, exc) from exc
    return found if isinstance(found, dict) else {}


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("metadata"))


def created(obj: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(meta(obj).get("creationTimestamp") or "").replace("Z", "+00:00"))
    except ValueError:
        return None


def _cell(value: object) -> str:
    return " ".join(str(value).split())[:120] or "<none>"


HEADERS = {"certificate": ["NAME", "READY", "SECRET", "ISSUER", "NOT AFTER", "AGE"]}


def row(kind: str, obj: dict[str, Any]) -> list[str]:
    """A listing's cells but AGE (the caller's): a Certificate's Ready, Secret, issuer and notAfter."""
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), "Unknown")
    issuer = _dict(spec.get("issuerRef")).get("name") or ""
    return [
        _cell(meta(obj).get("name") or ""),
        _cell(ready),
        _cell(spec.get("secretName") or ""),
        _cell(issuer),
        _cell(status.get("notAfter") or ""),
    ]


def describe(kind: str, obj: dict[str, Any]) -> list[str]:
    """Name, namespace, and the spec and status as YAML (notAfter, renewalTime, conditions, secretName)."""
    body = {k: v for k, v in obj.items() if k in ("spec", "status")}
    return [
        f"Name:         {meta(obj).get('name') or ''}",
        f"Namespace:    {meta(obj).get('namespace') or ''}",
        f"Kind:         {obj.get('kind') or kind}",
        str(yaml.safe_dump(body, sort_keys=False)).rstrip(),
    ]


def as_yaml(obj: dict[str, Any]) -> str:
    meta(obj).pop("managedFields", None)
    return str(yaml.safe_dump(obj, sort_keys=False))
