"""Pods that cannot pull their image because the registry rate-limits the pulls (HTTP 429).

Public registries cap pulls per client: Docker Hub's anonymous limit is per source IP ("429 Too Many
Requests - Server message: toomanyrequests: You have reached your unauthenticated pull rate limit", older
"You have reached your pull rate limit. You may increase the limit by authenticating and upgrading"), ECR
Public answers "toomanyrequests: Rate exceeded", Quay "TOOMANYREQUESTS", others a bare 429. Nodes behind
one NAT share the limit; a node that already holds the image (imagePullPolicy IfNotPresent, a pinned tag)
never asks, so the failure falls on new nodes (an autoscaler scale-up) while the old pods keep running.
Pulling with credentials (imagePullSecrets on the pod or its service account) or from a mirror lifts it.

Read from the kubelet's pull events (which image, which registry, the wording), the pod listing (which
pods fail, on which nodes; which run), the node listing (how old each node is), the service account and
the template (imagePullSecrets, the pull policy). Current while a pod of the workload still fails to pull;
when the listing shows them all running it is history.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_LIMITED = rx.compile(
    r"toomanyrequests|too many requests|\b429\b|pull rate limit|rate exceeded", rx.IGNORECASE
)
_PULL = rx.compile(r"(?:failed to pull|pulling|error pulling|reading manifest)[^\n]*", rx.IGNORECASE)
_IMAGE = rx.compile(r"image \\?\"?([\w./:@-]+[\w])\\?\"?", rx.IGNORECASE)
_HOST = rx.compile(r"https?://([\w.-]+)/v2/")
_AGE = rx.compile(r"(\d+)([dhms])")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_FAILING = ("ErrImagePull", "ImagePullBackOff")
_REGISTRIES = {
    "docker.io": "Docker Hub",
    "registry-1.docker.io": "Docker Hub",
    "index.docker.io": "Docker Hub",
    "public.ecr.aws": "ECR Public",
    "quay.io": "Quay",
    "ghcr.io": "GitHub Container Registry",
}
_WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
# Reads the finding waits for the pod and node listings before it is stated without them.
_WAIT = 4


def age_seconds(value: str) -> int | None:
    """A kubectl AGE (``25m``, ``3h12m``, ``41d``) in seconds; None when it is not one."""
    value = value.strip()
    if not value or not rx.fullmatch(r"(?:\d+[dhms])+", value):
        return None
    return sum(int(n) * _UNITS[u] for n, u in _AGE.findall(value))


def _count(n: int) -> str:
    return _WORDS[n] if n < len(_WORDS) else str(n)


def registry_of(image: str, line: str) -> str:
    host = _HOST.search(line)
    name = host.group(1) if host else ""
    if not name:
        first = image.split("/", 1)[0] if "/" in image else ""
        name = first if "." in first or ":" in first else "docker.io"
    return _REGISTRIES.get(name, name)


def _start_time(text: str) -> datetime | None:
    raw = field_value(text, "Start Time")
    try:
        return datetime.strptime(raw, "%a, %d %b %Y %H:%M:%S %z") if raw else None
    except ValueError:
        return None


@register
class PullRateLimitAnalyzer(Analyzer):
    name = "pull_rate_limited"

    def applies(self, out: ToolOutput) -> bool:
        return True  # listings and the service account matter once a pull was refused

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("pull_rate_limit")
        text = out.text
        if facts.get("line"):
            note_wait(facts)
        self._read_listings(out, facts)
        if "Image pull secrets:" in text:
            secrets = field_value(text, "Image pull secrets")
            facts["sa_secrets"] = "" if secrets in ("<none>", "") else secrets
        obj = manifest_of(text) if "apiVersion" in text[:2000] else None
        if obj is not None:
            self._read_template(obj, facts)
        if "TriggeredScaleUp" in text:
            facts["scaled_up"] = True
        if not facts.get("line"):
            self._read_refusal(out, state, facts)
        if start := _start_time(text):
            facts.setdefault("starts", {})[field_value(text, "Name")] = start
        return self._finding(facts)

    @staticmethod
    def _read_listings(out: ToolOutput, facts: dict[str, Any]) -> None:
        table = parse_table(out.text) if "AGE" in out.text else None
        if table is None:
            return
        if "STATUS" in table.header and "NODE" in table.header and "READY" in table.header:
            pods = facts.setdefault("pods", {})
            for row in table.rows:
                if row:
                    pods[row[0]] = (
                        table.column(row, "STATUS"),
                        table.column(row, "NODE"),
                        age_seconds(table.column(row, "AGE")),
                    )
        elif "ROLES" in table.header and "VERSION" in table.header:
            nodes = facts.setdefault("nodes", {})
            for row in table.rows:
                if row and (age := age_seconds(table.column(row, "AGE"))) is not None:
                    nodes[row[0]] = age

    @staticmethod
    def _read_template(obj: dict[str, Any], facts: dict[str, Any]) -> None:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        template = spec.get("template") if isinstance(spec.get("template"), dict) else {"spec": spec}
        assert isinstance(template, dict)
        pod = template.get("spec") if isinstance(template.get("spec"), dict) else {}
        assert isinstance(pod, dict)
        if not pod.get("containers"):
            return
        facts["template_secrets"] = [
            str(s.get("name")) for s in pod.get("imagePullSecrets") or [] if isinstance(s, dict)
        ]
        facts["service_account"] = str(pod.get("serviceAccountName") or "default")
        policies = {str(c.get("imagePullPolicy") or "") for c in pod["containers"] if isinstance(c, dict)}
        facts["policy"] = next(iter(policies - {""}), "")

    @staticmethod
    def _read_refusal(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        lines = [ln for ln in out.text.splitlines() if _LIMITED.search(ln) and _PULL.search(ln)]
        if not lines:
            return
        line = lines[-1]
        image = _IMAGE.search(line)
        if image is None:
            return
        pod = field_value(out.text, "Name") or next(
            (m.group(1) for m in [rx.search(r"\bpod/([\w.-]+)", line)] if m), ""
        )
        namespace = field_value(out.text, "Namespace") or str(out.params.get("namespace") or "")
        facts.update(
            line=line,
            image=image.group(1),
            registry=registry_of(image.group(1), line),
            unauthenticated="unauthenticated" in line.lower() or "anonymous" in line.lower(),
            pod=pod,
            namespace=namespace,
            workload=workload_of(pod) if pod else "",
        )
        start_wait(facts)
        state.lead(ObjRef("node", "*"), "how old the nodes the pulls fail on are", 80)
        if namespace:
            state.lead(ObjRef("pod", "*", namespace), "which pods fail to pull, and on which nodes", 80)
            account = str(facts.get("service_account") or field_value(out.text, "Service Account"))
            if account:
                state.lead(ObjRef("serviceaccount", account, namespace), "its image pull secrets", 79)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("line") or facts.get("reported"):
            return []
        pods: dict[str, tuple[str, str, int | None]] = facts.get("pods") or {}
        nodes: dict[str, int] = facts.get("nodes") or {}
        if (not pods or not nodes) and still_waiting(facts, _WAIT):
            return []
        facts["reported"] = True
        workload = str(facts.get("workload") or "")
        mine = {p: v for p, v in pods.items() if not workload or workload_of(p) == workload}
        failing = {p: v for p, v in mine.items() if v[0] in _FAILING}
        running = {p: v for p, v in mine.items() if v[0] == "Running"}
        now = next(
            (
                start + timedelta(seconds=v[2])
                for p, start in (facts.get("starts") or {}).items()
                if (v := mine.get(p)) and v[2]
            ),
            None,
        )
        image, registry = str(facts["image"]), str(facts["registry"])
        who = f"{_count(len(failing))} {workload} pods" if failing else f"the {workload or 'workload'} pods"
        where = ""
        new_nodes = sorted({v[1] for v in failing.values() if v[1] in nodes})
        if new_nodes:
            youngest = max(nodes[n] for n in new_nodes)
            added = (
                f" at {(now - timedelta(seconds=youngest)).strftime('%H:%M')}"
                if now
                else f" {youngest // 60} min before this read"
            )
            by = "the cluster autoscaler added" if facts.get("scaled_up") else "were added"
            where = f" on the nodes {by}{added} ({', '.join(new_nodes)})"
        quiet = (
            "the unauthenticated pull rate limit" if facts.get("unauthenticated") else "its pull rate limit"
        )
        secrets_seen = "template_secrets" in facts or "sa_secrets" in facts
        anonymous = (
            " (no imagePullSecrets on the pod template or its service account)"
            if secrets_seen and not facts.get("template_secrets") and not facts.get("sa_secrets")
            else ""
        )
        summary = (
            f"The {who}{where} cannot pull {image}: {registry} answers 429 toomanyrequests, "
            f"{quiet}{anonymous}."
        )
        old_nodes = sorted({v[1] for v in running.values() if v[1] in nodes and v[1] not in new_nodes})
        if running and old_nodes:
            cached = " (imagePullPolicy IfNotPresent)" if facts.get("policy") in ("IfNotPresent", "") else ""
            summary += (
                f" The {_count(len(running))} running pods are on older nodes ({', '.join(old_nodes)}) that "
                f"already had the image{cached}."
            )
        over = bool(mine) and not failing
        pod = str(facts.get("pod") or "")
        return [
            Finding(
                "pull_rate_limited",
                summary if not over else f"{summary} It is over: the listing shows none failing to pull now.",
                Severity.INFO if over else Severity.CRITICAL,
                f"pod/{facts.get('namespace')}/{pod}" if pod else f"image/{image}",
                clip(str(facts["line"])),
                30 if over else 91,
                "Pull with credentials (an imagePullSecret on the service account: authenticated pulls have "
                f"a higher limit), or from a mirror or pull-through cache of {registry}; pre-pull the image "
                "on new nodes.",
                history=over,
            )
        ]
