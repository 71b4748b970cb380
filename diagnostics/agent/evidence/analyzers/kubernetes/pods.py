"""``kubectl describe pod`` -> OOM kills, crash loops, image pulls, failed containers, restarts, bad
commands and probes, or a healthy pod."""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
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
from diagnostics.agent.evidence.analyzers.events import event_findings
from diagnostics.agent.evidence.analyzers.kubernetes.containers import (
    command_findings,
    containers_of,
    exit_meaning,
    probe_port_findings,
    workload_of,
)
from diagnostics.agent.findings import Finding, ObjRef, Remedy, Severity


def _is_pod_describe(text: str) -> bool:
    return (
        looks_like_describe(text)
        and "Containers:" in text
        and not rx.search(r"^Replicas:.*desired", text, rx.MULTILINE)
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
        for container in containers_of(tree, "Init Containers") + containers_of(tree, "Containers"):
            found = self._container(container, pod, workload, state)
            findings += found
            state_node = container.child("State")
            if any(f.is_problem for f in found) or not state_node or state_node.value != "Running":
                healthy = False
            if container.get("Ready") == "False":
                healthy = False
        findings += _one_container_holds_the_pod(containers_of(tree, "Containers"), pod)
        node = tree.get("Node").split("/", 1)[0]
        if node and node != "<none>" and any(f.kind == "oom_killed" for f in findings):
            # An OOM kill is the container's limit or the node's memory: the node's events tell which.
            state.lead(ObjRef("node", node), f"the node of OOM-killed pod {pod.name}", 74)
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
        if not healthy and not any(f.is_problem for f in findings):
            findings += _not_ready(tree, pod)
        if (
            healthy
            and not any(f.is_problem for f in findings)
            and not any(e.type == "Warning" for e in events)
        ):
            restarts = sum(int(c.get("Restart Count") or 0) for c in containers_of(tree, "Containers"))
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
                meaning = exit_meaning(last_code)
                exit_part = f"; its last run ended with {last_reason} (exit code {last_code}{meaning})"
                if last_reason == "Completed" and last_code == "0":
                    # Exit code 0 is success; the pods of a Deployment (ReplicaSet), StatefulSet or
                    # DaemonSet have restartPolicy Always, so a process that finishes is started again.
                    exit_part += (
                        " — the process finished its work and exited successfully, but the pods of "
                        f"{workload or 'this workload'} always restart their containers (restartPolicy "
                        "Always): a task that runs once belongs in a Job, not a Deployment or another "
                        "long-running workload"
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
                    f"(exit code {code}{exit_meaning(code)}).",
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
                    f"{last_code}{exit_meaning(last_code)}).",
                    Severity.WARNING,
                    pod.label,
                    f"Restart Count: {restarts}",
                    35,
                )
            )
        findings += command_findings(c, pod, state)
        if current == "Running":
            # A container that is not running refuses every probe: its crash says why, not the port.
            findings += probe_port_findings(c, pod)
        return findings


def _one_container_holds_the_pod(containers: list[Node], pod: ObjRef) -> list[Finding]:
    """A pod is Ready only when every container is: one failing container (a sidecar beside the app)
    keeps the whole pod out of its Services while the others run."""
    running = [c.key for c in containers if c.get("Ready") == "True"]
    failing = [c for c in containers if c.get("Ready") == "False"]
    if not running or len(failing) != 1:
        return []
    bad = failing[0]
    role = "a sidecar beside" if bad is not containers[0] else "beside"
    state_node = bad.child("State")
    why = state_node.get("Reason") if state_node else ""
    return [
        Finding(
            "container_blocks_pod",
            f"Pod {pod.name} is never Ready because one of its containers, {bad.key} ({role} "
            f"{', '.join(running)}), is not ready{f' ({why})' if why else ''}: a pod is Ready only when all "
            f"its containers are, so although {', '.join(running)} runs, the pod gets no traffic.",
            Severity.CRITICAL,
            pod.label,
            f"{bad.key}: Ready False{f', {why}' if why else ''}; {', '.join(running)}: Ready True",
            58,
            f"Fix container {bad.key} (its logs say why it fails).",
        )
    ]


def _not_ready(tree: Node, pod: ObjRef) -> list[Finding]:
    """A pod that is not Running and Ready while no finding says why: what its conditions and containers
    say (Kubernetes' own semantics: an init container must complete before the app containers start)."""
    conditions = tree.child("Conditions")
    false = [
        c.value.split()[0]
        for c in (conditions.children if conditions is not None else [])
        if len(c.value.split()) >= 2 and c.value.split()[1] == "False"
    ]
    for init in containers_of(tree, "Init Containers"):
        state = init.child("State")
        if state is None or (state.value == "Terminated" and state.get("Reason") == "Completed"):
            continue
        command_node = init.child("Command")
        command = " ".join(t.value for t in command_node.children) if command_node is not None else ""
        since = f" since {state.get('Started')}" if state.get("Started") else ""
        return [
            Finding(
                "init_incomplete",
                f"Pod {pod.name} is stuck initializing: init container {init.key} is {state.value}{since} "
                f"and has not completed, so the main containers never start"
                + (f" (it runs: {clip(command, 120)})" if command else "")
                + "; its logs say what it waits for.",
                Severity.CRITICAL,
                pod.label,
                f"Init container {init.key}: State {state.value}; conditions False: {', '.join(false)}",
                62,
                f"Make what init container {init.key} waits for available, or fix its command.",
            )
        ]
    waiting: list[str] = []
    for c in containers_of(tree, "Containers"):
        if c.get("Ready") == "True":
            continue
        node = c.child("State")
        reason = node.get("Reason") if node is not None else ""
        waiting.append(
            f"{c.key} is {node.value if node is not None else 'unknown'}" + (f" ({reason})" if reason else "")
        )
    if not false and not waiting:
        return []
    return [
        Finding(
            "pod_not_ready",
            f"Pod {pod.name} is not ready (conditions False: {', '.join(false) or 'none'}; "
            f"{'; '.join(waiting) or 'its containers report ready'}), and no event or status says why: "
            "read its logs and its probes.",
            Severity.WARNING,
            pod.label,
            f"Status: {tree.get('Status')}; conditions False: {', '.join(false)}",
            35,
        )
    ]
