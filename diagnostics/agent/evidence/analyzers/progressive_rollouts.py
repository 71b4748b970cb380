"""A progressive rollout its own analysis aborted: the new version was tried on a canary and judged bad.

Argo Rollouts runs a canary (or blue-green) update in steps; an ``analysis`` step starts an AnalysisRun
whose metrics (a Prometheus query, a web check) are measured every interval against a
``successCondition``. More failed measurements than the metric's ``failureLimit`` fail the run, and the
Rollout aborts the update: ``status.abort: true``, phase ``Degraded``, the Progressing condition
``RolloutAborted``, the canary ReplicaSet scaled to 0 and all traffic kept on ``status.stableRS``. Nothing
is broken in the cluster: the release did not go out because its canary measured worse than allowed.
(Flagger says the same in a Canary's status: phase ``Failed``, "Canary analysis failed".)

Read from the namespace's events (a ``rollout/<name>`` RolloutAborted or AnalysisRunFailed names both),
the Rollout's and the AnalysisRun's manifests (``-o yaml``/``-o json``), and the ReplicaSets' listing
(the image of each pod-template hash).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    parse_events,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.once import OnceAnalyzer, wait_for_more
from diagnostics.agent.findings import Finding, ObjRef, Severity

_RUN_NAME = rx.compile(r"Analysis ?Run '([\w.\-]+)'")
_REVISION = rx.compile(r"update to revision (\d+)")


def _part(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


@register
class ProgressiveRolloutAnalyzer(OnceAnalyzer):
    name = "progressive_rollouts"

    def applies(self, out: ToolOutput) -> bool:
        return not out.is_log

    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        for event in parse_events(out.text):
            kind, _, name = event.obj.partition("/")
            if kind.lower() == "rollout" and event.reason in ("RolloutAborted", "AnalysisRunFailed"):
                state.lead(ObjRef("rollout", name, namespace), "a rollout that aborted its update", 88)
                state.lead(ObjRef("replicaset", "*", namespace), "the images of its revisions", 80)
                if run := _RUN_NAME.search(event.message):
                    state.lead(ObjRef("analysisrun", run.group(1), namespace), "why it aborted", 86)
        table = parse_table(out.text)
        if table is not None and "IMAGES" in table.header:
            facts.setdefault("images", {}).update({r[0]: table.column(r, "IMAGES") for r in table.rows if r})
        manifest = manifest_of(out.text)
        if manifest is not None:
            self._manifest(manifest, facts, state, namespace)

    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        rollout = facts.get("rollout")
        if not rollout:
            return []
        if (not facts.get("run") or not facts.get("images")) and wait_for_more(facts, 10):
            return []  # the AnalysisRun and the ReplicaSets, read next
        return [_finding(rollout, facts.get("run") or {}, facts.get("images") or {})]

    @staticmethod
    def _manifest(obj: dict[str, Any], facts: dict[str, Any], state: AnalysisState, namespace: str) -> None:
        meta, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
        name, kind = str(meta.get("name") or ""), str(obj.get("kind"))
        namespace = str(meta.get("namespace") or namespace)
        if kind == "Rollout" and (status.get("abort") or status.get("phase") == "Degraded"):
            containers = _part(_part(spec, "template"), "spec").get("containers") or []
            run = _part(_part(status, "canary"), "currentStepAnalysisRunStatus")
            weights = _part(_part(status, "canary"), "weights")
            facts["rollout"] = {
                "name": name,
                "namespace": namespace,
                "phase": str(status.get("phase") or ""),
                "message": str(status.get("message") or ""),
                "stable": str(status.get("stableRS") or ""),
                "current": str(status.get("currentPodHash") or ""),
                "image": ", ".join(str(c.get("image")) for c in containers if isinstance(c, dict)),
                "stable_weight": str(_part(weights, "stable").get("weight", "")),
                "strategy": "canary" if "canary" in _part(spec, "strategy") else "blue-green",
            }
            if run.get("name"):
                state.lead(ObjRef("analysisrun", str(run["name"]), namespace), "why it aborted", 86)
        elif kind == "AnalysisRun" and str(status.get("phase")) in ("Failed", "Error", "Inconclusive"):
            metrics = {str(m.get("name")): m for m in spec.get("metrics") or [] if isinstance(m, dict)}
            results = []
            for result in status.get("metricResults") or []:
                if not isinstance(result, dict) or result.get("phase") not in ("Failed", "Error"):
                    continue
                metric = metrics.get(str(result.get("name")), {})
                values = [
                    str(m.get("value")).strip("[]")
                    for m in result.get("measurements") or []
                    if isinstance(m, dict) and m.get("phase") == "Failed"
                ]
                results.append(
                    {
                        "metric": str(result.get("name")),
                        "failed": result.get("failed", len(values)),
                        "limit": metric.get("failureLimit", 0),
                        "condition": str(metric.get("successCondition") or ""),
                        "values": values,
                    }
                )
            facts["run"] = {"name": name, "phase": str(status.get("phase")), "results": results}


def _finding(rollout: dict[str, Any], run: dict[str, Any], images: dict[str, str]) -> Finding:
    name = rollout["name"]
    canary_rs, stable_rs = f"{name}-{rollout['current']}", f"{name}-{rollout['stable']}"
    new_image = images.get(canary_rs) or rollout["image"]
    revision = _REVISION.search(rollout["message"])
    why = ""
    for result in run.get("results") or []:
        values = ", ".join(result["values"][:5])
        why = (
            f": its analysis failed: AnalysisRun {run['name']}'s metric {result['metric']} failed "
            f"{result['failed']} times, more than its failureLimit of {result['limit']}"
            + (f" (measured {values} against the success condition {result['condition']})" if values else "")
        )
        break
    stable_image = images.get(stable_rs, "")
    weight = f", weight {rollout['stable_weight']}" if rollout["stable_weight"] else ""
    summary = (
        f"The Argo Rollout {name} aborted its {rollout['strategy']} update"
        f"{f' to revision {revision.group(1)}' if revision else ''} "
        f"(image {new_image}, ReplicaSet {canary_rs})"
        f"{why}. The Rollout is {rollout['phase'] or 'aborted'} (RolloutAborted); all traffic stays on the "
        f"stable ReplicaSet {stable_rs}{f' ({stable_image}{weight})' if stable_image else ''}: the new "
        "version did not go out."
    )
    return Finding(
        "rollout_aborted_by_analysis",
        clip(summary, 900),
        Severity.CRITICAL,
        f"rollout/{rollout['namespace']}/{name}",
        clip(rollout["message"]),
        94,
        "Fix what the canary's failing metric measures in the new version, then retry the rollout "
        "(kubectl argo rollouts retry rollout); the stable version keeps serving meanwhile.",
    )
