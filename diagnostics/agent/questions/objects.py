"""The plan for a question about an object no workload plan reads: a TLS certificate (when it expires, whether
its renewal works; which certificates expire within a bound, ``cert_expiry``) and a Helm release (its last
revision, the state of its objects). Each read is chosen from what the reads before it returned (a
certificate looked up by the host, its dashed form, its first label, then listed; a release's namespace from
the question, else from where its pods are), and the answer is submitted from them (``certificates``,
``releases``), never the root-cause plan's verdict about a workload the question did not name.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.analyzers.kubernetes.ingress_tls import covers
from diagnostics.agent.investigation.observer import PROBE, SUBMIT, Decision, InvestigationView
from diagnostics.agent.investigation.params import props_of, required_of
from diagnostics.agent.investigation.planner import _key
from diagnostics.agent.questions import cert_expiry, cert_inventory, certificates, releases
from diagnostics.agent.questions.asked import parse_tables
from diagnostics.agent.questions.cert_sources import EXPIRY_METRICS
from diagnostics.agent.request.intent import COUNT, LIST, STATUS, TIMELINE
from diagnostics.toolsets.base import ToolSpec

Read = tuple[str, dict[str, Any], str]
_RELEASE_PARAMS = ("release", "release_name", "name", "chart")
_HOST_PARAMS = ("host", "hostname", "domain", "url", "name", "certificate", "target")
_CERT_TOOL = rx.compile(r"openssl|x509|cert|tls")
# What a question about a certificate asks: when it expires, whether it is valid or renews, whether it is ok.
_ASKS_CERT_STATE = rx.compile(
    r"\b(?:expir\w*|valid\w*|renew\w*|how long|days? left|ok|okay|healthy|ready|good|fine|broken)\b"
)
KINDS = (STATUS, TIMELINE)


def _spec(view: InvestigationView, test: Callable[[ToolSpec], bool]) -> ToolSpec | None:
    return next((s for s in view.tools if test(s)), None)


def _finder(view: InvestigationView) -> ToolSpec | None:
    return _spec(view, lambda s: "keyword" in props_of(s) and "kind" in props_of(s))


def _lister(view: InvestigationView, *, namespaced: bool) -> ToolSpec | None:
    wanted = {"kind", "namespace"} if namespaced else {"kind"}
    return _spec(view, lambda s: set(required_of(s)) == wanted)


def _filled(spec: ToolSpec, values: dict[str, str]) -> dict[str, Any] | None:
    """``spec``'s parameters from ``values`` (by parameter name); None when a required one has none."""
    params: dict[str, Any] = {}
    for name, schema in props_of(spec).items():
        if values.get(name):
            params[name] = values[name]
        elif isinstance(schema, dict) and "default" in schema:
            params[name] = schema["default"]
    return params if all(r in params for r in required_of(spec)) else None


def asked(state: AnalysisState) -> tuple[str, list[str]]:
    """("release" | "certificate" | "", the names) the question asks about."""
    intent = state.intent
    if intent is None or state.alert.is_alert:
        return "", []
    text = state.alert.text or ""
    if intent.kind in KINDS and (names := releases.asked_names(text)):
        return "release", names
    if intent.kind in (*KINDS, LIST, COUNT) and rx.search(
        r"\bhelm\b.*\breleases\b|\breleases\b.*\bhelm\b", text.lower()
    ):
        return "releases", []  # which releases: no one named
    lowered = " ".join(text.lower().split())
    if intent.kind in (*KINDS, LIST, COUNT) and cert_expiry.asks_which(lowered):
        names = certificates.asked_names(text)
        # Which of them expire (within a bound): none named, every certificate; else the named ones.
        return ("certificate", names) if names else ("certificates", [])
    if intent.kind not in KINDS:
        return "", []
    if _ASKS_CERT_STATE.search(lowered) and (names := certificates.asked_names(text)):
        return "certificate", names
    return "", []


