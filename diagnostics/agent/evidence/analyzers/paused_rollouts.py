"""A controller told to stop acting: a paused Deployment or Argo Rollout, a suspended Flux object, a
paused KEDA ScaledObject.

``kubectl rollout pause`` sets ``spec.paused: true``: the Deployment controller still keeps the replicas
of its current ReplicaSet, but makes no new ReplicaSet for a changed template, so a new image (``kubectl
set image``, a GitOps sync) is accepted by the API and never reaches a pod. Its ``Progressing`` condition
turns ``Unknown`` with reason ``DeploymentPaused``; ``NewReplicaSet: <none>``. A pause left behind after an
incident or a canary is the classic. Flux's ``spec.suspend: true`` stops reconciling (a condition reason
``Suspended`` or nothing at all), an Argo Rollout's ``spec.paused`` / ``status.pauseConditions`` holds its
steps, KEDA's ``autoscaling.keda.sh/paused`` annotation freezes scaling. Read from the describe (the
condition, the ReplicaSets, the template's image) and the manifest (the field, the condition's time).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    looks_like_describe,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, still_waiting
from diagnostics.agent.findings import Finding, Severity

_PAUSED_ROW = rx.compile(r"^\s+Progressing\s+Unknown\s+DeploymentPaused", rx.MULTILINE)
_IMAGE = rx.compile(r"^\s+Image:\s+(\S+)", rx.MULTILINE)
_OLD_RS = rx.compile(r"^OldReplicaSets:\s+([\w.-]+) \((\d+)/(\d+) replicas created\)", rx.MULTILINE)
_FIELDS = {"Deployment": "paused", "Rollout": "paused", "ScaledObject": "", "CronJob": ""}
# Reads the finding waits for the other of describe and manifest.
_WAIT = 2


def _since(value: str) -> str:
    match = rx.match(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})", value)
    return f" since {match.group(1)} {match.group(2)}" if match else ""


def _part(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


@register
class PausedRolloutAnalyzer(Analyzer):
    name = "paused_rollout"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("paused")
        for item in facts.values():
            if isinstance(item, dict):
                note_wait(item, out)
        text = out.text
        if looks_like_describe(text) and _PAUSED_ROW.search(text):
            key = f"Deployment/{field_value(text, 'Namespace')}/{field_value(text, 'Name')}"
            item = facts.setdefault(key, {})
            item["described"] = True
            item["new_rs"] = field_value(text, "NewReplicaSet")
            if image := _IMAGE.search(text):
                item["image"] = image.group(1)
            if old := _OLD_RS.search(text):
                item["old_rs"], item["old_pods"] = old.group(1), old.group(3)
        elif (obj := manifest_of(text)) is not None:
            self._manifest(obj, facts)
        return self._findings(facts)

    @staticmethod
    def _manifest(obj: dict[str, Any], facts: dict[str, Any]) -> None:
        meta, spec, status = (_part(obj, k) for k in ("metadata", "spec", "status"))
        assert isinstance(meta, dict) and isinstance(spec, dict) and isinstance(status, dict)
        kind = str(obj.get("kind"))
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
        assert isinstance(annotations, dict)
        how = ""
        if kind in ("Deployment", "Rollout") and spec.get("paused") is True:
            how = "spec.paused"
        elif (
            spec.get("suspend") is True
            and kind not in ("CronJob", "Job")
            and "fluxcd" in str(obj.get("apiVersion"))
        ):
            how = "spec.suspend"
        elif str(annotations.get("autoscaling.keda.sh/paused", "")).lower() == "true":
            how = "the autoscaling.keda.sh/paused annotation"
        if not how:
            return
        key = f"{kind}/{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        item = facts.setdefault(key, {})
        item["how"] = how
        for condition in status.get("conditions") or []:
            if isinstance(condition, dict) and str(condition.get("reason")) in (
                "DeploymentPaused",
                "Suspended",
                "RolloutPaused",
            ):
                item["since"] = _since(str(condition.get("lastTransitionTime") or ""))
                item["reason"] = f"{condition.get('type')} condition {condition.get('reason')}"
        if kind in ("Deployment", "Rollout"):
            template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
            assert isinstance(template, dict)
            pod = template.get("spec") if isinstance(template.get("spec"), dict) else {}
            images = [c.get("image") for c in (pod or {}).get("containers") or [] if isinstance(c, dict)]
            if images and images[0]:
                item.setdefault("image", str(images[0]))

    @staticmethod
    def _findings(facts: dict[str, Any]) -> list[Finding]:
        findings: list[Finding] = []
        for key, item in facts.items():
            if not isinstance(item, dict) or item.get("reported"):
                continue
            both = item.get("described") and item.get("how")
            if not both and still_waiting(item, _WAIT):
                continue
            item["reported"] = True
            kind, namespace, name = key.split("/", 2)
            how = ", ".join(
                p
                for p in (
                    item.get("how"),
                    item.get("reason")
                    or ("Progressing condition DeploymentPaused" if item.get("described") else ""),
                )
                if p
            )
            state = f"is paused ({how}{item.get('since', '')})"
            if kind == "Deployment":
                effect = "changes to its template are not rolled out"
                if item.get("image") and item.get("new_rs") == "<none>":
                    effect = (
                        f"its template's new image {item['image']} was never rolled out, "
                        "no new ReplicaSet exists"
                    )
                if item.get("old_rs"):
                    old_rs = f"the old ReplicaSet {item['old_rs']}"
                    effect += f" and the {item['old_pods']} pods of {old_rs} keep running"
                fix = f"kubectl rollout resume deployment/{name} -n {namespace} (and find who paused it)."
            else:
                effect = "it does not act on changes until it is resumed"
                fix = f"Resume the {kind} (unset {item.get('how', 'its pause')})."
            findings.append(
                Finding(
                    "paused_rollout",
                    f"The {kind} {name} {state}: {effect}.",
                    Severity.CRITICAL,
                    f"{kind.lower()}/{namespace}/{name}",
                    how,
                    89,
                    fix,
                )
            )
        return findings
