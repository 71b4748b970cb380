"""A container whose process is started by a shell that stays PID 1 and does not pass SIGTERM on.

On stop the kubelet sends SIGTERM to the container's PID 1 only, waits ``terminationGracePeriodSeconds``
and then sends SIGKILL. A command like ``/bin/sh -c "render-config && python -m worker"`` makes the
shell PID 1 and the program its child: the shell does not forward the signal (and as PID 1 it has no
default action for it), so the program's SIGTERM handler never runs. The pod stays Terminating for the
whole grace period and is then killed: in-flight work is cut off (unacknowledged messages are
redelivered to other consumers and done twice, requests are dropped). ``exec`` before the program, or an
init such as tini or dumb-init, fixes it. Read from the container's command (a describe or manifest of
the pod or its template), the pod's stop (Terminating for most of its grace period, or an exit 137 that
is no OOM kill), the program's own log (its pid, no shutdown line), and the work redone elsewhere.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.findings import Finding, Severity

_SHELL = rx.compile(r"^(?:/usr)?(?:/bin/)?(sh|bash|ash|dash|zsh)$")
_INIT = rx.compile(r"\b(?:tini|dumb-init|s6-svscan|catatonit|supervisord)\b")
_CONTAINER = rx.compile(r"^\s{2,4}([a-z0-9][a-z0-9-]*):\s*$")
_TERMINATING = rx.compile(r"^Status:\s+Terminating \(lasts (\w+)\)", rx.MULTILINE)
_GRACE = rx.compile(r"Termination Grace Period:\s+(\d+)s")
_DURATION = rx.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_EXIT_137 = rx.compile(r"Reason:\s+Error\s*\n\s+Exit Code:\s+137")
_PID = rx.compile(r"\(pid[=:\s]+(\d+)\)|\bpid[=:]\s*(\d+)", rx.IGNORECASE)
_STOPPING = rx.compile(
    r"(?:received|got|caught|handling)\s+(?:signal\s+)?(?:SIGTERM|SIGINT|terminated)|shutting down|"
    r"graceful(?:ly)?\s+(?:shut|stop)|stopping consum|drain(?:ing|ed)\b",
    rx.IGNORECASE,
)
_REDONE = rx.compile(
    r"redeliver(?:ed)?\s*[=:]\s*true|\bredelivered (?:message|from)|delivery[_-]?count[=:]\s*[2-9]",
    rx.IGNORECASE,
)
_KEY = "shell_pid1"


def _seconds(value: str) -> int:
    match = _DURATION.match(value)
    return sum(int(g or 0) * f for g, f in zip(match.groups(), (3600, 60, 1), strict=True)) if match else 0


def _wrapper(args: list[str]) -> tuple[str, str] | None:
    """(shell, program) when ``args`` run a program as a child of ``sh -c`` (no exec, no init)."""
    if len(args) < 3 or not _SHELL.match(args[0]) or not rx.match(r"^-\w*c\w*$", args[1]):
        return None
    script = " ".join(args[2:])
    if _INIT.search(script):
        return None
    last = rx.split(r"&&|\|\||;|\n", script)[-1].strip()
    if last.startswith("exec ") or last == script.strip():
        return None  # exec replaces the shell; a single simple command is exec'd by sh and bash
    return args[0], last.split()[0] if last.split() else ""


def _commands(text: str) -> dict[str, list[str]]:
    """container -> its command and arguments, from a describe or a manifest."""
    obj = manifest_of(text)
    found: dict[str, list[str]] = {}
    if obj is not None:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        template = spec.get("template") if isinstance(spec.get("template"), dict) else None
        pod_spec: Any = (template or {}).get("spec") if template else spec
        for container in (pod_spec or {}).get("containers") or []:
            if isinstance(container, dict):
                argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
                found[str(container.get("name") or "")] = argv
        return found
    lines = text.splitlines()
    container = ""
    for i, line in enumerate(lines):
        if named := _CONTAINER.match(line):
            container = named.group(1)
        stripped = line.strip()
        if not stripped.startswith("Command:"):
            continue
        inline = stripped[len("Command:") :].split(None, 2)
        if inline:  # "Command:  sh -c script" on one line
            found[container] = inline
            continue
        depth = len(line) - len(line.lstrip())
        argv = []
        for arg in lines[i + 1 :]:
            if not arg.strip() or len(arg) - len(arg.lstrip()) <= depth:
                break
            argv.append(arg.strip())
        found[container] = argv
    return found


@register
class ShellPidOneAnalyzer(Analyzer):
    name = "shell_pid1_no_sigterm"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict(_KEY)
        text = out.text
        pod = str(out.params.get("pod_name") or out.params.get("name") or "")
        if out.is_log:
            if pid := _PID.search(text):
                facts.setdefault("pids", {})[pod] = next(g for g in pid.groups() if g)
            facts.setdefault("stopping", {})[pod] = bool(_STOPPING.search(text))
            redone = [ln.strip() for ln in text.splitlines() if _REDONE.search(ln)]
            if redone:
                facts.setdefault("redone", {})[pod] = redone
            return self._findings(facts)
        if "ommand" not in text and "Terminating" not in text:
            return self._findings(facts)
        for container, argv in _commands(text).items():
            if wrapped := _wrapper(argv):
                facts.setdefault("wrappers", {})[workload_of(pod) if pod else container] = (
                    container,
                    *wrapped,
                )
        grace = _GRACE.search(text)
        if (lasting := _TERMINATING.search(text)) and grace:
            waited, limit = _seconds(lasting.group(1)), int(grace.group(1))
            if waited * 2 >= limit:
                facts.setdefault("stuck", {})[pod] = (lasting.group(1), limit)
        elif _EXIT_137.search(text) and grace:
            facts.setdefault("stuck", {})[pod] = ("", int(grace.group(1)))
        return self._findings(facts)

    @staticmethod
    def _findings(facts: dict[str, Any]) -> list[Finding]:
        wrappers: dict[str, tuple[str, str, str]] = facts.get("wrappers") or {}
        found: list[Finding] = []
        for pod, (lasting, grace) in sorted((facts.get("stuck") or {}).items()):
            workload = workload_of(pod)
            if workload not in wrappers or workload in facts.setdefault("reported", set()):
                continue
            facts["reported"].add(workload)
            container, shell, program = wrappers[workload]
            pid = (facts.get("pids") or {}).get(pod)
            child = f" (the {program} process logs pid {pid})" if pid and pid != "1" else ""
            quiet = (
                "; its log shows no shutdown after the stop"
                if (facts.get("stopping") or {}).get(pod) is False
                else ""
            )
            stop = (
                f"pod {pod} stays Terminating for the whole {grace}s grace period ({lasting} so far)"
                if lasting
                else f"pod {pod} ran out its {grace}s grace period and exited 137"
            )
            found.append(
                Finding(
                    _KEY,
                    f"The {container} container starts its {program} process through {shell} -c, so the "
                    f"shell is PID 1{child} and does not pass SIGTERM on: the {program} process never drains"
                    f"{quiet}, {stop} and is then killed with SIGKILL.",
                    Severity.CRITICAL,
                    f"pod/{pod}",
                    f"Command: {shell} -c …; Terminating {lasting or 'exit 137'} of {grace}s",
                    91,
                    f"Start the program with exec ({shell} -c '… && exec {program} …') or run an init "
                    "such as tini (or dumb-init) as PID 1, so SIGTERM reaches it.",
                )
            )
            facts.setdefault("stuck_pod", {})[workload] = pod
        for workload, pod in sorted((facts.get("stuck_pod") or {}).items()):
            if workload not in facts.setdefault("redone_reported", set()) and (
                more := _redone(facts, workload, pod)
            ):
                facts["redone_reported"].add(workload)
                found += more
        return found


def _redone(facts: dict[str, Any], workload: str, stuck: str) -> list[Finding]:
    """The work the killed pods had taken, done again by the other pods of the workload."""
    others = {p: lines for p, lines in (facts.get("redone") or {}).items() if workload_of(p) == workload}
    if not others:
        return []
    pod, lines = next(iter(sorted(others.items())))
    done = next((ln for ln in lines if "sent" in ln.lower() or "done" in ln.lower()), "")
    quoted = "; ".join(f"'{clip(ln, 110)}'" for ln in dict.fromkeys([lines[0], done]) if ln)
    return [
        Finding(
            f"{_KEY}_redelivered",
            f"The messages the killed workers of {workload} had taken are redelivered to the new pods "
            f"(redelivered=true: {sum(len(v) for v in others.values())} lines in {pod}'s log, {quoted}): "
            f"the work {stuck} had taken is done again (sent twice where the killed worker had already "
            "sent it).",
            Severity.WARNING,
            f"pod/{pod}",
            clip(lines[0]),
            75,
        )
    ]