def release_namespace(state: AnalysisState, release: str) -> str:
    """The release's namespace: the one the question names (a listed namespace after "in" counts), else
    where a finder found its pods."""
    intent = state.intent
    if intent is not None and intent.namespace:
        return intent.namespace
    lowered = " ".join((state.alert.text or "").lower().split())
    listed = set(state.inventory.namespaces)
    for word in rx.findall(r"\b(?:in|namespace|ns)\s+[`'\"]?([a-z0-9][-a-z0-9]*)", lowered):
        if word in listed and word != release:
            return word
    for out in state.outputs:
        if out.no_data or not out.ok or out.params.get("keyword") != release:
            continue
        for row in parse_tables(out.text, out.tool):
            if row.values.get("NAMESPACE"):
                return row.values["NAMESPACE"]
    return ""


def release_reads(view: InvestigationView, release: str) -> list[Read]:
    reads: list[Read] = []
    cluster, namespaced, finder = (
        _lister(view, namespaced=False),
        _lister(view, namespaced=True),
        _finder(view),
    )
    if cluster is not None:
        reads.append((cluster.name, {"kind": "namespace"}, "the namespaces"))
    namespace = release_namespace(view.state, release)
    for spec in view.tools:
        if "helm" in spec.name.lower():
            values = {p: release for p in _RELEASE_PARAMS} | {"namespace": namespace}
            params = _filled(spec, values)
            if params is not None:
                reads.append((spec.name, params, f"Helm's own record of release {release}"))
    if not namespace and finder is not None:
        reads.append((finder.name, {"kind": "pod", "keyword": release}, f"where the pods of {release} run"))
    if namespace and namespaced is not None:
        for kind in ("secret", "pod", "deployment", "statefulset", "daemonset"):
            why = f"the {kind}s of namespace {namespace} (release {release}'s objects and its revisions)"
            reads.append((namespaced.name, {"kind": kind, "namespace": namespace}, why))
    return reads


def every_release_reads(view: InvestigationView) -> list[Read]:
    """Helm's own listing (a helm tool that needs no release), else every release Secret."""
    reads: list[Read] = []
    for spec in view.tools:
        if "helm" in spec.name.lower() and (params := _filled(spec, {})) is not None:
            reads.append((spec.name, params, "Helm's list of releases"))
    cluster = _lister(view, namespaced=False)
    if cluster is not None and not releases.all_releases(view.state):
        reads.append((cluster.name, {"kind": "secret"}, "the release Secrets (sh.helm.release.v1.*)"))
    return reads


def certificate_reads(view: InvestigationView, names: list[str]) -> list[Read]:
    reads: list[Read] = []
    finder, cluster = _finder(view), _lister(view, namespaced=False)
    found = certificates.found(view.state)
    if not found and finder is not None:
        for name in names[:2]:
            for keyword in certificates.lookups(name):
                reads.append((finder.name, {"kind": "certificate", "keyword": keyword}, f"find {keyword!r}"))
    if not found and cluster is not None:
        reads.append((cluster.name, {"kind": "certificate"}, "every certificate"))
    yaml_tool = _spec(view, lambda s: "yaml" in s.name.lower() and {"kind", "name"} <= set(required_of(s)))
    describe = _spec(view, lambda s: "describe" in s.name.lower() and {"kind", "name"} <= set(required_of(s)))
    for namespace, name in found[:3]:
        obj = {"kind": "certificate", "name": name, "namespace": namespace}
        for spec in (yaml_tool, describe):
            if spec is not None:
                reads.append((spec.name, obj, f"the status of certificate {name} (notAfter, conditions)"))
    reads += held_reads(view, names, yaml_tool)
    for spec in view.tools:
        if _CERT_TOOL.search(spec.name.lower()) and not spec.name.lower().startswith("kubectl"):
            for name in names[:2]:
                params = _filled(spec, dict.fromkeys(_HOST_PARAMS, name))
                if params is not None:
                    reads.append((spec.name, params, f"the certificate {name} serves"))
    return reads


