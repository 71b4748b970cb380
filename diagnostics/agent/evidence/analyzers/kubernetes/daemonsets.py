"""A DaemonSet's node coverage, from the DaemonSet controller's own rules.

The controller runs one pod on every node its pod template can be scheduled to: the node's labels must
match the template's ``nodeSelector`` (every ``key=value``) and its required node affinity
(``In``/``NotIn``/``Exists``/``DoesNotExist``), and every ``NoSchedule``/``NoExecute`` taint of the node
must be tolerated (the controller adds tolerations of its own for the node-condition taints:
``node.kubernetes.io/not-ready``, ``unreachable``, ``disk-pressure``, ``memory-pressure``,
``pid-pressure``, ``unschedulable``, ``network-unavailable``). ``desiredNumberScheduled`` counts only the
nodes that pass, so a DaemonSet can be "6/6 ready" and still have no pod on the nodes it excludes.

Reads: the DaemonSet (describe: ``Node-Selector``, ``Tolerations``, the ``Number of Nodes ...`` counts;
``kubectl get ds``: ``NODE SELECTOR``; a manifest: the template's nodeSelector, affinity and tolerations,
``status``), the nodes' labels (``kubectl get nodes --show-labels``, kept by tables.py) and taints (a
node's describe or manifest). Reported: which nodes are excluded and by what, and a DaemonSet whose
scheduled/ready counts fall short of its desired count.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    parse_table,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import _part, manifest_of
from diagnostics.agent.evidence.analyzers.tables import age_seconds
from diagnostics.agent.findings import Finding, ObjRef, Severity

# Taints the DaemonSet controller tolerates on its own (added to every DaemonSet pod).
AUTO_TOLERATED = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
    }
)
_COUNTS = {
    "desired": "Desired Number of Nodes Scheduled",
    "current": "Current Number of Nodes Scheduled",
    "ready": "Number of Nodes Scheduled with Available Pods",
    "misscheduled": "Number of Nodes Misscheduled",
}
_TAINT = rx.compile(r"^([\w./-]+)(?:=([\w./-]*))?:(NoSchedule|NoExecute|PreferNoSchedule)$")


def selector_pairs(text: str) -> dict[str, str]:
    """``a=b,c=d`` (a describe's Node-Selector, a table's NODE SELECTOR) as a dict; ``<none>`` is {}."""
    return dict(p.strip().split("=", 1) for p in text.split(",") if "=" in p)


def _toleration(text: str) -> dict[str, str]:
    """A describe's toleration, ``key[=value]:Effect op=Exists [for 300s]``, as the API's fields."""
    head, _, rest = text.strip().partition(" ")
    key_value, _, effect = head.partition(":")
    key, _, value = key_value.partition("=")
    operator = "Exists" if "op=Exists" in rest or (not value and "op=" not in rest) else "Equal"
    return {"key": key, "value": value, "effect": effect, "operator": operator}


def tolerates(tolerations: list[dict[str, str]], key: str, value: str, effect: str) -> bool:
    """Whether any toleration matches the taint ``key=value:effect`` (the API's matching rules)."""
    if key in AUTO_TOLERATED:
        return True
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != effect:
            continue
        if not tol.get("key") and tol.get("operator") == "Exists":
            return True
        if tol.get("key") != key:
            continue
        if tol.get("operator") == "Exists" or tol.get("value", "") == value:
            return True
    return False


def affinity_mismatch(terms: list[dict[str, Any]], labels: dict[str, str]) -> str:
    """Why a node's labels fail every required nodeSelectorTerm ("" when one term matches)."""
    whys = []
    for term in terms:
        failed = ""
        for expr in term.get("matchExpressions") or []:
            key, op = str(expr.get("key")), str(expr.get("operator"))
            values = [str(v) for v in expr.get("values") or []]
            have = labels.get(key)
            ok = {
                "In": have in values,
                "NotIn": have not in values,
                "Exists": have is not None,
                "DoesNotExist": have is None,
            }.get(op, True)
            if not ok:
                failed = (
                    f"its affinity wants {key} {op} {','.join(values)}".rstrip()
                    + f", the node has {key}={have or '(none)'}"
                )
                break
        if not failed:
            return ""
        whys.append(failed)
    return whys[0] if whys else ""


def _counts(text: str) -> dict[str, int]:
    found = {}
    for key, label in _COUNTS.items():
        value = field_value(text, label)
        if value.isdigit():
            found[key] = int(value)
    return found


def _tolerations(text: str) -> list[dict[str, str]]:
    match = rx.search(r"^\s*Tolerations:[ \t]*(.*)$", text, rx.MULTILINE)
    if not match or match.group(1).strip() in ("", "<none>"):
        return []
    found = [_toleration(match.group(1))]
    for line in text[match.end() :].splitlines()[1:]:
        if not rx.match(r"^\s{16,}\S", line):
            break
        found.append(_toleration(line))
    return found


def _keep(state: AnalysisState, ref: ObjRef, data: dict[str, Any]) -> None:
    kept = state.fact_dict("daemonsets").setdefault(ref.label, {"name": ref.name, "namespace": ref.namespace})
    kept.update({k: v for k, v in data.items() if v or k not in kept})
    if state.is_related(ref.name):
        state.lead(ObjRef("node", "*"), f"the nodes DaemonSet {ref.name} should cover", 84)


def _from_manifest(obj: dict[str, Any], state: AnalysisState, namespace: str) -> None:
    meta, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
    pod_spec = _part(_part(spec, "template"), "spec")
    affinity = _part(
        _part(_part(pod_spec, "affinity"), "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution"
    )
    ref = ObjRef("daemonset", str(meta.get("name") or ""), str(meta.get("namespace") or namespace))
    _keep(
        state,
        ref,
        {
            "selector": {str(k): str(v) for k, v in (pod_spec.get("nodeSelector") or {}).items()},
            "terms": [t for t in affinity.get("nodeSelectorTerms") or [] if isinstance(t, dict)],
            "tolerations": [
                {k: str(v) for k, v in t.items()}
                for t in pod_spec.get("tolerations") or []
                if isinstance(t, dict)
            ],
            "counts": {
                "desired": int(status.get("desiredNumberScheduled") or 0),
                "current": int(status.get("currentNumberScheduled") or 0),
                "ready": int(status.get("numberReady") or 0),
                "misscheduled": int(status.get("numberMisscheduled") or 0),
            },
        },
    )


def _node_taints(text: str) -> tuple[str, list[str]] | None:
    name = field_value(text, "Name")
    if not name or not rx.search(r"^Taints:", text, rx.MULTILINE):
        return None
    return name, [t for t in _block(text, "Taints") if _TAINT.match(t)]


@register
class DaemonSetAnalyzer(Analyzer):
    name = "k8s_daemonset"

    def applies(self, out: ToolOutput) -> bool:
        head = out.text[:1500]
        return (
            "Desired Number of Nodes Scheduled" in out.text
            or "NODE SELECTOR" in head
            or "DaemonSet" in head
            or ("Taints:" in out.text and "Name:" in head)
            or ('"kind": "Node"' in head or "kind: Node" in head)
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        namespace = str(out.params.get("namespace") or "")
        if "Desired Number of Nodes Scheduled" in out.text:
            ref = ObjRef(
                "daemonset", field_value(out.text, "Name"), field_value(out.text, "Namespace") or namespace
            )
            selector = field_value(out.text, "Node-Selector")
            _keep(
                state,
                ref,
                {
                    "selector": selector_pairs(selector),
                    "tolerations": _tolerations(out.text),
                    "counts": _counts(out.text),
                },
            )
            return _short(state, ref)
        obj = manifest_of(out.text)
        if obj is not None and obj.get("kind") == "DaemonSet":
            _from_manifest(obj, state, namespace)
            return _short(state, ObjRef("daemonset", str(_part(obj, "metadata").get("name")), namespace))
        if obj is not None and obj.get("kind") == "Node":
            taints = _part(obj, "spec").get("taints") or []
            name = str(_part(obj, "metadata").get("name") or "")
            state.fact_dict("node_taints")[name] = [
                f"{t.get('key')}{'=' + str(t['value']) if t.get('value') else ''}:{t.get('effect')}"
                for t in taints
                if isinstance(t, dict)
            ]
            return []
        table = parse_table(out.text)
        if table is not None and "NODE SELECTOR" in table.header and "DESIRED" in table.header:
            for row in table.rows:
                if not row:
                    continue
                # NODE SELECTOR sits between AVAILABLE and AGE; rows are split on whitespace.
                pairs = [t for t in row[table.header.index("DESIRED") :] if "=" in t]
                counts = {
                    "desired": int(table.column(row, "DESIRED") or 0)
                    if table.column(row, "DESIRED").isdigit()
                    else 0,
                    "current": int(table.column(row, "CURRENT"))
                    if table.column(row, "CURRENT").isdigit()
                    else 0,
                    "ready": int(table.column(row, "READY")) if table.column(row, "READY").isdigit() else 0,
                }
                ns = table.column(row, "NAMESPACE") if "NAMESPACE" in table.header else namespace
                _keep(
                    state,
                    ObjRef("daemonset", row[1] if "NAMESPACE" in table.header else row[0], ns),
                    {"selector": selector_pairs(",".join(pairs)), "counts": counts},
                )
            return []
        if "Taints:" in out.text and (found := _node_taints(out.text)):
            state.fact_dict("node_taints")[found[0]] = found[1]
            labels = _block(out.text, "Labels")
            if labels and not state.fact_dict("node_labels").get(found[0]):
                state.fact_dict("node_labels")[found[0]] = selector_pairs(",".join(labels))
        return []


def _block(text: str, name: str) -> list[str]:
    """A describe's multi-line top-level field (``Labels:``, ``Taints:``): its value and continuations."""
    match = rx.search(rf"^{name}:[ \t]*(.*)$", text, rx.MULTILINE)
    if not match:
        return []
    values = [match.group(1).strip()]
    for line in text[match.end() :].splitlines()[1:]:
        if not rx.match(r"^\s{6,}\S", line):
            break
        values.append(line.strip())
    return [v for v in values if v and v != "<none>"]


def _short(state: AnalysisState, ref: ObjRef) -> list[Finding]:
    """A DaemonSet whose scheduled or ready pods fall short of the nodes it should cover."""
    counts = state.fact_dict("daemonsets").get(ref.label, {}).get("counts") or {}
    desired, current, ready = counts.get("desired"), counts.get("current"), counts.get("ready")
    if desired is None or current is None or ready is None or (current >= desired and ready >= desired):
        return []
    what = f"{current} scheduled" if current < desired else f"{ready} ready"
    return [
        Finding(
            "daemonset_short",
            f"DaemonSet {ref.name} covers {desired} nodes but has {what} (of {desired} desired): on "
            f"{desired - min(current, ready)} node(s) its pod is missing or not ready.",
            Severity.WARNING,
            ref.label,
            f"desired {desired}, current {current}, ready {ready}",
            55,
        )
    ]


def _why_excluded(ds: dict[str, Any], labels: dict[str, str], taints: list[str]) -> str:
    for key, want in (ds.get("selector") or {}).items():
        if labels.get(key) != want:
            if key in labels:
                return f"its nodeSelector {key}={want} does not match their label {key}={labels[key]}"
            return f"its nodeSelector {key}={want} does not match: they have no label {key}"
    if ds.get("terms") and (why := affinity_mismatch(ds["terms"], labels)):
        return why
    for taint in taints:
        match = _TAINT.match(taint)
        if (
            match
            and match.group(3) != "PreferNoSchedule"
            and not tolerates(
                ds.get("tolerations") or [], match.group(1), match.group(2) or "", match.group(3)
            )
        ):
            return f"it does not tolerate their taint {taint}"
    return ""


def _lead_uncovered(state: AnalysisState, ds: dict[str, Any]) -> None:
    """Nodes listed with no pod of the DaemonSet on them, whose labels or taints are not known yet: read each
    (its describe has both)."""
    pods = state.fact_dict("pods_on_nodes")  # ns/pod -> {"node": ...}, kept by preemption.py
    mine = rx.compile(rf"^{rx.escape(ds['namespace'])}/{rx.escape(ds['name'])}-[a-z0-9]{{5}}$")
    covered = {p["node"] for label, p in pods.items() if mine.match(label)}
    if not covered:
        return
    nodes = set(state.fact_dict("node_rows")) | set(state.fact_dict("node_labels"))
    taints = state.fact_dict("node_taints")
    for node in sorted(nodes - covered - set(taints))[:5]:
        state.lead(ObjRef("node", node), f"a node with no {ds['name']} pod: its labels and taints", 79)


@register_correlator
def daemonset_excluded_nodes(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """The nodes a DaemonSet (the subject, or related to it) can never run on, and why, grouped."""
    labels: dict[str, dict[str, str]] = state.fact_dict("node_labels")
    known = {n: lab for n, lab in labels.items() if lab}
    taints = state.fact_dict("node_taints")
    rows = state.fact_dict("node_rows")
    done = state.fact_set("daemonset_coverage_reported")
    out: list[Finding] = []
    for label, ds in state.fact_dict("daemonsets").items():
        if not state.is_related(ds["name"]):
            continue
        _lead_uncovered(state, ds)
        if not known:
            continue
        groups: dict[str, list[str]] = {}
        for node, node_labels in sorted(known.items()):
            why = _why_excluded(ds, node_labels, taints.get(node) or [])
            if why:
                groups.setdefault(why, []).append(node)
        # Reported again only when what is known changes (a node's taints read after its labels).
        signature = f"{label} {sorted(groups.items())}"
        if not groups or signature in done:
            continue
        done.add(signature)
        excluded = [n for nodes in groups.values() for n in nodes]
        ages = {n: age_seconds(str((rows.get(n) or {}).get("AGE") or "")) for n in known}
        newer = ""
        covered = [a for n, a in ages.items() if n not in excluded and a is not None]
        mine = [a for n in excluded if (a := ages.get(n)) is not None]
        if covered and len(mine) == len(excluded) and max(mine) < min(covered):
            ages_of = sorted({str((rows.get(n) or {}).get("AGE")) for n in excluded})
            newer = f", the new nodes that joined {', '.join(ages_of)} ago,"
        selector = ",".join(f"{k}={v}" for k, v in (ds.get("selector") or {}).items())
        total = len(set(labels) | set(rows))
        reasons = "; ".join(f"{', '.join(nodes)}: {why}" for why, nodes in groups.items())
        alert_text = state.alert.text.lower()
        named = ds["name"] in state.alert.subject.names or any(n.lower() in alert_text for n in excluded)
        out.append(
            Finding(
                "daemonset_nodes_excluded",
                f"The DaemonSet {ds['name']} schedules no pod on {len(excluded)} of {total} nodes"
                f"{newer} ({reasons}), so nothing it provides runs there; its desired count excludes them, "
                "so it still reports every pod ready.",
                Severity.CRITICAL if named else Severity.WARNING,
                ObjRef("daemonset", ds["name"], ds["namespace"]).label,
                f"nodeSelector {selector or '<none>'}",
                90 if named else 62,
                "Widen the DaemonSet's nodeSelector/affinity (or add a toleration) to cover "
                f"{', '.join(excluded[:3])}, or label those nodes to match it.",
            )
        )
    return out
