"""A stand-in Kubernetes API server that records every request, and the RBAC side of the API server's own
reading of a request (the verb, API group, resource, subresource and namespace it is authorized as).

It answers with small but well-formed objects (every required field of the client's models), so the
toolsets' code runs to the end and every call it makes is seen; everything is named ``web`` so that a
tool's generated arguments (tests/deploy/test_rbac.py) find what they name.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

NAME = "web"
NOW = "2026-12-01T10:00:00Z"
UID = "11111111-2222-3333-4444-555555555555"


@dataclass(frozen=True)
class Request:
    """An API request as RBAC authorizes it (k8s.io/apiserver's RequestInfo)."""

    verb: str
    group: str
    resource: str  # "deployments" or "deployments/scale"
    namespace: str
    name: str


def request_info(method: str, path: str, query: dict[str, list[str]]) -> Request:
    """The RBAC attributes of a resource request, as the API server's RequestInfoFactory derives them."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource request: {path}")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    elif rest and rest[0] == "namespaces" and len(rest) == 2:
        namespace = rest[1]  # the namespace object itself
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch", ["false"])[0] == "true" else "list")
    else:
        verb = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }[method]
    return Request(verb, group, resource, namespace, name)


def _meta(namespace: str, name: str = NAME, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace or None,
        "uid": UID,
        "creationTimestamp": NOW,
        "labels": {"app": NAME},
        **extra,
    }


def _template() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": NAME}},
        "spec": {"containers": [{"name": NAME, "image": "registry.example.com/web:1"}]},
    }


def _object(resource: str, namespace: str, name: str) -> dict[str, Any]:
    """A well-formed object of ``resource`` (plural, lower case)."""
    selector = {"matchLabels": {"app": NAME}}
    if resource == "deployments":
        return {
            "metadata": _meta(
                namespace, name, generation=2, annotations={"deployment.kubernetes.io/revision": "2"}
            ),
            "spec": {"replicas": 1, "selector": selector, "template": _template()},
            "status": {
                "observedGeneration": 2,
                "replicas": 1,
                "updatedReplicas": 1,
                "readyReplicas": 1,
                "availableReplicas": 1,
            },
        }
    if resource == "replicasets":
        return {
            "metadata": _meta(namespace, name),
            "spec": {"replicas": 1, "selector": selector, "template": _template()},
            "status": {"replicas": 1, "readyReplicas": 1},
        }
    if resource == "pods":
        return {
            "metadata": _meta(namespace, name),
            "spec": {
                "containers": [{"name": NAME, "image": "registry.example.com/web:1"}],
                "nodeName": "node-1",
            },
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "containerStatuses": [
                    {
                        "name": NAME,
                        "image": "registry.example.com/web:1",
                        "imageID": "sha256:0",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": NOW}},
                    }
                ],
            },
        }
    if resource in ("statefulsets", "daemonsets"):
        return {
            "metadata": _meta(namespace, name),
            "spec": {"replicas": 1, "selector": selector, "template": _template()},
            "status": {
                "replicas": 1,
                "readyReplicas": 1,
                "currentNumberScheduled": 1,
                "desiredNumberScheduled": 1,
                "numberMisscheduled": 0,
                "numberReady": 1,
            },
        }
    if resource == "jobs":
        return {
            "metadata": _meta(namespace, name),
            "spec": {"template": _template()},
            "status": {"succeeded": 1},
        }
    if resource == "cronjobs":
        job = {"template": _template()}
        return {
            "metadata": _meta(namespace, name),
            "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": job}},
        }
    if resource == "ingresses":
        backend = {"service": {"name": NAME, "port": {"number": 80}}}
        path = {"path": "/", "pathType": "Prefix", "backend": backend}
        return {
            "metadata": _meta(namespace, name),
            "spec": {"rules": [{"host": "web.example.com", "http": {"paths": [path]}}]},
        }
    if resource == "nodes":
        return {
            "metadata": _meta("", name),
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": "b",
                    "containerRuntimeVersion": "containerd://2.0",
                    "kernelVersion": "6.1",
                    "kubeProxyVersion": "",
                    "kubeletVersion": "v1.33.0",
                    "machineID": "m",
                    "operatingSystem": "linux",
                    "osImage": "Debian",
                    "systemUUID": "s",
                },
            },
        }
    if resource == "services":
        return {
            "metadata": _meta(namespace, name),
            "spec": {
                "type": "ClusterIP",
                "clusterIP": "10.96.0.10",
                "ports": [{"port": 80, "protocol": "TCP"}],
            },
        }
    if resource == "events":
        return {
            "metadata": _meta(namespace, name),
            "involvedObject": {"kind": "Deployment", "name": NAME, "namespace": namespace},
            "reason": "ScalingReplicaSet",
            "message": "Scaled up replica set web-1 to 1",
            "type": "Normal",
            "lastTimestamp": NOW,
        }
    return {"metadata": _meta(namespace, name)}  # configmaps, persistentvolumeclaims, namespaces


def _list(resource: str, namespace: str) -> list[dict[str, Any]]:
    if resource == "replicasets":  # two revisions owned by the deployment: what a rollback looks for
        owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME, "uid": UID, "controller": True}
        items = []
        for revision in (1, 2):
            rs = _object("replicasets", namespace, f"{NAME}-{revision}")
            rs["metadata"]["ownerReferences"] = [owner]
            rs["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": str(revision)}
            items.append(rs)
        return items
    return [_object(resource, namespace, NAME)]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        info = request_info(self.command, url.path, parse_qs(url.query))
        self.server.requests.append(info)
        self.server.tokens.add(self.headers.get("Authorization", ""))
        resource, _, sub = info.resource.partition("/")
        if sub == "log":
            self._send(200, b"line one\nerror: line two\n", "text/plain")
            return
        if sub == "scale":
            body: Any = {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": _meta(info.namespace, info.name),
                "spec": {"replicas": 2},
                "status": {"replicas": 2},
            }
        elif info.verb in ("list", "watch"):
            body = {
                "apiVersion": "v1",
                "kind": "List",
                "metadata": {},
                "items": _list(resource, info.namespace),
            }
        else:
            body = _object(resource, info.namespace, info.name or NAME)
        self._send(200, json.dumps(body).encode(), "application/json")

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[Request] = []
        self.tokens: set[str] = set()


@contextmanager
def recording_api() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def kubeconfig(path: Path, server: _Server, token: str) -> str:
    """A kubeconfig at ``path`` for ``server`` with a bearer ``token``; returns the path."""
    host, port = server.server_address[:2]
    host = host.decode() if isinstance(host, bytes) else host
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://{host}:{port}"}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)
