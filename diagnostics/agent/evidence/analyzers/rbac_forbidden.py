"""A controller the API server refuses a read or a write: its RBAC does not grant the resource.

A new version of a controller often reads a resource its old one did not (Endpoints -> EndpointSlices,
Ingress -> IngressClass, a new CRD); its Role or ClusterRole, managed elsewhere, was not updated. The
API server answers 403 and client-go's reflector logs "failed to list *v1.EndpointSlice:
endpointslices.discovery.k8s.io is forbidden: User "system:serviceaccount:<ns>:<sa>" cannot list
resource "endpointslices" in API group "discovery.k8s.io" in the namespace "<ns>"" (or "at the cluster
scope"); the Python client prints "(403) Reason: Forbidden" with the same message in its body. The
process keeps running (its informer caches never sync), so the pod is Ready and nothing restarts: only
its work stops. Read from the log (who, which verb, which resource, where), then the Role or ClusterRole
the service account is bound to (what it does grant).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity
from diagnostics.agent.request.timewindow import iso, line_time

_Q = r"[\\\"']{0,2}"  # a quote, escaped or not
_FORBIDDEN = rx.compile(
    rf"is forbidden:? User {_Q}system:serviceaccount:([\w.-]+):([\w.-]+){_Q} cannot (\w+) resource "
    rf"{_Q}([\w.-]+){_Q}(?: in API group {_Q}([\w.-]*){_Q})?"
    rf"(?: in the namespace {_Q}([\w.-]+)| at the cluster scope)?",
    rx.IGNORECASE,
)
_VERSION_START = rx.compile(
    r"\b([a-z][\w-]+)[ :]+v?(\d+\.\d+\.\d+[\w.-]*)\b[^\n]{0,60}\bstart", rx.IGNORECASE
)
_STALLED = rx.compile(
    r"[^\n]*\b(?:sync\w*|reconcil\w*)\b[^\n]*\b(?:skipped|not synced|timed out|failed|stalled)\b[^\n]*",
    rx.IGNORECASE,
)
_LEVEL = rx.compile(r"\b(?:WARN\w*|ERROR|error|warning|E\d{4})\b")
# Reads the finding waits for the Role before it is stated without what the Role grants.
_WAIT = 3


def _rules(obj: dict[str, Any]) -> list[str]:
    """The resources a Role or ClusterRole grants (any verb), in its order."""
    granted: list[str] = []
    for rule in obj.get("rules") or []:
        if isinstance(rule, dict):
            granted += [str(r) for r in rule.get("resources") or [] if str(r) not in granted]
    return granted


def _verbs_on(obj: dict[str, Any], resource: str) -> list[str]:
    """The verbs a role grants on ``resource`` (empty: it does not name it)."""
    verbs: list[str] = []
    for rule in obj.get("rules") or []:
        if isinstance(rule, dict) and {resource, "*"} & {str(r) for r in rule.get("resources") or []}:
            verbs += [str(v) for v in rule.get("verbs") or [] if str(v) not in verbs]
    return verbs


def _allows(obj: dict[str, Any], verb: str, resource: str) -> bool:
    for rule in obj.get("rules") or []:
        if not isinstance(rule, dict):
            continue
        resources = [str(r) for r in rule.get("resources") or []]
        verbs = [str(v) for v in rule.get("verbs") or []]
        if (resource in resources or "*" in resources) and (verb in verbs or "*" in verbs):
            return True
    return False


def _listing(items: list[str]) -> str:
    if not items:
        return "nothing"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _gerund(verb: str) -> str:
    """``list`` -> ``listing``, ``create`` -> ``creating``, ``get`` -> ``getting``."""
    verb = verb.lower()
    if verb == "get":
        return "getting"
    return (verb[:-1] if verb.endswith("e") else verb) + "ing"


def _hhmm(line: str) -> str:
    moment = line_time(line)
    return moment.strftime("%H:%M") if moment else ""


@register
class RbacForbiddenAnalyzer(Analyzer):
    name = "rbac_forbidden"

    def applies(self, out: ToolOutput) -> bool:
        return True  # every read: one may be the Role awaited

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("rbac_forbidden")
        if facts.get("awaiting"):
            note_wait(facts)
        if "forbidden" in out.text.lower() and not facts.get("resource"):
            self._read_log(out, state, facts)
        if "rbac.authorization.k8s.io" in out.text:
            obj = manifest_of(out.text)
            if obj is not None:
                self._read_rbac(obj, state, facts)
        return self._finding(facts)

    @staticmethod
    def _read_log(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        lines = out.text.splitlines()
        hits = [ln for ln in lines if _FORBIDDEN.search(ln)]
        if not hits:
            return
        match = _FORBIDDEN.search(hits[-1])
        assert match is not None
        sa_ns, sa, verb, resource, group, namespace = match.groups()
        stamped = [ln for ln in lines if line_time(ln)]
        started = next((m for ln in lines if (m := _VERSION_START.search(ln))), None)
        stalled = [m.group(0).strip() for ln in lines if _LEVEL.search(ln) and (m := _STALLED.search(ln))]
        facts.update(
            sa=sa,
            sa_ns=sa_ns,
            verb=verb,
            resource=resource,
            group=group or "",
            namespace=namespace or "",
            line=hits[-1],
            count=len(hits),
            pod=str(out.params.get("pod_name") or out.params.get("name") or ""),
            version=f"{started.group(1)} {started.group(2)}" if started else "",
            since=_hhmm(stamped[0]) if stamped else "",
            stalled=stalled[-1] if stalled else "",
            awaiting=True,
        )
        start_wait(facts)
        where = namespace or sa_ns
        state.lead(ObjRef("role", sa, where), "the Role its service account is refused by", 86)
        state.lead(ObjRef("rolebinding", sa, where), "what its service account is bound to", 85)

    @staticmethod
    def _read_rbac(obj: dict[str, Any], state: AnalysisState, facts: dict[str, Any]) -> None:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        kind, name = str(obj.get("kind") or ""), str(meta.get("name") or "")
        if kind in ("RoleBinding", "ClusterRoleBinding") and facts.get("sa"):
            subjects = [s for s in obj.get("subjects") or [] if isinstance(s, dict)]
            if any(s.get("name") == facts["sa"] for s in subjects):
                ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
                assert isinstance(ref, dict)
                role_kind = str(ref.get("kind") or "Role").lower()
                namespace = "" if role_kind == "clusterrole" else str(meta.get("namespace") or "")
                facts["bound"] = str(ref.get("name") or "")
                state.lead(ObjRef(role_kind, facts["bound"], namespace), "the bound role", 86)
        elif kind in ("Role", "ClusterRole"):
            roles = facts.setdefault("roles", {})
            roles[name] = {
                "kind": kind,
                "namespace": str(meta.get("namespace") or ""),
                "granted": _rules(obj),
                "allows": (
                    _allows(obj, str(facts.get("verb")), str(facts.get("resource")))
                    if facts.get("resource")
                    else None
                ),
                "obj": obj,
            }

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("resource") or facts.get("reported"):
            return []
        roles: dict[str, Any] = facts.get("roles") or {}
        for role in roles.values():  # a Role read before the log: judge it now
            if role["allows"] is None:
                role["allows"] = _allows(role["obj"], str(facts["verb"]), str(facts["resource"]))
        role = (
            roles.get(str(facts.get("bound"))) or roles.get(facts["sa"]) or next(iter(roles.values()), None)
        )
        if role is None and still_waiting(facts, _WAIT):
            return []
        facts["reported"] = True
        resource, verb = str(facts["resource"]), str(facts["verb"])
        group = f" (API group {facts['group']})" if facts.get("group") else ""
        where = f"in namespace {facts['namespace']}" if facts.get("namespace") else "at the cluster scope"
        who = str(facts.get("version") or facts["sa"])
        since = f", rolled out at {facts['since']} (when its log starts)," if facts.get("since") else ""
        if role is not None and not role["allows"]:
            name = next(n for n, r in roles.items() if r is role)
            place = f" in namespace {role['namespace']}" if role["namespace"] else ""
            role_is = f"the {role['kind']} {name}{place}"
            verbs = _verbs_on(role["obj"], resource)
            if verbs:
                why = f"{role_is} grants {resource} only to {_listing(verbs)}, not {verb}"
            else:
                why = f"{role_is} grants only {_listing(role['granted'])}, not {resource}"
        elif role is not None:
            why = (
                f"its {role['kind']} grants {resource}, but the binding to its service account may be missing"
            )
        else:
            why = "its Role or ClusterRole does not grant it"
        stalled = (
            f"; what it does is no longer synced ('{clip(str(facts['stalled']), 120)}')"
            if facts.get("stalled")
            else ""
        )
        return [
            Finding(
                "rbac_forbidden",
                f"{who}{since} needs to {verb} {resource}{group} {where}, but {why}: {_gerund(verb)} "
                f"{resource} is forbidden for the service account {facts['sa_ns']}/{facts['sa']} "
                f"({facts['count']} refusal(s) in its log){stalled}.",
                Severity.CRITICAL,
                f"serviceaccount/{facts['sa_ns']}/{facts['sa']}",
                clip(str(facts["line"])),
                89,
                f"Add {resource}{group} with the verbs get, list and watch to the "
                f"{role['kind'] if role else 'Role'} "
                f"bound to {facts['sa_ns']}/{facts['sa']} (where RBAC is managed), or roll back the version "
                "that started reading it.",
                # When it was last seen true: the latest refusal's time (unknown: the read's time).
                at=iso(moment) if (moment := line_time(str(facts["line"]))) else "",
            )
        ]
