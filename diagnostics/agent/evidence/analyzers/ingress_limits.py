"""Requests an ingress controller refuses before they reach the backend: the request body size limit.

ingress-nginx (like nginx itself) refuses a request body larger than ``client_max_body_size`` with 413
("client intended to send too large body" in its error log); the limit is the Ingress annotation
``nginx.ingress.kubernetes.io/proxy-body-size``, else the controller ConfigMap's ``proxy-body-size``,
else nginx's default of 1m. The backend never sees the request, so its logs are clean. Other proxies
answer the same way (413 Request Entity Too Large / Payload Too Large). An incident about uploads or 413s
leads to the subject's Ingress; an nginx-class Ingress leads to its controller's pods and ConfigMap.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

DEFAULT_LIMIT = "1m"  # nginx's client_max_body_size default, kept by ingress-nginx
CONTROLLER_NS, CONTROLLER_CM = "ingress-nginx", "ingress-nginx-controller"
_TOPIC = rx.compile(r"\b413\b|too large|entity too large|payload too large|upload|body size", rx.IGNORECASE)
_TOO_LARGE = rx.compile(
    r"client intended to send too large body:? (\d+) bytes|Request Entity Too Large|Payload Too Large", rx.I
)
_ACCESS_413 = rx.compile(r"\"(?:POST|PUT|PATCH) [^\"]*\" 413\b")
_BODY_KEY = "proxy-body-size"


def _facts(state: AnalysisState) -> dict[str, Any]:
    return state.fact_dict("ingress_body_limit")


@register
class IngressBodyLimitAnalyzer(Analyzer):
    name = "ingress_body_limit"

    def applies(self, out: ToolOutput) -> bool:
        return True

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = _facts(state)
        if out.tool == "alert":
            subject = state.alert.subject
            if _TOPIC.search(out.text):
                facts["topic"] = True
                for name in subject.names[:2] if subject.namespace else []:
                    state.lead(
                        ObjRef("ingress", name, subject.namespace), "requests refused at the ingress?", 70
                    )
            return []
        pod, namespace = str(out.params.get("pod_name") or ""), str(out.params.get("namespace") or "")
        if facts.get("topic") and pod and namespace and not facts.get("ingress"):
            # The workload the incident is about: its Ingress is on the way of every request.
            state.lead(ObjRef("ingress", workload_of(pod), namespace), "requests refused at the ingress?", 70)
        obj = manifest_of(out.text) if "apiVersion" in out.text[:2000] else None
        if obj is not None:
            return self._manifest(obj, state)
        if out.is_log and _TOO_LARGE.search(out.text):
            return self._refusals(out, state)
        controller_ns = str(facts.get("controller_ns") or "")
        if controller_ns and out.params.get("namespace") == controller_ns and "NAME" in out.text:
            table = parse_table(out.text)
            pods = [row[0] for row in (table.rows if table else []) if row and "controller" in row[0]]
            if pods:
                state.lead(ObjRef("pod", pods[0], controller_ns), "the ingress controller's log", 70)
        return []

    @staticmethod
    def _manifest(obj: dict[str, Any], state: AnalysisState) -> list[Finding]:
        facts = _facts(state)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        name = str(meta.get("name") or "")
        if obj.get("kind") == "Ingress":
            annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
            assert isinstance(annotations, dict)
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            assert isinstance(spec, dict)
            cls = str(spec.get("ingressClassName") or annotations.get("kubernetes.io/ingress.class") or "")
            limit = next((str(v) for k, v in annotations.items() if str(k).endswith("/" + _BODY_KEY)), "")
            facts.update(ingress=name, namespace=str(meta.get("namespace") or ""), annotation=limit)
            if "nginx" in cls:
                facts["controller_ns"] = CONTROLLER_NS
                state.lead(ObjRef("pod", "*", CONTROLLER_NS), "the ingress controller", 60)
                state.lead(ObjRef("configmap", CONTROLLER_CM, CONTROLLER_NS), "the controller's defaults", 95)
            return []
        if obj.get("kind") == "ConfigMap" and "ingress" in name and facts.get("ingress"):
            data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
            assert isinstance(data, dict)
            facts["controller_read"] = True
            if data.get(_BODY_KEY):
                facts["controller_limit"] = str(data[_BODY_KEY])
            if facts.get("annotation") or data.get(_BODY_KEY):
                return []
            ingress = facts["ingress"]
            return [
                Finding(
                    "ingress_default_body_limit",
                    f"The Ingress {ingress} sets no {_BODY_KEY} annotation "
                    f"and the controller ConfigMap {name} "
                    f"none either, so the default body size limit of {DEFAULT_LIMIT} applies: larger request "
                    "bodies are refused with 413.",
                    Severity.WARNING,
                    f"ingress/{facts.get('namespace')}/{ingress}",
                    f"no nginx.ingress.kubernetes.io/{_BODY_KEY}; ConfigMap {name} has no {_BODY_KEY}",
                    80,
                    f"Annotate Ingress {ingress} with nginx.ingress.kubernetes.io/{_BODY_KEY} set to the "
                    "largest body the application accepts.",
                )
            ]
        return []

    @staticmethod
    def _refusals(out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = _facts(state)
        lines = out.text.splitlines()
        refused = [ln for ln in lines if _TOO_LARGE.search(ln)]
        statuses = sum(1 for ln in lines if _ACCESS_413.search(ln))
        sizes = [int(m.group(1)) for ln in refused if (m := _TOO_LARGE.search(ln)) and m.group(1)]
        # The limit where it was read: the Ingress's annotation, the controller's ConfigMap, or nginx's
        # default once both were read without one; else unknown, and said so.
        limit = str(facts.get("annotation") or facts.get("controller_limit") or "")
        if not limit and facts.get("ingress") and facts.get("controller_read"):
            limit = DEFAULT_LIMIT
        limit = limit or (
            f"its body size limit (where it is set was not read; nginx's default is {DEFAULT_LIMIT})"
        )
        pod = str(out.params.get("pod_name") or "")
        backend = str(facts.get("ingress") or "the backend")
        smallest = f" (the smallest refused: {min(sizes)} bytes)" if sizes else ""
        return [
            Finding(
                "ingress_body_too_large",
                f"The ingress controller rejects uploads larger than {limit} "
                "with 413 (client intended to send "
                f"too large body){smallest} before they reach {backend}: {len(refused)} refused, "
                f"{statuses} answered 413 in its log.",
                Severity.CRITICAL,
                f"pod/{pod}" if pod else "",
                clip(refused[-1], 200),
                88,
                f"Raise the body size limit for {backend} (nginx.ingress.kubernetes.io/{_BODY_KEY}).",
            )
        ]
