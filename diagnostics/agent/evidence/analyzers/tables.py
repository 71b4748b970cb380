"""Listings (kubectl get / find), nodes and their labels, missing resource types and namespaces."""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    parse_table,
    register,
    rows_of,
)
from diagnostics.agent.evidence.analyzers.removed_apis import removed_version
from diagnostics.agent.evidence.inventory import CLUSTER_SCOPED
from diagnostics.agent.findings import Finding, ObjRef, Severity, normalize_kind

BAD_POD_STATUSES = {
    "CrashLoopBackOff",
    "Error",
    "ImagePullBackOff",
    "ErrImagePull",
    "OOMKilled",
    "CreateContainerConfigError",
    "Init:CrashLoopBackOff",
    "Init:Error",
    "Evicted",
    "InvalidImageName",
    "Failed",
    "Unknown",
    "Pending",
}
_READY = rx.compile(r"^(\d+)/(\d+)$")
# A token that can be an object's name (or kind/name): no prose punctuation ("data:", "found.").
_OBJECT_NAME = rx.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9._/]*[A-Za-z0-9])?")
_AGE = rx.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def age_seconds(text: str) -> int | None:
    match = _AGE.match(text)
    if not text or not match or not any(match.groups()):
        return None
    d, h, m, s = (int(g or 0) for g in match.groups())
    return ((d * 24 + h) * 60 + m) * 60 + s


def selector_findings(state: AnalysisState) -> list[Finding]:
    """Compare the pods' required node selectors with the nodes' labels, once both are known."""
    labels: dict[str, dict[str, str]] = state.fact_dict("node_labels")
    required: dict[str, str] = state.fact_dict("required_selectors")
    done = state.fact_set("selectors_checked")
    findings = []
    if not labels:
        return []
    for pod_label, selector in required.items():
        if pod_label in done:
            continue
        done.add(pod_label)
        pairs = [p.strip() for p in selector.split(",") if "=" in p]
        matching = [
            node
            for node, node_labels in labels.items()
            if all(node_labels.get(p.split("=", 1)[0]) == p.split("=", 1)[1] for p in pairs)
        ]
        nodes = sorted(labels)
        pod = pod_label.rsplit("/", 1)[-1]
        if matching:
            findings.append(
                Finding(
                    "node_selector_matches",
                    f"Nodes {', '.join(matching)} have the label {selector} that pod {pod} "
                    "requires; the scheduler rejects them for another reason.",
                    Severity.INFO,
                    pod_label,
                    "",
                    20,
                )
            )
            continue
        none = (
            "neither node has this label"
            if len(nodes) == 2
            else f"none of the {len(nodes)} nodes has this label"
        )
        findings.append(
            Finding(
                "node_selector_mismatch",
                f'Pod {pod} requires a node with label "{selector}" (its nodeSelector), but {none} '
                f"(nodes: {', '.join(nodes)}); so the pod stays Pending.",
                Severity.CRITICAL,
                pod_label,
                clip(f"nodeSelector {selector}; nodes {', '.join(nodes)}"),
                92,
                f"Remove the nodeSelector {selector} from the pod spec, or label a node with it (kubectl "
                "label node "
                f"{nodes[-1] if nodes else '<node>'} {selector}).",
            )
        )
    return findings


def _has_namespace_column(text: str, kind: str) -> bool:
    """Whether a search's rows start with the namespace: its header says so, or (``kubectl get -A |
    grep``, no header) the kind is namespaced."""
    header = next((line.split() for line in text.splitlines() if line.lstrip().startswith("NAME")), None)
    if header:
        return header[0] == "NAMESPACE"
    return kind not in CLUSTER_SCOPED


