"""``kubectl describe`` of pods, workloads, jobs and PVCs -> findings."""

from __future__ import annotations

import re

from diagnostics.agent.analyzers.base import (
    EXIT_CODE_MEANINGS,
    AnalysisState,
    Analyzer,
    Node,
    ToolOutput,
    clip,
    describe_tree,
    looks_like_describe,
    parse_events,
    quantity,
    register,
)
from diagnostics.agent.analyzers.events import _storageclass_missing, event_findings
from diagnostics.agent.findings import Finding, ObjRef, Remedy, Severity

_URL = re.compile(r"https?://[^\s'\";]+")
_EXPLICIT_EXIT = re.compile(r"(?:^|[;&|]\s*|\bthen\s+|\s)exit\s+([1-9]\d*)\b")
_HASH_SUFFIX = re.compile(r"-[a-f0-9]{6,10}-[a-z0-9]{5}$|-[a-z0-9]{5}$")
# "http-get http://:8081/healthz delay=..." / "tcp-socket :5432 delay=..." (kubectl describe's probe lines)
_PROBE_PORT = re.compile(r"^(?:http-get\s+https?://[^:/\s]*:(\d+)|tcp-socket\s+[^:\s]*:(\d+))")
_PORT = re.compile(r"\b(\d+)/(?:TCP|UDP|SCTP)\b")


def workload_of(pod: str, controlled_by: str = "") -> str:
    """The owning workload's name: ``ReplicaSet/web-5d98ffcfd`` -> ``web``; else the pod name's stem."""
    if controlled_by:
        owner = controlled_by.split("/", 1)[-1]
        return re.sub(r"-[a-f0-9]{6,10}$", "", owner) if controlled_by.startswith("ReplicaSet/") else owner
    return _HASH_SUFFIX.sub("", pod)


def _containers(tree: Node, section: str) -> list[Node]:
    found = tree.child(section)
    if found is None:
        template = tree.child("Pod Template")
        found = template.child(section) if template else None
    return [c for c in (found.children if found else []) if c.key and not c.value]


def _command(container: Node) -> str:
    parts = []
    for key in ("Command", "Args"):
        node = container.child(key)
        if node is not None:
            parts.append(node.value)
            parts.extend(node.texts())
    return " ".join(p for p in parts if p)


def _exit_meaning(code: str) -> str:
    try:
        meaning = EXIT_CODE_MEANINGS.get(int(code), "")
    except ValueError:
        return ""
    return f" — {meaning}" if meaning else ""


def _command_findings(container: Node, obj: ObjRef, state: AnalysisState) -> list[Finding]:
    command = _command(container)
    if not command:
        return []
    for url in _URL.findall(command):
        state.fact_set("urls").add(url.rstrip(".,)"))
    match = _EXPLICIT_EXIT.search(command)
    if not match:
        return []
    code = match.group(1)
    program = command.split()[0] if command.split() else ""
    shell = {"sh", "/bin/sh", "bash", "/bin/bash", "-c"}
    words = [w for w in command.split() if w not in shell]
    first_cmd = words[0] if words else program
    return [
        Finding(
            "explicit_exit",
            f"{obj.kind.capitalize()} {obj.name}: the command of container {container.key} "
            f"({clip(command, 140)}) "
            f"ends with 'exit {code}', so it always exits with code {code} after running '{first_cmd}'"
            f"{_exit_meaning(code)}; the container crashes on every start.",
            Severity.CRITICAL,
            obj.label,
            clip(command),
            72,
            f"Fix the container command of {container.key} so it keeps running instead of exiting with "
            f"{code}.",
            Remedy(
                ("rollback", "rollout_undo"),
                workload_of(obj.name),
                {},
                "roll back to the last working command",
            ),
        )
    ]


def _is_pod_describe(text: str) -> bool:
    return (
        looks_like_describe(text)
        and "Containers:" in text
        and not re.search(r"^Replicas:.*desired", text, re.MULTILINE)
        and "Pods Statuses:" not in text
    )


