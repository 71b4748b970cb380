"""An Ingress that no controller serves because its class names no IngressClass.

An ingress controller serves only the Ingresses of its class: ``spec.ingressClassName`` (or the older
``kubernetes.io/ingress.class`` annotation) must name an IngressClass whose ``controller`` is the
controller's (ingress-nginx: ``k8s.io/ingress-nginx``); an Ingress without a class goes to the class
annotated ``ingressclass.kubernetes.io/is-default-class``. An Ingress whose class does not exist is
ignored by every controller, with no event on it: it never gets an address, its host serves nothing,
while its Service, pods and certificate are fine. ingress-nginx logs ``Ignoring ingress because of error
while validating ingress class ... no object matching key "X" in local store``. Read from the Ingress (its
describe's ``Ingress Class``, a listing's ``CLASS`` and ``ADDRESS``, its manifest), the IngressClass
listing, and a controller's log.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    looks_like_describe,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_IGNORED = rx.compile(
    r"Ignoring ingress[^\n]*?ingress=\"?([\w.-]+)/([\w.-]+)\"?[^\n]*?"
    r"no object matching key \\?\"([\w.-]+)\\?\""
)
_HOST = rx.compile(r"^\s{2}([a-z0-9][\w.-]*\.[a-z]{2,})\s*$", rx.MULTILINE)
# Reads the finding waits for the IngressClass listing once a class is known.
_WAIT = 3


@register
class IngressClassAnalyzer(Analyzer):
    name = "ingress_class_missing"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("ingress_class")
        if facts.get("ingresses"):
            note_wait(facts, out)
        text = out.text
        kind = str(out.params.get("kind") or "").lower()
        ingresses: dict[str, dict[str, Any]] = facts.setdefault("ingresses", {})
        if out.is_log:
            for match in _IGNORED.finditer(text):
                ing = ingresses.setdefault(f"{match.group(1)}/{match.group(2)}", {})
                ing.update(cls=match.group(3), ignored=match.group(0))
        elif looks_like_describe(text) and field_value(text, "Ingress Class"):
            key = f"{field_value(text, 'Namespace')}/{field_value(text, 'Name')}"
            ing = ingresses.setdefault(key, {})
            ing.update(cls=field_value(text, "Ingress Class"), address=field_value(text, "Address"))
            ing["hosts"] = _HOST.findall(text.split("Rules:", 1)[-1].split("Annotations:", 1)[0])
        elif (obj := manifest_of(text)) is not None and obj.get("kind") in ("Ingress", "IngressClass"):
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            assert isinstance(meta, dict) and isinstance(spec, dict)
            if obj["kind"] == "IngressClass":
                facts.setdefault("classes", {})[str(meta.get("name"))] = str(spec.get("controller") or "")
            else:
                annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
                assert isinstance(annotations, dict)
                cls = spec.get("ingressClassName") or annotations.get("kubernetes.io/ingress.class") or ""
                ing = ingresses.setdefault(f"{meta.get('namespace')}/{meta.get('name')}", {})
                ing["cls"] = str(cls or "<none>")
                ing["hosts"] = [
                    str(r.get("host"))
                    for r in spec.get("rules") or []
                    if isinstance(r, dict) and r.get("host")
                ]
        elif (table := parse_table(text)) is not None:
            if kind == "ingressclass" or "CONTROLLER" in table.header:
                classes = facts.setdefault("classes", {})
                for row in table.rows:
                    if row:
                        classes[table.column(row, "NAME")] = table.column(row, "CONTROLLER")
            elif "CLASS" in table.header and "HOSTS" in table.header:
                namespace = str(out.params.get("namespace") or "")
                for row in table.rows:
                    if len(row) >= 4:
                        ns = table.column(row, "NAMESPACE") or namespace
                        ing = ingresses.setdefault(f"{ns}/{table.column(row, 'NAME')}", {})
                        ing.setdefault("cls", table.column(row, "CLASS"))
                        ing.setdefault("hosts", table.column(row, "HOSTS").split(","))
        namespace = state.alert.subject.namespace
        if namespace and "ingress" in state.alert.words and not facts.get("asked"):
            facts["asked"] = True  # the alert speaks of an ingress: its namespace's Ingresses
            state.lead(ObjRef("ingress", "*", namespace), "the Ingresses the alert speaks of", 82)
        if any(ing.get("cls") and ing["cls"] != "<none>" for ing in ingresses.values()):
            state.lead(ObjRef("ingressclass", "*"), "which ingress classes exist", 83)
        return self._finding(facts)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        classes: dict[str, str] | None = facts.get("classes")
        waited = not still_waiting(facts, _WAIT)
        findings: list[Finding] = []
        for key, ing in facts.get("ingresses", {}).items():
            cls = str(ing.get("cls") or "")
            if ing.get("reported") or not cls or cls == "<none>" or ing.get("address"):
                continue
            if classes is None and not (ing.get("ignored") and waited):
                continue
            if classes is not None and cls in classes:
                continue
            ing["reported"] = True
            namespace, name = key.split("/", 1)
            have = f" (the cluster has {' and '.join(sorted(classes))})" if classes else ""
            hosts = [h for h in ing.get("hosts") or [] if h and h != "*"]
            serves = f" and {', '.join(hosts)} serves nothing" if hosts else ""
            evidence = ing.get("ignored") or f"Ingress Class: {cls}"
            said = f" (its controller: '{clip(str(ing['ignored']), 140)}')" if ing.get("ignored") else ""
            findings.append(
                Finding(
                    "ingress_class_missing",
                    f"The Ingress {name} names the IngressClass {cls}, which does not exist{have}: "
                    "no ingress "
                    f"controller serves it, so it has no address{serves}{said}.",
                    Severity.CRITICAL,
                    f"ingress/{namespace}/{name}",
                    clip(str(evidence)),
                    90,
                    "Set spec.ingressClassName to an existing IngressClass (kubectl get ingressclass), or "
                    "create the IngressClass for the controller that should serve it.",
                )
            )
        return findings