@register
class FindAnalyzer(Analyzer):
    """Search results (``kubectl get -A | grep keyword``): where the subject is, or that it is nowhere."""

    name = "k8s_find"

    def applies(self, out: ToolOutput) -> bool:
        return "keyword" in out.params

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        keyword = str(out.params.get("keyword") or "").lower()
        kind = normalize_kind(str(out.params.get("kind") or ""))
        # A search that found nothing says so in words ("No data: ..."); none of them is an object.
        rows = (
            []
            if out.no_data or not out.ok
            else [
                r
                for r in rows_of(out.text)
                if not r[0].startswith(("Command", "NAME", "stderr", "error", "Error"))
            ]
        )
        hits = [
            r
            for r in rows
            if any(keyword and keyword in token.lower() and _OBJECT_NAME.fullmatch(token) for token in r[:3])
        ]
        if not hits:
            state.fact_set("not_found").add(f"{kind}:{keyword}")
            return []
        findings: list[Finding] = []
        namespaced = _has_namespace_column(out.text, kind)
        for row in hits:
            matching = [
                i for i, token in enumerate(row) if keyword in token.lower() and _OBJECT_NAME.fullmatch(token)
            ]
            # "orders  orders-6f8d7c9b5-4kq2x ...": a workload named after its namespace matches in the
            # namespace column first; the name is the next cell.
            index = 1 if namespaced and matching[:2] == [0, 1] else matching[0]
            name = row[index]
            namespace = row[index - 1] if index > 0 and kind != "namespace" else ""
            obj = ObjRef(kind or "pod", name, namespace)
            state.fact_set("found").add(obj.label)
            if namespace:
                state.fact_set("namespaces").add(namespace)
            if kind == "namespace":
                state.fact_set("namespaces").add(name)
                continue
            state.lead(obj, f"found by searching {kind or 'objects'} for {keyword!r}", 90)
            status = next((t for t in row[index + 1 :] if t in BAD_POD_STATUSES), "")
            if status and kind in ("pod", ""):
                findings.append(
                    Finding(
                        "pod_status",
                        f"Pod {name} is {status}.",
                        Severity.WARNING,
                        obj.label,
                        clip(" ".join(row)),
                        20,
                    )
                )
        return findings


