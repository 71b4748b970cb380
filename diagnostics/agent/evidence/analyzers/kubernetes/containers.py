"""The containers of a ``kubectl describe`` (a pod's, or a workload's pod template): their commands (an
explicit ``exit N``, the URLs they call), what an exit code means, probes on undeclared ports, and the
workload a pod belongs to."""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import EXIT_CODE_MEANINGS, AnalysisState, Node, clip
from diagnostics.agent.findings import Finding, ObjRef, Remedy, Severity

_URL = rx.compile(r"https?://[^\s'\";]+")
_EXPLICIT_EXIT = rx.compile(r"(?:^|[;&|]\s*|\bthen\s+|\s)exit\s+([1-9]\d*)\b")
_HASH_SUFFIX = rx.compile(r"-[a-f0-9]{6,10}-[a-z0-9]{5}$|-[a-z0-9]{5}$")
# "http-get http://:8081/healthz delay=..." / "tcp-socket :5432 delay=..." (kubectl describe's probe lines)
_PROBE_PORT = rx.compile(r"^(?:http-get\s+https?://[^:/\s]*:(\d+)|tcp-socket\s+[^:\s]*:(\d+))")
_PORT = rx.compile(r"\b(\d+)/(?:TCP|UDP|SCTP)\b")


def workload_of(pod: str, controlled_by: str = "") -> str:
    """The owning workload's name: ``ReplicaSet/web-5d98ffcfd`` -> ``web``; else the pod name's stem."""
    if controlled_by:
        owner = controlled_by.split("/", 1)[-1]
        return rx.sub(r"-[a-f0-9]{6,10}$", "", owner) if controlled_by.startswith("ReplicaSet/") else owner
    return _HASH_SUFFIX.sub("", pod)


def containers_of(tree: Node, section: str) -> list[Node]:
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


def exit_meaning(code: str) -> str:
    try:
        meaning = EXIT_CODE_MEANINGS.get(int(code), "")
    except ValueError:
        return ""
    return f" — {meaning}" if meaning else ""


def command_findings(container: Node, obj: ObjRef, state: AnalysisState) -> list[Finding]:
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
            f"{exit_meaning(code)}; the container crashes on every start.",
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


_PROBE_CONSEQUENCES = {
    "Liveness": "so the probe fails (connection refused) and the kubelet restarts the container",
    "Readiness": "so the probe fails (connection refused) and the pod is never Ready",
    "Startup": "so the probe fails (connection refused) and the kubelet restarts the container",
}


def probe_port_findings(container: Node, pod: ObjRef) -> list[Finding]:
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