@register
class PodDescribeAnalyzer(Analyzer):
    name = "k8s_pod_describe"

    def applies(self, out: ToolOutput) -> bool:
        return _is_pod_describe(out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        tree = describe_tree(out.text)
        pod = ObjRef("pod", tree.get("Name"), tree.get("Namespace"))
        state.fact_set("namespaces").add(pod.namespace)
        workload = workload_of(pod.name, tree.get("Controlled By"))
        status = tree.get("Status")
        findings: list[Finding] = []
        healthy = status == "Running"
        for container in _containers(tree, "Init Containers") + _containers(tree, "Containers"):
            found = self._container(container, pod, workload, state)
            findings += found
            state_node = container.child("State")
            if any(f.is_problem for f in found) or not state_node or state_node.value != "Running":
                healthy = False
            if container.get("Ready") == "False":
                healthy = False
        volumes = tree.child("Volumes")
        for volume in volumes.children if volumes is not None else []:
            claim = volume.get("ClaimName")
            if claim:
                state.lead(
                    ObjRef("persistentvolumeclaim", claim, pod.namespace), f"volume of pod {pod.name}", 85
                )
        events = parse_events(out.text)
        findings += event_findings(
            events,
            pod,
            state,
            selectors=tree.get("Node-Selectors"),
            tolerations=tree.get("Tolerations"),
            workload=workload,
        )
        if (
            healthy
            and not any(f.is_problem for f in findings)
            and not any(e.type == "Warning" for e in events)
        ):
            restarts = sum(int(c.get("Restart Count") or 0) for c in _containers(tree, "Containers"))
            findings.append(
                Finding(
                    "pod_healthy",
                    f"Pod {pod.name} is Running and Ready ({restarts} restarts); no warning events.",
                    Severity.INFO,
                    pod.label,
                    "",
                    5,
                )
            )
        return findings

    def _container(self, c: Node, pod: ObjRef, workload: str, state: AnalysisState) -> list[Finding]:
        findings: list[Finding] = []
        state_node = c.child("State")
        last = c.child("Last State")
        waiting = state_node.get("Reason") if state_node else ""
        current = state_node.value if state_node else ""
        last_reason = last.get("Reason") if last else ""
        last_code = last.get("Exit Code") if last else ""
        restarts = int(c.get("Restart Count") or 0)
        limits = c.child("Limits")
        mem_limit = limits.get("memory") if limits else ""
        oom = last_reason == "OOMKilled" or (
            state_node is not None and state_node.get("Reason") == "OOMKilled"
        )
        if oom:
            bigger = ""
            amount = quantity(mem_limit) if mem_limit else None
            if amount:
                bigger = f"{int(amount * 2 / 2**20)}Mi"
            findings.append(
                Finding(
                    "oom_killed",
                    f"Pod {pod.name}: container {c.key} was OOMKilled — killed for running out of memory "
                    "(OOM, exit "
                    f"code {last_code or 137})"
                    + (f" at its memory limit of {mem_limit}" if mem_limit else "")
                    + f"; restarted {restarts} times.",
                    Severity.CRITICAL,
                    pod.label,
                    f"Last State: Terminated, Reason: OOMKilled, limit {mem_limit}",
                    88,
                    f"Raise the memory limit of {c.key}"
                    + (f" (now {mem_limit})" if mem_limit else "")
                    + " or reduce its memory use.",
                    Remedy(
                        ("increase_memory_limit", "set_memory_limit", "patch_memory_limit", "restart"),
                        workload,
                        {"container": c.key, **({"memory": bigger} if bigger else {})},
                        f"raise the memory limit of {c.key}" + (f" to {bigger}" if bigger else ""),
                    ),
                )
            )
        if waiting == "CrashLoopBackOff" or (
            current == "Waiting" and "BackOff" in waiting and "Image" not in waiting
        ):
            exit_part = ""
            if last_reason:
                meaning = _exit_meaning(last_code)
                exit_part = f"; its last run ended with {last_reason} (exit code {last_code}{meaning})"
                if last_reason == "Completed" and last_code == "0":
                    exit_part += (
                        " — the process exits right after starting, so Kubernetes keeps restarting it"
                    )
            findings.append(
                Finding(
                    "crash_loop",
                    f"Pod {pod.name} is in CrashLoopBackOff: container {c.key} keeps crashing and restarting "
                    f"({restarts} restarts){exit_part}.",
                    Severity.CRITICAL,
                    pod.label,
                    f"State: Waiting (CrashLoopBackOff), Last State: {last_reason}",
                    50 if oom else 55,
                    "Fix what makes the container exit (see its logs and last state).",
                    Remedy(
                        ("rollback", "rollout_undo", "restart"), workload, {}, "roll back the last change"
                    ),
                )
            )
        elif waiting in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            image = c.get("Image")
            findings.append(
                Finding(
                    "image_pull",
                    f"Pod {pod.name} cannot start: container {c.key} fails pulling the image {image} "
                    f"({waiting}).",
                    Severity.CRITICAL,
                    pod.label,
                    f"State: Waiting ({waiting}), Image: {image}",
                    85,
                    f"Use an image that exists ({image} cannot be pulled) or add imagePullSecrets.",
                    Remedy(
                        ("rollback", "rollout_undo"), workload, {}, "roll back to the last image that worked"
                    ),
                )
            )
        elif waiting in ("CreateContainerConfigError", "CreateContainerError", "RunContainerError"):
            findings.append(
                Finding(
                    "container_config_error",
                    f"Pod {pod.name}: container {c.key} cannot be created ({waiting}); see the events for "
                    "the missing "
                    "config.",
                    Severity.CRITICAL,
                    pod.label,
                    f"State: Waiting ({waiting})",
                    60,
                )
            )
        elif (
            current == "Terminated"
            and state_node is not None
            and state_node.get("Exit Code") not in ("", "0")
        ):
            code = state_node.get("Exit Code")
            findings.append(
                Finding(
                    "container_failed",
                    f"Pod {pod.name}: container {c.key} terminated with "
                    f"{state_node.get('Reason') or 'an error'} "
                    f"(exit code {code}{_exit_meaning(code)}).",
                    Severity.CRITICAL,
                    pod.label,
                    f"State: Terminated, Exit Code: {code}",
                    45,
                )
            )
        elif restarts > 0 and last_reason and not oom and waiting != "CrashLoopBackOff":
            findings.append(
                Finding(
                    "restarts",
                    f"Pod {pod.name}: container {c.key} restarted {restarts} times (last: {last_reason}, "
                    "exit code "
                    f"{last_code}{_exit_meaning(last_code)}).",
                    Severity.WARNING,
                    pod.label,
                    f"Restart Count: {restarts}",
                    35,
                )
            )
        findings += _command_findings(c, pod, state)
        findings += _probe_port_findings(c, pod)
        return findings


_PROBE_CONSEQUENCES = {
    "Liveness": "so the probe fails (connection refused) and the kubelet restarts the container",
    "Readiness": "so the probe fails (connection refused) and the pod is never Ready",
    "Startup": "so the probe fails (connection refused) and the kubelet restarts the container",
}


def _probe_port_findings(container: Node, pod: ObjRef) -> list[Finding]:
    """A probe on a port the container does not declare: it can only ever fail (connection refused)."""
    declared = _PORT.findall(f"{container.get('Port')} {container.get('Ports')}")
    findings = []
    for probe, consequence in _PROBE_CONSEQUENCES.items():
        match = _PROBE_PORT.match(container.get(probe))
        port = (match.group(1) or match.group(2)) if match else ""
        if not declared or not port or port in declared:
            continue
        listens = ", ".join(declared)
        findings.append(
            Finding(
                "probe_port_mismatch",
                f"Pod {pod.name}: the {probe.lower()} probe of container {container.key} checks port {port}, "
                f"but the container listens on port {listens} (its declared port); {consequence}.",
                Severity.CRITICAL if probe != "Readiness" else Severity.WARNING,
                pod.label,
                clip(f"{probe}: {container.get(probe)}; Port: {listens}"),
                84,
                f"Point the {probe.lower()} probe of {container.key} at port {listens}, or make the app "
                f"listen on {port}.",
            )
        )
    return findings


@register
class WorkloadDescribeAnalyzer(Analyzer):
    """Deployments, stateful sets, daemon sets and replica sets (and their pod templates)."""

    name = "k8s_workload_describe"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and bool(
            re.search(r"^\s*\"?Replicas:.*desired", out.text, re.MULTILINE)
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        tree = describe_tree(out.text)
        kind = str(out.params.get("kind") or "deployment")
        obj = ObjRef(kind, tree.get("Name"), tree.get("Namespace"))
        state.fact_set("namespaces").add(obj.namespace)
        findings: list[Finding] = []
        replicas = tree.get("Replicas")
        counts = dict(
            (v, int(n))
            for n, v in re.findall(r"(\d+) (desired|updated|total|available|unavailable)", replicas)
        )
        desired, available = counts.get("desired", 0), counts.get("available", 0)
        if desired and available < desired:
            findings.append(
                Finding(
                    "replicas_unavailable",
                    f"{kind.capitalize()} {obj.name} has {available}/{desired} replicas available "
                    f"({counts.get('unavailable', desired - available)} unavailable).",
                    Severity.CRITICAL if available == 0 else Severity.WARNING,
                    obj.label,
                    f"Replicas: {replicas}",
                    30,
                )
            )
        conditions = out.text
        if "ProgressDeadlineExceeded" in conditions:
            findings.append(
                Finding(
                    "rollout_stuck",
                    f"{kind.capitalize()} {obj.name}: the rollout did not progress "
                    "(ProgressDeadlineExceeded).",
                    Severity.WARNING,
                    obj.label,
                    "ProgressDeadlineExceeded",
                    25,
                )
            )
        for container in _containers(tree, "Containers"):
            findings += _command_findings(container, obj, state)
            for section in ("Requests", "Limits"):
                node = container.child(section)
                for res in node.children if node else []:
                    if "gpu" in res.key.lower():
                        state.fact_dict("gpu_requests")[obj.label] = f"{res.value} {res.key}"
        new_rs = re.search(r"NewReplicaSet:\s+(\S+)", out.text)
        if new_rs and new_rs.group(1) != "<none>":
            state.related.add(new_rs.group(1).lower())
            if desired and available < desired and obj.namespace:
                # The replica set's events say why pods are missing (quota, admission, limits).
                state.lead(ObjRef("replicaset", new_rs.group(1), obj.namespace), "the new replica set", 80)
        if re.search(r"ReplicaFailure\s+True\s+FailedCreate", out.text) and obj.namespace:
            for kind in ("resourcequota", "limitrange"):
                state.lead(ObjRef(kind, "*", obj.namespace), "pods cannot be created: quotas and limits", 78)
        findings += event_findings(parse_events(out.text), obj, state, workload=obj.name)
        if desired and available >= desired and not any(f.is_problem for f in findings):
            findings.append(
                Finding(
                    "workload_available",
                    f"{kind.capitalize()} {obj.name} has all {desired} replicas available.",
                    Severity.INFO,
                    obj.label,
                    f"Replicas: {replicas}",
                    5,
                )
            )
        return findings


@register
class JobDescribeAnalyzer(Analyzer):
    name = "k8s_job_describe"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and "Pods Statuses:" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        tree = describe_tree(out.text)
        obj = ObjRef("job", tree.get("Name"), tree.get("Namespace"))
        state.fact_set("namespaces").add(obj.namespace)
        findings: list[Finding] = []
        statuses = tree.get("Pods Statuses")
        failed = re.search(r"(\d+) Failed", statuses)
        if failed and int(failed.group(1)) > 0:
            findings.append(
                Finding(
                    "job_failed",
                    f"Job {obj.name} has {failed.group(1)} failed pod(s) ({statuses}).",
                    Severity.CRITICAL,
                    obj.label,
                    f"Pods Statuses: {statuses}",
                    35,
                )
            )
        deadline = re.fullmatch(r"(\d+)s?", tree.get("Active Deadline Seconds").strip())
        if deadline:
            state.fact_dict("job_deadlines")[obj.label] = f"{deadline.group(1)} seconds"
        for created in re.findall(r"Created pod: (\S+)", out.text):
            state.lead(ObjRef("pod", created, obj.namespace), f"pod of job {obj.name}", 75)
        for container in _containers(tree, "Containers"):
            findings += _command_findings(container, obj, state)
        findings += event_findings(parse_events(out.text), obj, state, workload=obj.name)
        return findings


@register
class PvcDescribeAnalyzer(Analyzer):
    name = "k8s_pvc_describe"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and "StorageClass:" in out.text and "Containers:" not in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        tree = describe_tree(out.text)
        obj = ObjRef("persistentvolumeclaim", tree.get("Name"), tree.get("Namespace"))
        used_by = tree.get("Used By")
        status = tree.get("Status")
        storage_class = tree.get("StorageClass")
        events = parse_events(out.text)
        findings: list[Finding] = []
        for event in events:
            sc = re.search(r"storageclass[\w.]*\s+\"([^\"]+)\"\s+not found", event.message)
            if event.reason == "ProvisioningFailed" and sc:
                findings.append(_storageclass_missing(obj, sc.group(1), event.message, used_by))
                break
        else:
            findings += event_findings(events, obj, state)
            if status == "Pending" and not findings:
                waiting = any("waiting for first consumer" in e.message for e in events)
                findings.append(
                    Finding(
                        "pvc_pending",
                        f"The PersistentVolumeClaim (PVC) {obj.name} is Pending (not bound; StorageClass "
                        f"{storage_class or 'none'})"
                        + (": it waits for its first consumer pod." if waiting else "."),
                        Severity.INFO if waiting else Severity.WARNING,
                        obj.label,
                        f"Status: {status}",
                        20 if waiting else 60,
                    )
                )
        if used_by and used_by != "<none>":
            state.related.add(used_by.lower())
            if obj.namespace:  # what the pod using the volume says about it (e.g. writes that fail)
                state.lead(ObjRef("pod", used_by, obj.namespace), f"pod using PVC {obj.name}", 80)
        return findings