@register
class ListAnalyzer(Analyzer):
    """``kubectl get`` tables: pods, workloads, PVCs and nodes."""

    name = "k8s_list"

    def applies(self, out: ToolOutput) -> bool:
        return "keyword" not in out.params and parse_table(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        table = parse_table(out.text)
        if table is None:
            return []
        kind = normalize_kind(str(out.params.get("kind") or ""))
        namespace = str(out.params.get("namespace") or "")
        header = table.header
        if kind == "node" or ("ROLES" in header and "VERSION" in header):
            return self._nodes(table.header, table.rows, state)
        if kind == "namespace":
            state.fact_set("namespaces").update(row[0] for row in table.rows if row)
            return []
        if "NAMESPACE" in header and "GROUP" not in header and not kind:
            return []
        findings: list[Finding] = []
        pressured = state.facts.get("pressured_nodes", set())
        for row in table.rows:
            if not row:
                continue
            name = table.column(row, "NAME") if "NAMESPACE" in header else row[0]
            if name.startswith(("├", "└", "│")) or "/" in name:
                continue
            on_pressured_node = bool(pressured) and table.column(row, "NODE") in pressured
            if not (state.is_related(name) or on_pressured_node):
                # A listing of a namespace the subject is not in was asked for by a lead (the cluster
                # DNS, an API service's backend): its unhealthy pods are evidence of their own.
                if kind in ("pod", "") and _foreign(state, namespace) and "STATUS" in header:
                    findings += _foreign_pod(table.column(row, "STATUS"), name, namespace, row, state)
                continue
            obj = ObjRef(kind or "pod", name, table.column(row, "NAMESPACE") or namespace)
            if kind in ("pod", "") and "STATUS" in header:
                status = table.column(row, "STATUS")
                state.lead(ObjRef("pod", name, obj.namespace), "pod related to the subject", 70)
                if status in BAD_POD_STATUSES:
                    restarts = table.column(row, "RESTARTS").split(" ", 1)[0]
                    findings.append(
                        Finding(
                            "pod_status",
                            f"Pod {name} is {status}" + (f" ({restarts} restarts)" if restarts else "") + ".",
                            Severity.WARNING,
                            obj.label,
                            clip(" ".join(row)),
                            20,
                        )
                    )
            elif "READY" in header and "UP-TO-DATE" in header:
                state.lead(
                    ObjRef(kind or "deployment", name, namespace), "workload related to the subject", 65
                )
                ready = _READY.match(table.column(row, "READY"))
                age = age_seconds(table.column(row, "AGE"))
                if ready and int(ready.group(1)) < int(ready.group(2)):
                    young = age is not None and age < 180
                    findings.append(
                        Finding(
                            "rollout_in_progress" if young else "replicas_unavailable",
                            f"{(kind or 'deployment').capitalize()} {name} has "
                            f"{ready.group(1)}/{ready.group(2)} "
                            f"replicas ready"
                            + (
                                f"; it is only {table.column(row, 'AGE')} old, so pods are still "
                                "starting (a rollout in progress, not a fault)"
                                if young
                                else ""
                            )
                            + ".",
                            Severity.INFO if young else Severity.WARNING,
                            obj.label,
                            clip(" ".join(row)),
                            5 if young else 30,
                        )
                    )
            elif "STORAGECLASS" in header and table.column(row, "STATUS") == "Pending":
                state.lead(ObjRef("persistentvolumeclaim", name, namespace), "pending PVC", 80)
        return findings

    def _nodes(self, header: list[str], rows: list[list[str]], state: AnalysisState) -> list[Finding]:
        labels = state.fact_dict("node_labels")
        for row in rows:
            if not row:
                continue
            raw = row[-1] if "LABELS" in header else ""
            labels[row[0]] = dict(p.split("=", 1) for p in raw.split(",") if "=" in p)
        alert = state.alert
        if not alert.subject.name or alert.topics & {"quota", "memory", "cpu"}:
            # An alert about the cluster's capacity: each node's allocated resources tell.
            for row in rows[:10]:
                if row:
                    state.lead(ObjRef("node", row[0]), "a node of the cluster", 72)
        return selector_findings(state)


_MISSING_TYPE = rx.compile(r"doesn't have a resource type \"([\w.-]+)\"|no matches for kind \"([\w.-]+)\"")
_PRODUCTS = {
    "scaledobject": "KEDA",
    "scaledobjects": "KEDA",
    "scaledjob": "KEDA",
    "triggerauthentication": "KEDA",
    "servicemonitor": "the Prometheus Operator",
    "podmonitor": "the Prometheus Operator",
    "prometheusrule": "the Prometheus Operator",
    "application": "Argo CD",
    "appproject": "Argo CD",
    "certificate": "cert-manager",
    "issuer": "cert-manager",
    "clusterissuer": "cert-manager",
    "virtualservice": "Istio",
    "destinationrule": "Istio",
    "rollout": "Argo Rollouts",
}


@register
class MissingResourceTypeAnalyzer(Analyzer):
    name = "k8s_missing_resource_type"

    def applies(self, out: ToolOutput) -> bool:
        return _MISSING_TYPE.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        match = _MISSING_TYPE.search(out.text)
        assert match is not None
        rtype = match.group(1) or match.group(2)
        if removed_version(out.text) is not None:
            return []  # a built-in version a Kubernetes upgrade removed, not a CRD (removed_apis.py)
        product = _PRODUCTS.get(rtype.lower())
        subject = state.alert.subject.name
        if product:
            summary = (
                f'{product} is not installed in the cluster: the server has no resource type "{rtype}", so '
                f"no {product} {rtype} is defined"
                + (f" for {subject}" if subject else "")
                + f" and {product} cannot be acting on it."
            )
        else:
            summary = f'The cluster has no resource type "{rtype}" (its CRD is not installed).'
        return [
            Finding(
                "crd_missing",
                summary,
                Severity.WARNING,
                f"resourcetype/{rtype}",
                clip(match.group(0)),
                70,
                f"Install {product or 'the CRD'} or use the resource that is installed instead.",
            )
        ]


_NS_NOT_FOUND = rx.compile(r"namespaces? \"([a-z0-9][-a-z0-9.]*)\" not found")
_NS_MENTION = rx.compile(r"(?:namespace[:=/]\s*|Namespace:\s+|-n\s+)([a-z0-9][-a-z0-9.]*)")


def _distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


@register
class NamespaceNotFoundAnalyzer(Analyzer):
    """A namespace that does not exist, and the existing one it was probably meant to be."""

    name = "k8s_namespace_not_found"

    def applies(self, out: ToolOutput) -> bool:
        return _NS_NOT_FOUND.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        known = set(state.fact_set("namespaces"))
        known.update(_NS_MENTION.findall(out.text))
        table = parse_table(out.text)
        if table and "NAMESPACE" in table.header:
            index = table.header.index("NAMESPACE")
            known.update(
                row[index] for row in table.rows if len(row) > len(table.header) - 2 and index < len(row)
            )
        findings = []
        for missing in dict.fromkeys(_NS_NOT_FOUND.findall(out.text)):
            close = sorted(
                (ns for ns in known if ns != missing and ns and _distance(ns, missing) <= 2 and len(ns) > 3),
                key=lambda ns: _distance(ns, missing),
            )
            if close:
                findings.append(
                    Finding(
                        "namespace_typo",
                        f'The namespace `{missing}` does not exist (namespaces "{missing}" not found); it '
                        "should be "
                        f"`{close[0]}`, the existing namespace the other resources use (a typo in the "
                        "manifest).",
                        Severity.CRITICAL,
                        f"namespace/{missing}",
                        clip(f'namespaces "{missing}" not found'),
                        93,
                        f"Change the namespace `{missing}` to `{close[0]}` in the manifests (or create "
                        f"`{missing}`).",
                    )
                )
            else:
                findings.append(
                    Finding(
                        "namespace_missing",
                        f'The namespace `{missing}` does not exist (namespaces "{missing}" not found).',
                        Severity.CRITICAL,
                        f"namespace/{missing}",
                        "",
                        80,
                        f"Create the namespace {missing} or fix the reference to it.",
                    )
                )
        return findings


_LINEAGE = rx.compile(r"[├└]──\s+(Pod|Job|ReplicaSet|StatefulSet|DaemonSet|Deployment)/([a-z0-9][-a-z0-9.]*)")


@register
class LineageAnalyzer(Analyzer):
    """An ownership tree (kubectl lineage): the pods a workload owns are worth a look."""

    name = "k8s_lineage"

    def applies(self, out: ToolOutput) -> bool:
        return _LINEAGE.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        namespace = str(out.params.get("namespace") or "")
        for kind, name in _LINEAGE.findall(out.text):
            if kind == "ReplicaSet":
                state.related.add(name.lower())
                continue
            state.lead(ObjRef(kind, name, namespace), "owned by the subject", 80 if kind == "Pod" else 60)
        return []


def _foreign(state: AnalysisState, namespace: str) -> bool:
    subject_ns = state.alert.subject.namespace
    return bool(namespace) and bool(subject_ns) and namespace != subject_ns


def _foreign_pod(
    status: str, name: str, namespace: str, row: list[str], state: AnalysisState
) -> list[Finding]:
    """An unhealthy pod in a namespace a lead led to: read on its own (describe, logs) and reported."""
    if status not in BAD_POD_STATUSES:
        return []
    state.lead(ObjRef("pod", name, namespace), f"an unhealthy pod in {namespace}", 68)
    return [
        Finding(
            "pod_status",
            f"Pod {name} in {namespace} is {status}.",
            Severity.WARNING,
            ObjRef("pod", name, namespace).label,
            clip(" ".join(row)),
            20,
        )
    ]
