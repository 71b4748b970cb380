"""kubectl-like text for Kubernetes API objects (the shape HolmesGPT's recorded tool outputs have)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml
from kubernetes import client as k8s

from diagnostics.toolsets.kubernetes import custom, secrets
from diagnostics.toolsets.kubernetes.client import CUSTOM


def kind_title(kind: str) -> str:
    return {
        "replicaset": "ReplicaSet",
        "statefulset": "StatefulSet",
        "daemonset": "DaemonSet",
        "configmap": "ConfigMap",
        "persistentvolumeclaim": "PersistentVolumeClaim",
        "cronjob": "CronJob",
    }.get(kind, kind.capitalize())


def _age(ts: datetime | None) -> str:
    if ts is None:
        return "<unknown>"
    seconds = int((datetime.now(UTC) - ts).total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d{hours % 24}h" if hours < 24 * 8 else f"{hours // 24}d"


def _columns(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "   ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def pod_status(pod: Any) -> str:
    """The STATUS column of `kubectl get pods`."""
    reason = pod.status.reason or pod.status.phase or "Unknown"
    for cs in reversed(pod.status.container_statuses or []):
        state = cs.state
        if state and state.waiting and state.waiting.reason:
            reason = state.waiting.reason
        elif state and state.terminated:
            term = state.terminated
            reason = term.reason or (f"Signal:{term.signal}" if term.signal else f"ExitCode:{term.exit_code}")
    if pod.metadata.deletion_timestamp:
        reason = "Terminating"
    return str(reason)


def _restarts(pod: Any) -> str:
    statuses = pod.status.container_statuses or []
    count = sum(cs.restart_count or 0 for cs in statuses)
    finished = [
        cs.last_state.terminated.finished_at
        for cs in statuses
        if cs.last_state and cs.last_state.terminated and cs.last_state.terminated.finished_at
    ]
    return f"{count} ({_age(max(finished))} ago)" if count and finished else str(count)


def _row(kind: str, obj: Any) -> list[str]:
    if kind in CUSTOM:
        return [*custom.row(kind, obj), _age(custom.created(obj))]
    meta: Any = obj.metadata
    spec: Any = getattr(obj, "spec", None)
    status: Any = getattr(obj, "status", None)
    age = _age(meta.creation_timestamp)
    if kind == "pod":
        statuses = status.container_statuses or []
        ready = f"{sum(1 for cs in statuses if cs.ready)}/{len(spec.containers)}"
        return [
            meta.name,
            ready,
            pod_status(obj),
            _restarts(obj),
            age,
            status.pod_ip or "<none>",
            spec.node_name or "<none>",
        ]
    if kind == "deployment":
        want = spec.replicas if spec.replicas is not None else 1
        containers = spec.template.spec.containers
        return [
            meta.name,
            f"{status.ready_replicas or 0}/{want}",
            str(status.updated_replicas or 0),
            str(status.available_replicas or 0),
            age,
            ",".join(c.name for c in containers),
            ",".join(c.image or "" for c in containers),
        ]
    if kind == "replicaset":
        return [
            meta.name,
            str(spec.replicas or 0),
            str(status.replicas or 0),
            str(status.ready_replicas or 0),
            age,
        ]
    if kind == "statefulset":
        return [meta.name, f"{status.ready_replicas or 0}/{spec.replicas or 0}", age]
    if kind == "daemonset":
        return [
            meta.name,
            str(status.desired_number_scheduled),
            str(status.current_number_scheduled),
            str(status.number_ready),
            age,
        ]
    if kind == "job":
        done = "Complete" if status.succeeded else ("Failed" if status.failed else "Running")
        return [meta.name, done, f"{status.succeeded or 0}/{spec.completions or 1}", age]
    if kind == "node":
        ready = next((c.status for c in status.conditions or [] if c.type == "Ready"), "Unknown")
        state = "Ready" if ready == "True" else "NotReady"
        if spec and spec.unschedulable:
            state += ",SchedulingDisabled"
        roles = [k.split("/", 1)[1] for k in (meta.labels or {}) if k.startswith("node-role.kubernetes.io/")]
        return [meta.name, state, ",".join(roles) or "<none>", age, status.node_info.kubelet_version]
    if kind == "service":
        ports = ",".join(f"{p.port}/{p.protocol}" for p in spec.ports or [])
        return [meta.name, spec.type or "", spec.cluster_ip or "<none>", ports or "<none>", age]
    if kind == "event":
        return _event_row(obj)
    if kind == "secret":
        return [*secrets.row(obj), age]
    if kind == "cronjob":
        last = status.last_schedule_time if status else None
        return [
            meta.name,
            spec.schedule,
            spec.time_zone or "<none>",
            str(bool(spec.suspend)),
            str(len(status.active or []) if status else 0),
            f"{_age(last)} ago" if last else "<none>",
            age,
        ]
    if kind == "ingress":
        rules = (spec.rules if spec else None) or []
        hosts = ",".join(r.host for r in rules if r.host) or "*"
        balancer = status.load_balancer.ingress if status and status.load_balancer else None
        address = ",".join(i.ip or i.hostname or "" for i in balancer or []) or ""
        ports = "80, 443" if spec and spec.tls else "80"
        return [meta.name, (spec and spec.ingress_class_name) or "<none>", hosts, address, ports, age]
    return [meta.name, age]


_HEADERS = {
    "pod": ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"],
    "deployment": ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES"],
    "replicaset": ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
    "statefulset": ["NAME", "READY", "AGE"],
    "daemonset": ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
    "job": ["NAME", "STATUS", "COMPLETIONS", "AGE"],
    "node": ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
    "service": ["NAME", "TYPE", "CLUSTER-IP", "PORT(S)", "AGE"],
    "event": ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
    "secret": ["NAME", "TYPE", "DATA", "AGE"],
    "cronjob": ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "AGE"],
    "ingress": ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"],
    **custom.HEADERS,
}


def name_of(item: Any) -> str:
    if isinstance(item, dict):
        return str(custom.meta(item).get("name") or "")
    return str(item.metadata.name or "")


def namespace_of(item: Any) -> str:
    if isinstance(item, dict):
        return str(custom.meta(item).get("namespace") or "")
    return str(item.metadata.namespace or "")


def table(kind: str, items: list[Any], *, all_namespaces: bool) -> str:
    header = _HEADERS.get(kind, ["NAME", "AGE"])
    rows = [_row(kind, item) for item in items]
    if all_namespaces:
        header = ["NAMESPACE", *header]
        rows = [[namespace_of(item), *row] for item, row in zip(items, rows, strict=True)]
    return _columns(header, rows)


def _event_time(event: Any) -> datetime | None:
    return (
        event.last_timestamp or event.event_time or event.first_timestamp or event.metadata.creation_timestamp
    )


def _event_row(event: Any) -> list[str]:
    obj = event.involved_object
    return [
        _age(_event_time(event)),
        event.type or "",
        event.reason or "",
        f"{(obj.kind or '').lower()}/{obj.name}",
        (event.message or "").strip(),
    ]


def events_table(events: list[Any]) -> str:
    ordered = sorted(events, key=lambda e: _event_time(e) or datetime.min.replace(tzinfo=UTC))
    return _columns(_HEADERS["event"], [_event_row(e) for e in ordered])


def _describe_events(events: list[Any]) -> str:
    if not events:
        return "Events:  <none>"
    rows = []
    for e in sorted(events, key=lambda e: _event_time(e) or datetime.min.replace(tzinfo=UTC)):
        age = _age(_event_time(e))
        if (e.count or 1) > 1 and e.first_timestamp:
            age = f"{age} (x{e.count} over {_age(e.first_timestamp)})"
        source = (e.source.component if e.source else None) or e.reporting_component or ""
        rows.append([e.type or "", e.reason or "", age, source, (e.message or "").strip()])
    body = _columns(["Type", "Reason", "Age", "From", "Message"], rows)
    dashes = _columns(
        ["Type", "Reason", "Age", "From", "Message"], [["-" * 4, "-" * 6, "-" * 3, "-" * 4, "-" * 7], *rows]
    ).splitlines()[1]
    lines = body.splitlines()
    return "Events:\n" + "\n".join("  " + line for line in [lines[0], dashes, *lines[1:]])


def _labels(labels: dict[str, str] | None, pad: int = 18) -> str:
    if not labels:
        return "<none>"
    return ("\n" + " " * pad).join(f"{k}={v}" for k, v in sorted(labels.items()))


def _state(state: Any) -> list[str]:
    if state is None:
        return ["Unknown"]
    if state.running:
        return ["Running", f"  Started:      {state.running.started_at}"]
    if state.waiting:
        out = ["Waiting", f"  Reason:       {state.waiting.reason}"]
        return out + ([f"  Message:      {state.waiting.message}"] if state.waiting.message else [])
    if state.terminated:
        t = state.terminated
        out = ["Terminated", f"  Reason:       {t.reason}", f"  Exit Code:    {t.exit_code}"]
        if t.message:
            out.append(f"  Message:      {t.message}")
        return [*out, f"  Started:      {t.started_at}", f"  Finished:     {t.finished_at}"]
    return ["Unknown"]


def _container_lines(container: Any, status: Any | None) -> list[str]:
    out = [f"  {container.name}:", f"    Image:          {container.image}"]
    if container.command:
        out.append(f"    Command:        {' '.join(container.command)}")
    if container.args:
        out.append(f"    Args:           {' '.join(container.args)}")
    if status is not None:
        state = _state(status.state)
        out += [f"    State:          {state[0]}", *[f"    {line}" for line in state[1:]]]
        if status.last_state and (status.last_state.terminated or status.last_state.waiting):
            last = _state(status.last_state)
            out += [f"    Last State:     {last[0]}", *[f"    {line}" for line in last[1:]]]
        out += [f"    Ready:          {status.ready}", f"    Restart Count:  {status.restart_count}"]
    resources = container.resources
    for part in ("limits", "requests"):
        values = getattr(resources, part, None) if resources else None
        if values:
            out.append(f"    {part.capitalize()}:")
            out += [f"      {k}:  {v}" for k, v in sorted(values.items())]
    for probe in ("liveness_probe", "readiness_probe"):
        p = getattr(container, probe)
        if p is not None:
            how = (
                (p.http_get and f"http-get :{p.http_get.port}{p.http_get.path}")
                or (p.exec and "exec")
                or "tcp-socket"
            )
            out.append(
                f"    {probe.split('_')[0].capitalize()}:  {how} delay={p.initial_delay_seconds or 0}s "
                f"period={p.period_seconds or 10}s #failure={p.failure_threshold or 3}"
            )
    env = container.env or []
    out.append("    Environment:" + ("    <none>" if not env else ""))
    for var in env:
        if var.value_from is not None:
            ref = var.value_from.secret_key_ref or var.value_from.config_map_key_ref
            source = (
                f"<set to the key '{ref.key}' of '{ref.name}'>" if ref else "<set from a field or resource>"
            )
            out.append(f"      {var.name}:  {source}")
        else:
            out.append(f"      {var.name}:  {var.value}")
    return out


def _describe_pod(pod: Any) -> list[str]:
    meta, spec, status = pod.metadata, pod.spec, pod.status
    owners = meta.owner_references or []
    statuses = {cs.name: cs for cs in status.container_statuses or []}
    out = [
        f"Name:             {meta.name}",
        f"Namespace:        {meta.namespace}",
        f"Node:             {spec.node_name or '<none>'}" + (f"/{status.host_ip}" if status.host_ip else ""),
        f"Start Time:       {status.start_time}",
        f"Labels:           {_labels(meta.labels)}",
        f"Status:           {status.phase}",
        f"IP:               {status.pod_ip or ''}",
    ]
    if owners:
        out.append(f"Controlled By:  {owners[0].kind}/{owners[0].name}")
    out.append("Containers:")
    for container in spec.containers:
        out += _container_lines(container, statuses.get(container.name))
    out.append("Conditions:")
    out.append("  Type              Status  Reason")
    for c in status.conditions or []:
        line = f"  {c.type:<17} {c.status:<7} {c.reason or ''}"
        out.append(line.rstrip() + (f"  ({c.message})" if c.message else ""))
    if spec.node_selector:
        out.append(f"Node-Selectors:   {_labels(spec.node_selector)}")
    if spec.tolerations:
        tolerations = [f"{t.key}:{t.effect} op={t.operator}" for t in spec.tolerations]
        out.append("Tolerations:      " + ("\n" + " " * 18).join(tolerations))
    return out


def _describe_deployment(dep: Any, api: k8s.ApiClient) -> list[str]:
    meta, spec, status = dep.metadata, dep.spec, dep.status
    want = spec.replicas if spec.replicas is not None else 1
    selector = ",".join(f"{k}={v}" for k, v in (spec.selector.match_labels or {}).items())
    out = [
        f"Name:                   {meta.name}",
        f"Namespace:              {meta.namespace}",
        f"Labels:                 {_labels(meta.labels, 24)}",
        f"Annotations:            {_labels(meta.annotations, 24)}",
        f"Selector:               {selector}",
        f"Replicas:               {want} desired | {status.updated_replicas or 0} updated | "
        f"{status.replicas or 0} total | {status.available_replicas or 0} available | "
        f"{status.unavailable_replicas or 0} unavailable",
        f"StrategyType:           {spec.strategy.type if spec.strategy else ''}",
        "Pod Template:",
        f"  Labels:  {_labels(spec.template.metadata.labels if spec.template.metadata else None, 11)}",
        " Containers:",
    ]
    for container in spec.template.spec.containers:
        out += _container_lines(container, None)
    out.append("Conditions:")
    out.append("  Type           Status  Reason")
    for c in status.conditions or []:
        out.append(
            f"  {c.type:<14} {c.status:<7} {c.reason or ''}".rstrip()
            + (f"  ({c.message})" if c.message else "")
        )
    return out


def _describe_node(node: Any) -> list[str]:
    meta, spec, status = node.metadata, node.spec, node.status
    out = [f"Name:               {meta.name}", f"Labels:             {_labels(meta.labels, 20)}"]
    taints = [f"{t.key}={t.value or ''}:{t.effect}" for t in (spec.taints or [])] if spec else []
    out.append(f"Taints:             {', '.join(taints) or '<none>'}")
    out.append(f"Unschedulable:      {bool(spec and spec.unschedulable)}")
    out.append("Conditions:")
    out.append("  Type                 Status  Reason                       Message")
    for c in status.conditions or []:
        out.append(f"  {c.type:<20} {c.status:<7} {c.reason or '':<28} {c.message or ''}".rstrip())
    for title, values in (("Capacity", status.capacity), ("Allocatable", status.allocatable)):
        out.append(f"{title}:")
        out += [f"  {k}:  {v}" for k, v in sorted((values or {}).items())]
    info = status.node_info
    if info:
        out += [
            "System Info:",
            f"  Kubelet Version:            {info.kubelet_version}",
            f"  Container Runtime Version:  {info.container_runtime_version}",
            f"  OS Image:                   {info.os_image}",
        ]
    return out


def as_yaml(kind: str, obj: Any, api: k8s.ApiClient) -> str:
    """``kubectl get -o yaml`` without managedFields; a Secret redacted (``secrets.redacted``)."""
    if kind == "secret":
        return str(yaml.safe_dump(secrets.redacted(obj, api), sort_keys=False))
    if kind in CUSTOM:
        return custom.as_yaml(obj)
    data = api.sanitize_for_serialization(obj)
    data.get("metadata", {}).pop("managedFields", None)
    return str(yaml.safe_dump(data, sort_keys=False))


def describe(kind: str, obj: Any, events: list[Any], api: k8s.ApiClient) -> str:
    if kind == "pod":
        lines = _describe_pod(obj)
    elif kind == "deployment":
        lines = _describe_deployment(obj, api)
    elif kind == "node":
        lines = _describe_node(obj)
    elif kind == "secret":
        lines = secrets.describe(obj)
    elif kind in CUSTOM:
        lines = custom.describe(kind, obj)
    else:
        data = api.sanitize_for_serialization(obj)
        data.get("metadata", {}).pop("managedFields", None)
        lines = [f"Name:         {obj.metadata.name}", f"Namespace:    {obj.metadata.namespace or ''}"]
        lines += [str(yaml.safe_dump({k: v for k, v in data.items() if k in ("spec", "status", "data")}))]
    return "\n".join([*lines, _describe_events(events)])
