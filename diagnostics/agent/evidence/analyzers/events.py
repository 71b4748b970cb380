"""Kubernetes events -> findings: scheduling, image pulls, probes, mounts, config, jobs, storage.

Used by every analyzer that sees events (describe, ``kubectl events``, lineage trees), and as an
analyzer of its own for outputs that are only events.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import event_causes, warning_events
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    Event,
    ToolOutput,
    clip,
    looks_like_describe,
    parse_events,
    register,
)
from diagnostics.agent.evidence.analyzers.scheduling import explain_unschedulable
from diagnostics.agent.findings import Finding, ObjRef, Remedy, Severity

_PULL = rx.compile(r"Failed to pull image \"?([^\":\s]+(?::[^\"\s]+)?)\"?:?\s*(.*)", rx.IGNORECASE)
_NOT_FOUND_REF = rx.compile(
    r"(configmap|secret|serviceaccount|persistentvolumeclaim|storageclass)s?"
    r"(?:\.[\w.]+)?\s+\"([^\"]+)\"\s+not found",
    rx.IGNORECASE,
)
# The kubelet's eviction message: "The node was low on resource: R. ... Container C was using U, request is Q"
_EVICTED_USAGE = rx.compile(
    r"low on resource: ([\w.-]+)\..*?Container ([\w.-]+) was using ([\w.]+), request is ([\w.]+)"
)
_MISSING_KEY = rx.compile(r"couldn't find key (\S+) in (ConfigMap|Secret) ([\w./-]+)")


def _pull_reason(message: str) -> str:
    lowered = message.lower()
    if event_causes.pull_unauthorized(message):
        return "the registry answers 401 Unauthorized: the pull sent no (or wrong) credentials"
    if "pull access denied" in lowered or "repository does not exist" in lowered:
        return "the repository does not exist or requires authorization (pull access denied)"
    if "manifest unknown" in lowered or "not found" in lowered:
        return "the image or tag does not exist (not found)"
    if "unauthorized" in lowered or "authentication required" in lowered:
        return "the registry refused the credentials (unauthorized)"
    if "no such host" in lowered or "i/o timeout" in lowered:
        return "the registry cannot be reached"
    if "toomanyrequests" in lowered or "rate limit" in lowered:
        return "the registry rate limit was hit"
    return clip(message, 160)


def event_findings(
    events: list[Event],
    obj: ObjRef,
    state: AnalysisState,
    *,
    selectors: str = "",
    tolerations: str = "",
    workload: str = "",
) -> list[Finding]:
    findings: list[Finding] = []
    reasons = {e.reason for e in events}
    target = workload or obj.name
    who = f"{obj.kind.capitalize() if obj.kind else 'Object'} {obj.name}"
    for event in events:
        if event.type != "Warning":
            continue
        message = event.message
        if event.reason == "FailedScheduling":
            kind, why, fix, rank = explain_unschedulable(message, selectors, tolerations)
            if kind == "node_selector_mismatch" and selectors and selectors != "<none>":
                state.fact_dict("required_selectors")[obj.label] = selectors
                state.lead(ObjRef("node", "*"), "compare the node labels with the pod's node selector", 80)
            findings.append(
                Finding(
                    kind,
                    f"{who} is Pending (cannot be scheduled): {why}.",
                    Severity.CRITICAL,
                    obj.label,
                    clip(f"FailedScheduling: {message}"),
                    rank,
                    fix[:1].upper() + fix[1:] + "." if fix else "",
                )
            )
        elif event.reason in ("Failed", "ErrImagePull") and (match := _PULL.search(message)):
            image, detail = match.group(1), match.group(2)
            findings.append(
                Finding(
                    "image_pull",
                    f"{who} fails pulling the image {image}: {_pull_reason(detail)}"
                    + (
                        event_causes.pull_secrets_note(state, obj)
                        if event_causes.pull_unauthorized(detail)
                        else ""
                    )
                    + " (ErrImagePull / ImagePullBackOff).",
                    Severity.CRITICAL,
                    obj.label,
                    clip(message),
                    90,
                    f"Use an image that exists ({image} cannot be pulled) or add imagePullSecrets for a "
                    "private "
                    "registry.",
                    Remedy(
                        ("rollback", "rollout_undo"), target, {}, "roll back to the last image that worked"
                    ),
                )
            )
        elif event.reason in ("Failed", "FailedMount", "FailedCreate") and (
            ref := _NOT_FOUND_REF.search(message)
        ):
            ref_kind, ref_name = ref.group(1).lower(), ref.group(2)
            superseded = event.reason == "FailedCreate" and "SuccessfulCreate" in reasons
            if superseded:
                findings.append(
                    Finding(
                        "superseded_failure",
                        f"{who}: an earlier attempt failed because {ref_kind} {ref_name} was "
                        "not found, but a later attempt succeeded (this is history, not the current cause).",
                        Severity.INFO,
                        obj.label,
                        clip(message),
                        10,
                    )
                )
                continue
            findings.append(
                Finding(
                    "missing_reference",
                    event_causes.missing_ref_summary(who, event.reason, ref_kind, ref_name, message),
                    Severity.CRITICAL,
                    obj.label,
                    clip(message),
                    88,
                    f"Create {event_causes.kind_name(ref_kind)} {ref_name} or fix the reference to it.",
                )
            )
        elif event.reason == "FailedCreate" and (hook := event_causes.webhook_finding(who, obj, message)):
            findings.append(hook)
        elif (
            event.reason == "FailedCreate"
            and "forbidden" in message.lower()
            and "exceeded quota" not in message.lower()  # resources.py reads the quota's own numbers
        ):
            # The API server's admission refused the pods (a LimitRange, a ResourceQuota, Pod Security):
            # no pod exists to fail, so this message is the whole cause.
            why = message.split("forbidden:", 1)[-1].strip() if "forbidden:" in message else message
            findings.append(
                Finding(
                    "create_forbidden",
                    f"{who} cannot create pods: the API server forbids them ({clip(why, 200)}), so no pod "
                    "of it runs.",
                    Severity.CRITICAL,
                    obj.label,
                    clip(message),
                    87,
                    "Make the pod template satisfy the namespace's policy (LimitRange, ResourceQuota, Pod "
                    "Security) or change the policy.",
                )
            )
        elif hooked := event_causes.lifecycle_hook_finding(who, obj, event.reason, message):
            findings.append(hooked)
        elif event.reason == "FailedAttachVolume" and (
            attach := event_causes.multi_attach_finding(who, obj, message, state)
        ):
            findings.append(attach)
        elif (key := _MISSING_KEY.search(message)) is not None:
            findings.append(
                Finding(
                    "missing_config_key",
                    f"{who}: key {key.group(1)} is missing from {key.group(2)} {key.group(3)}; the "
                    "container's environment references it, so the container cannot start "
                    "(CreateContainerConfigError).",
                    Severity.CRITICAL,
                    obj.label,
                    clip(message),
                    88,
                    f"Add the key {key.group(1)} to {key.group(2)} {key.group(3)}.",
                )
            )
        elif event.reason == "Unhealthy" and "probe failed" in message.lower():
            probe = (
                "liveness"
                if "liveness" in message.lower()
                else ("readiness" if "readiness" in message.lower() else "startup")
            )
            findings.append(
                Finding(
                    "probe_failed",
                    f"{who}: the {probe} probe is failing ({clip(message, 160)}).",
                    Severity.WARNING if probe == "readiness" else Severity.CRITICAL,
                    obj.label,
                    clip(message),
                    70 if probe == "liveness" else 60,
                    "Check the endpoint the probe calls, or relax the probe's thresholds if the app starts "
                    "slowly.",
                )
            )
        elif event.reason == "ProvisioningFailed":
            sc = rx.search(r"storageclass[\w.]*\s+\"([^\"]+)\"\s+not found", message)
            if sc:
                findings.append(_storageclass_missing(obj, sc.group(1), message))
            else:
                findings.append(
                    Finding(
                        "provisioning_failed",
                        f"{who}: volume provisioning fails: {clip(message)}.",
                        Severity.CRITICAL,
                        obj.label,
                        clip(message),
                        80,
                    )
                )
        elif event.reason == "DeadlineExceeded":  # a Job's (or a pod's) activeDeadlineSeconds ran out
            deadline = state.fact_dict("job_deadlines").get(obj.label, "")
            findings.append(
                Finding(
                    "job_deadline_exceeded",
                    f"{who} failed with DeadlineExceeded: it ran longer than its activeDeadlineSeconds"
                    + (f" of {deadline}" if deadline else "")
                    + ", so Kubernetes stopped its pods while they were still running.",
                    Severity.CRITICAL,
                    obj.label,
                    clip(message),
                    72,
                    "Raise spec.activeDeadlineSeconds to the job's real run time, or make each run do less "
                    "(smaller or incremental batches).",
                )
            )
        elif event.reason == "BackoffLimitExceeded":
            findings.append(
                Finding(
                    "job_failed",
                    f"{who} failed: it reached its backoff limit (its pods failed).",
                    Severity.CRITICAL,
                    obj.label,
                    clip(message),
                    40,
                )
            )
        elif event.reason == "Evicted":
            usage = _EVICTED_USAGE.search(message)
            why = (
                f"the node was low on {usage.group(1)}, and container {usage.group(2)} was using "
                f"{usage.group(3)} of {usage.group(1)}, more than its request of {usage.group(4)}"
                if usage
                else clip(message, 160)
            )
            findings.append(
                Finding(
                    "evicted",
                    f"{who} was evicted: {why}.",
                    Severity.WARNING,
                    obj.label,
                    clip(message),
                    65,
                )
            )
        elif event.reason == "OOMKilling":
            findings.append(
                Finding(
                    "oom_killed",
                    f"{who}: the kernel killed a process for running out of memory "
                    f"(OOM killed): {clip(message, 160)}.",
                    Severity.CRITICAL,
                    obj.label,
                    clip(message),
                    85,
                )
            )
        elif event.reason == "FailedCreatePodSandBox":
            findings.append(event_causes.sandbox_finding(who, obj, message, state))
        elif (unexplained := warning_events.explain(who, obj, event, state)) is not None:
            findings.append(unexplained)
    return findings


def _storageclass_missing(obj: ObjRef, storage_class: str, message: str, used_by: str = "") -> Finding:
    users = f"; the pods that use it ({used_by}) cannot be scheduled and are not running" if used_by else ""
    return Finding(
        "storageclass_missing",
        f"The PersistentVolumeClaim (PVC) {obj.name} is misconfigured: it is Pending and cannot bind because "
        f'its StorageClass "{storage_class}" does not exist (ProvisioningFailed: storageclass '
        f'"{storage_class}" not found){users}.',
        Severity.CRITICAL,
        obj.label,
        clip(message),
        95,
        f"Point the PVC at an existing StorageClass (kubectl get storageclass) or create the StorageClass "
        f'"{storage_class}"; the PVC must be recreated to change its class.',
    )


@register
class EventsAnalyzer(Analyzer):
    """Outputs that are only events (kubectl events, lineage trees); describes have their own analyzers."""

    name = "k8s_events"

    def applies(self, out: ToolOutput) -> bool:
        return not looks_like_describe(out.text) and ("Warning" in out.text or "Event/" in out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        events = parse_events(out.text)
        if not events:
            return []
        kind = str(out.params.get("resource_type") or out.params.get("kind") or "")
        name = str(
            out.params.get("resource_name") or out.params.get("name") or out.params.get("pod_name") or ""
        )
        namespace = str(out.params.get("namespace") or "")
        if name or not any(e.obj for e in events):
            return event_findings(events, ObjRef(kind, name, namespace), state)
        # A namespace's event listing: each event is about the object in its OBJECT column.
        findings: list[Finding] = []
        for about in dict.fromkeys(e.obj for e in events if e.obj):
            obj_kind, _, obj_name = about.rpartition("/")
            same = [e for e in events if e.obj == about]
            findings += event_findings(same, ObjRef(obj_kind or "pod", obj_name, namespace), state)
        return findings


_ALERT_EVENT = rx.compile(r"\d+/\d+ nodes are available:[^\"\]\n]*")


@register
class AlertEvidenceAnalyzer(Analyzer):
    """Event messages quoted in an alert's evidence (scheduling failures, image pulls, OOM kills)."""

    name = "alert_evidence"

    def applies(self, out: ToolOutput) -> bool:
        return out.tool == "alert"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        subject = state.alert.subject
        obj = ObjRef(subject.kind or "pod", subject.name or "the subject", subject.namespace)
        who = f"{obj.kind.capitalize()} {obj.name}"
        findings: list[Finding] = []
        match = _ALERT_EVENT.search(out.text)
        if match:
            kind, why, fix, rank = explain_unschedulable(match.group(0), "", "")
            findings.append(
                Finding(
                    kind,
                    f"{who} has pods that cannot be scheduled (per the alert): {why}.",
                    Severity.CRITICAL,
                    obj.label,
                    clip(match.group(0)),
                    rank,
                    fix[:1].upper() + fix[1:] + "." if fix else "",
                )
            )
        pull = _PULL.search(out.text)
        if pull:
            findings.append(
                Finding(
                    "image_pull",
                    f"{who} fails pulling the image {pull.group(1)} (per the alert): "
                    f"{_pull_reason(pull.group(2))}.",
                    Severity.CRITICAL,
                    obj.label,
                    clip(pull.group(0)),
                    88,
                    f"Use an image that exists ({pull.group(1)} cannot be pulled) or add imagePullSecrets.",
                )
            )
        if rx.search(r"\bOOMKilled\b|out of memory", out.text, rx.IGNORECASE):
            findings.append(
                Finding(
                    "oom_killed",
                    f"{who} was OOMKilled — killed for running out of memory (per the alert).",
                    Severity.CRITICAL,
                    obj.label,
                    "OOMKilled",
                    80,
                )
            )
        return findings