def _tls_secrets(state: AnalysisState, names: list[str]) -> list[tuple[str, str]]:
    """(namespace, name) of each Secret a finder or listing returned that is named as asked or is TLS."""
    found: dict[tuple[str, str], None] = {}
    for out in state.outputs:
        if out.no_data or not out.ok or str(out.params.get("kind") or "").lower() != "secret":
            continue
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            tls = "kubernetes.io/tls" in row.values.get("TYPE", "")
            if row.name and (row.name in names or (tls and any(n in row.name for n in names))):
                found.setdefault((row.values.get("NAMESPACE") or row.namespace, row.name), None)
    return list(found)


def _ingress_reads(view: InvestigationView, hosts: list[str], yaml_tool: ToolSpec | None) -> list[Read]:
    """A host's certificate as its Ingress serves it: the Ingresses (``HOSTS``), the manifest of each that
    serves the host (its ``tls`` entries), then the Secret of each entry that covers the host."""
    cluster = _lister(view, namespaced=False)
    if not hosts or cluster is None or yaml_tool is None:
        return []
    reads: list[Read] = [(cluster.name, {"kind": "ingress"}, f"the Ingresses that serve {hosts[0]}")]
    for out in view.state.outputs:
        if out.no_data or not out.ok or str(out.params.get("kind") or "").lower() != "ingress":
            continue
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            served = row.values.get("HOSTS", "").lower().split(",")
            if row.name and any(covers(h, host) for h in served for host in hosts):
                obj = {
                    "kind": "ingress",
                    "name": row.name,
                    "namespace": row.values.get("NAMESPACE") or row.namespace,
                }
                reads.append((yaml_tool.name, obj, f"the tls entries of Ingress {row.name}"))
    for label, entries in view.state.fact_dict("ingress_tls").items():
        namespace = label.split("/", 1)[0]
        for served, secret in entries:
            if secret and any(covers(h, host) for h in served for host in hosts):
                obj = {"kind": "secret", "name": secret, "namespace": namespace}
                reads.append(
                    (yaml_tool.name, obj, f"the certificate Ingress {label} serves (Secret {secret})")
                )
    return reads


def held_reads(view: InvestigationView, names: list[str], yaml_tool: ToolSpec | None) -> list[Read]:
    """Where a certificate is held without a Certificate: a TLS Secret named as asked (its ``tls.crt``), and
    the expiry metrics of cert-manager and the blackbox exporter when a query tool is there."""
    reads: list[Read] = []
    finder = _finder(view)
    for name in names[:2]:
        if finder is not None and "." not in name:
            reads.append((finder.name, {"kind": "secret", "keyword": name}, f"a TLS Secret named {name!r}"))
    for namespace, name in _tls_secrets(view.state, names)[:3]:
        if yaml_tool is not None:
            obj = {"kind": "secret", "name": name, "namespace": namespace}
            reads.append((yaml_tool.name, obj, f"the certificate in Secret {name} (tls.crt, its notAfter)"))
    reads += _ingress_reads(view, [n for n in names if "." in n], yaml_tool)
    query = _spec(view, lambda s: required_of(s) == ["query"] and "range" not in s.name.lower())
    for metric in EXPIRY_METRICS:
        if query is not None:
            reads.append(
                (query.name, {"query": metric}, f"certificate expiries exporters publish ({metric})")
            )
    return reads


