"""A service mesh that requires mutual TLS, called by a client that has no sidecar.

Istio's ``PeerAuthentication`` sets how a workload's sidecar accepts connections: ``PERMISSIVE`` takes
both mutual TLS and plaintext, ``STRICT`` only mutual TLS. A client inside the mesh has its own sidecar
(``istio-proxy``), which originates mutual TLS for it; a client outside it (a namespace without the
``istio-injection=enabled`` label or a revision label, a pod with injection off) sends plaintext, which a
STRICT sidecar does not accept: Envoy closes the connection ("NR filter_chain_not_found" in its access
log), and the client sees "connection reset by peer" (or an EOF). The mesh's own clients keep working, so
the server looks healthy; only callers without a sidecar fail, from the moment the policy was applied.
(Linkerd's ``Server`` with ``proxyProtocol`` and an authorization policy refuse the same way.)

Read from the client's log (the reset, and the address it called: ``<service>.<namespace>.svc``), the
server namespace's PeerAuthentications (listing or ``-o yaml``), the namespaces' labels, the client's and
the server's pod listings (how many containers each runs) and the server sidecar's access log.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.evidence.analyzers.once import SERVICE_HOST, OnceAnalyzer
from diagnostics.agent.findings import Finding, ObjRef, Severity

_RESET = rx.compile(r"(?i)connection reset by peer|ECONNRESET|connection reset|unexpected EOF")
_WORKLOAD = rx.compile(r"^(.+?)-(?:[a-z0-9]{8,10}|\d{8})-[a-z0-9]{5}$")
_INJECTED = rx.compile(r"istio-injection=enabled|istio\.io/rev=")


def workload_of(pod: str) -> str:
    """A pod's workload: its name without the ReplicaSet hash or the Job's schedule and the suffix."""
    match = _WORKLOAD.match(pod)
    return match.group(1) if match else pod


def _ready_total(ready: str) -> int:
    return int(ready.split("/", 1)[1]) if "/" in ready and ready.split("/", 1)[1].isdigit() else 0


@register
class MeshMtlsAnalyzer(OnceAnalyzer):
    name = "mesh_mtls"

    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if out.is_log:
            self._log(out, state, facts, namespace)
        else:
            self._objects(out, facts, namespace)

    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("server_ns"):
            return []
        strict = (facts.get("strict") or {}).get(facts["server_ns"])
        finding = None if strict is None else _finding(facts, strict)
        return [finding] if finding is not None else []

    @staticmethod
    def _log(out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if "filter_chain_not_found" in out.text:
            facts["proxy_line"] = next(ln for ln in out.text.splitlines() if "filter_chain_not_found" in ln)
        if facts.get("server_ns"):
            return
        lines = [ln for ln in out.text.splitlines() if _RESET.search(ln)]
        host = next((m for m in (SERVICE_HOST.search(ln) for ln in out.text.splitlines()) if m), None)
        if not lines or host is None or host.group(2) == namespace:
            return
        _src, subject, _where = log_subject(out, state)
        pod = str(out.params.get("pod_name") or "")
        facts.update(
            server=host.group(1),
            server_ns=host.group(2),
            client_pod=pod,
            client_ns=namespace,
            line=lines[-1].strip(),
            subject=subject,
        )
        for kind in ("peerauthentication", "pod"):
            state.lead(ObjRef(kind, "*", host.group(2)), f"how {host.group(1)} accepts connections", 84)
        state.lead(ObjRef("namespace", "*"), "which namespaces the mesh injects", 80)

    @staticmethod
    def _objects(out: ToolOutput, facts: dict[str, Any], namespace: str) -> None:
        manifest = manifest_of(out.text)
        if manifest is not None and manifest.get("kind") == "PeerAuthentication":
            meta, spec = manifest.get("metadata") or {}, manifest.get("spec") or {}
            mode = str((spec.get("mtls") or {}).get("mode") or "")
            if mode.upper() == "STRICT":
                ns = str(meta.get("namespace") or namespace)
                created = str(meta.get("creationTimestamp") or "")
                facts.setdefault("strict", {})[ns] = (str(meta.get("name")), created)
            return
        table = parse_table(out.text)
        if table is None:
            return
        kind = str(out.params.get("kind") or "").lower()
        if "MODE" in table.header and kind.startswith("peerauthentication"):
            for row in table.rows:
                if row and table.column(row, "MODE").upper() == "STRICT":
                    age = f"{table.column(row, 'AGE')} ago"
                    facts.setdefault("strict", {}).setdefault(namespace, (row[0], age))
        if "LABELS" in table.header and kind.startswith("namespace"):
            facts["labels"] = {r[0]: table.column(r, "LABELS") for r in table.rows if r}
        if "READY" in table.header and namespace:
            facts.setdefault("containers", {}).update(
                {(namespace, r[0]): _ready_total(table.column(r, "READY")) for r in table.rows if r}
            )


def _finding(facts: dict[str, Any], strict: tuple[str, str]) -> Finding | None:
    server, server_ns, client_ns = facts["server"], facts["server_ns"], facts["client_ns"]
    client_pod = str(facts["client_pod"])
    labels: dict[str, str] = facts.get("labels") or {}
    containers: dict[tuple[str, str], int] = facts.get("containers") or {}
    mine = containers.get((client_ns, client_pod), 0)
    theirs = [n for (ns, pod), n in containers.items() if ns == server_ns and pod.startswith(server)]
    no_label = client_ns in labels and not _INJECTED.search(labels[client_ns])
    no_sidecar = bool(mine and theirs and mine < max(theirs))
    if not (no_label or no_sidecar):
        return None
    name, since = strict
    when = f" (created {since})" if since and "ago" not in since else (f" ({since})" if since else "")
    why = []
    if no_sidecar:
        why.append(f"runs {mine} container where the {server} pods run {max(theirs)}")
    if no_label:
        why.append(f"its namespace {client_ns} has no istio-injection label")
    proxy = (
        f" (its access log: NR filter_chain_not_found, '{clip(str(facts['proxy_line']), 120)}')"
        if facts.get("proxy_line")
        else ""
    )
    client = workload_of(client_pod)
    summary = (
        f"The {client} calls to {server} are reset: the PeerAuthentication {name} in namespace {server_ns}"
        f"{when} requires STRICT mutual TLS, so the {server} sidecars (istio-proxy) refuse plaintext "
        f"connections{proxy}; the {client} pods in namespace {client_ns} have no istio-proxy sidecar "
        f"({'; '.join(why)}), so they connect in plaintext. Clients in the mesh, with a sidecar, keep "
        f"working. '{clip(str(facts['line']), 160)}'"
    )
    return Finding(
        "mtls_strict_client_without_sidecar",
        clip(summary, 900),
        Severity.CRITICAL,
        str(facts["subject"]),
        clip(str(facts["line"])),
        91,
        f"Put the {client} pods in the mesh (label namespace {client_ns} for injection and restart them), "
        f"or set the PeerAuthentication {name} to PERMISSIVE for {server}'s port until they are.",
    )
