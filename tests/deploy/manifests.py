"""The Kubernetes manifests of infra/k8s, read as the cluster would get them.

``kustomization`` reads a kustomization that only lists resources (and sets a namespace): the base and
the RBAC folder, without kubectl. ``rendered`` renders any folder with ``kubectl kustomize`` (the
overlays' patches, images and replicas need the real kustomize); tests that need it skip without kubectl.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "k8s"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").is_file())
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}
_PLAIN_FIELDS = {"apiVersion", "kind", "resources", "namespace", "labels"}

Manifest = dict[str, Any]


def _documents(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomization(folder: Path) -> list[Manifest]:
    """The resources of a plain kustomization (resources, namespace, labels only), with its namespace set."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    extra = set(spec) - _PLAIN_FIELDS
    if extra:
        raise ValueError(f"{folder}: {sorted(extra)} need kubectl kustomize (use rendered())")
    docs: list[Manifest] = []
    for entry in spec.get("resources", []):
        target = folder / entry
        docs += kustomization(target) if target.is_dir() else _documents(target)
    for doc in docs:
        if spec.get("namespace") and doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = spec["namespace"]
        for label in spec.get("labels", []):
            doc["metadata"].setdefault("labels", {}).update(label["pairs"])
    return docs


def kubectl() -> str | None:
    return shutil.which("kubectl")


@cache
def _render(folder: str) -> str:
    binary = kubectl()
    assert binary, "kubectl is not installed"
    done = subprocess.run(
        [binary, "kustomize", folder], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder} failed: {done.stderr}")
    return done.stdout


def rendered(folder: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(_render(str(folder))) if doc]


def deployed() -> list[Manifest]:
    """What an overlay-free install applies: the base and the RBAC folder."""
    return kustomization(K8S / "base") + kustomization(K8S / "rbac")


def one(docs: list[Manifest], kind: str, name: str) -> Manifest:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name}"
    return found[0]


def of_kind(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def config(docs: list[Manifest]) -> dict[str, str]:
    """The service's environment from its ConfigMap."""
    return dict(one(docs, "ConfigMap", "skillgate-config")["data"])


def pod_spec(workload: Manifest) -> dict[str, Any]:
    return dict(workload["spec"]["template"]["spec"])


def containers(workload: Manifest) -> list[dict[str, Any]]:
    return list(pod_spec(workload)["containers"])