def certificate_list_reads(view: InvestigationView, namespace: str) -> list[Read]:
    """Every source of certificates (of ``namespace``, when the question names one): the cert-manager
    Certificates, the Secrets (``kubernetes.io/tls``), the Ingresses (their ``tls`` entries) and the expiry
    metrics; then each object's own read (``cert_inventory.to_read``: a Certificate's YAML, its describe
    when the YAML showed no expiry; an Ingress's or a Secret's YAML), ``READ_BUDGET`` objects in all."""
    reads: list[Read] = []
    cluster, namespaced = _lister(view, namespaced=False), _lister(view, namespaced=True)
    for kind, why in (
        ("certificate", "every certificate"),
        ("secret", "the TLS Secrets (kubernetes.io/tls)"),
        ("ingress", "the Ingresses (their TLS entries)"),
    ):
        if namespace and namespaced is not None:
            reads.append((namespaced.name, {"kind": kind, "namespace": namespace}, why))
        elif cluster is not None:
            reads.append((cluster.name, {"kind": kind}, why))
    query = _spec(view, lambda s: required_of(s) == ["query"] and "range" not in s.name.lower())
    for metric in EXPIRY_METRICS:
        if query is not None:
            reads.append(
                (query.name, {"query": metric}, f"certificate expiries exporters publish ({metric})")
            )
    yaml_tool = _spec(view, lambda s: "yaml" in s.name.lower() and {"kind", "name"} <= set(required_of(s)))
    describe = _spec(view, lambda s: "describe" in s.name.lower() and {"kind", "name"} <= set(required_of(s)))
    made = {_key(step.tool, step.params) for step in view.steps}
    for kind, ns, name in cert_inventory.to_read(view.state, namespace):
        obj = {"kind": kind, "name": name, "namespace": ns}
        why = f"when {kind} {name} expires" if kind != "ingress" else f"the TLS entries of Ingress {name}"
        if yaml_tool is not None:
            reads.append((yaml_tool.name, obj, why))
        if (
            kind != "secret"
            and describe is not None
            and (yaml_tool is None or _key(yaml_tool.name, obj) in made)
        ):
            reads.append((describe.name, obj, why))
    return reads


class ObjectPlan:
    """Reads, one at a time, until none is left; then the answer."""

    def __init__(self) -> None:
        self._done: set[str] = set()

    def decide(self, view: InvestigationView) -> Decision | None:
        what, names = asked(view.state)
        if not what:
            return None
        namespace = view.state.intent.namespace if view.state.intent is not None else ""
        if view.iteration >= view.max_iterations - 2:
            wanted = []  # the step budget is nearly spent: answer from what was read
        elif what == "releases":
            wanted = every_release_reads(view)
        elif what == "certificates":
            wanted = certificate_list_reads(view, namespace)
        else:
            wanted = release_reads(view, names[0]) if what == "release" else certificate_reads(view, names)
        made = {_key(step.tool, step.params) for step in view.steps}
        for tool, params, why in wanted:
            key = _key(tool, params)
            if key not in self._done and key not in made:
                self._done.add(key)
                return Decision(PROBE, reason=why, tool=tool, params=params)
        first, lines = object_verdict(view.state) or ("", [])
        if what == "releases":
            subject = ("helmrelease", "*", "")
        elif what == "certificates":
            subject = ("certificate", "*", namespace)
        elif what == "release":
            subject = ("helmrelease", names[0], release_namespace(view.state, names[0]))
        else:
            found = certificates.found(view.state)
            subject = ("certificate", found[0][1], found[0][0]) if found else ("certificate", names[0], "")
        view.alert.subject.kind, view.alert.subject.name, view.alert.subject.namespace = subject
        view.alert.subject.names = list(dict.fromkeys([subject[1], *names])) if names else []
        return Decision(
            SUBMIT,
            reason=f"the {what}'s reads are done",
            diagnosis="\n".join([first, *lines]),
            root_cause=first,
        )


def object_verdict(state: AnalysisState) -> tuple[str, list[str]] | None:
    """(the answer, the facts under it) of a question about a certificate or a Helm release; None when the
    question is about neither."""
    what, names = asked(state)
    if what == "releases":
        return releases.releases_lines(state)
    if what == "release":
        return releases.release_lines(state, names[0])
    if what in ("certificate", "certificates"):
        intent = state.intent
        now = (intent.asked_at if intent is not None else None) or datetime.now(UTC)
        if what == "certificates":
            return cert_expiry.listed_verdict(state, now, intent.namespace if intent is not None else "")
        bound = cert_expiry.expiry_bound(state.alert.text or "", now)
        return certificates.verdict(state, names, now, bound)
    return None
