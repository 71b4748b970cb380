"""DNS search-list expansion: each lookup of an external name first tries every search domain.

A pod with ``dnsPolicy: ClusterFirst`` gets ``search <ns>.svc.cluster.local svc.cluster.local
cluster.local <node's domains>`` and ``options ndots:5`` in its resolv.conf. A name with fewer dots than
ndots (``api.example.com`` has 2) is tried with each search domain appended first, A and AAAA each: four
or more NXDOMAIN answers before the real one. Usually cheap; slow when one search domain is forwarded to a
resolver that answers slowly or not at all (the node's cloud domain, ``compute.internal``), and a load on
CoreDNS. Seen in CoreDNS's query log (the ``log`` plugin: ``"A IN name. udp ..." NXDOMAIN ... 0.0001s``):
the same base name with the search suffixes, NXDOMAIN, then the name itself NOERROR. A trailing dot
(``api.example.com.``) or ``dnsConfig.options ndots: 1`` or 2 skips the search list.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.findings import Finding, Severity

_QUERY = rx.compile(
    r"\"(?:A|AAAA) IN ([\w.-]+)\. (?:udp|tcp) \d+ \w+ \d+\" (NXDOMAIN|NOERROR|SERVFAIL)\S* \S+ \d+ ([\d.]+)s"
)
_ERROR = rx.compile(r"plugin/errors: \d+ ([\w.-]+)\. \w+: [^\n]*(i/o timeout|connection refused)")
_CALL = rx.compile(r"\btotal=(\d+)ms\b[^\n]*\bdns=(\d+)ms|\bdns=(\d+)ms[^\n]*\btotal=(\d+)ms")
_SLOW = 0.5  # seconds a search-domain answer takes before it is called slow
_NDOTS = 5


def _base(name: str, bases: set[str]) -> tuple[str, str]:
    """(base, suffix) when ``name`` is a known base name with a search suffix appended."""
    for base in bases:
        if name.startswith(base + ".") and len(name) > len(base) + 1:
            return base, name[len(base) + 1 :]
    return "", ""


@register
class DnsSearchAnalyzer(Analyzer):
    name = "dns_search_expansion"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("dns_search")
        text = out.text
        if (obj := manifest_of(text)) is not None and obj.get("kind") == "Pod":
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            assert isinstance(spec, dict)
            config = spec.get("dnsConfig") if isinstance(spec.get("dnsConfig"), dict) else {}
            assert isinstance(config, dict)
            ndots = [
                o.get("value")
                for o in config.get("options") or []
                if isinstance(o, dict) and o.get("name") == "ndots"
            ]
            if ndots:
                facts["ndots"] = int(str(ndots[0]))
            elif str(spec.get("dnsPolicy") or "ClusterFirst") == "ClusterFirst":
                facts.setdefault("ndots", _NDOTS)
                facts["policy"] = True
        if out.is_log:
            for line in text.splitlines():
                if (call := _CALL.search(line)) is not None:
                    total, dns = (
                        (call.group(1), call.group(2)) if call.group(1) else (call.group(4), call.group(3))
                    )
                    if int(dns) * 2 > int(total):
                        facts["call"] = f"dns={dns}ms of total={total}ms"
            queries: list[tuple[str, str, float]] = [
                (m.group(1).lower(), m.group(2), float(m.group(3))) for m in _QUERY.finditer(text)
            ]
            if queries:
                self._queries(queries, text, facts)
        return self._finding(facts)

    @staticmethod
    def _queries(queries: list[tuple[str, str, float]], text: str, facts: dict[str, Any]) -> None:
        found = {name for name, rcode, _ in queries if rcode == "NOERROR"}
        expanded: dict[str, dict[str, float]] = facts.setdefault("expanded", {})
        for name, rcode, seconds in queries:
            base, suffix = _base(name, found)
            if base and rcode == "NXDOMAIN" and base.count(".") >= 1:
                suffixes = expanded.setdefault(base, {})
                suffixes[suffix] = max(suffixes.get(suffix, 0.0), seconds)
        for match in _ERROR.finditer(text):
            base, suffix = _base(match.group(1).lower(), set(expanded))
            if base:
                facts.setdefault("timeouts", {}).setdefault(base, []).append(suffix)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        expanded: dict[str, dict[str, float]] = facts.get("expanded", {})
        candidates = [(len(s), b) for b, s in expanded.items() if len(s) >= 3]
        if not candidates or facts.get("reported"):
            return []
        facts["reported"] = True
        base = max(candidates)[1]
        suffixes = expanded[base]
        slow = sorted(s for s, t in suffixes.items() if t >= _SLOW)
        timeouts = sorted(set(facts.get("timeouts", {}).get(base, [])))
        ndots = int(facts.get("ndots") or _NDOTS)
        where = "the pod's ndots 5 (ClusterFirst's default)" if facts.get("policy") else f"ndots {ndots}"
        names = [f"{base}.{s}" if i in (0, len(suffixes) - 1) else f".{s}" for i, s in enumerate(suffixes)]
        listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
        slow_part = ""
        if slow or timeouts:
            bad = sorted(set(slow) | set(timeouts))
            took = max(suffixes[s] for s in bad)
            timed = " or times out" if timeouts else ""
            slow_part = (
                f"; the upstream resolver of {', '.join(f'{base}.{s}' for s in bad)} takes about {took:.2g}s"
                f"{timed}, so every lookup of {base} is slow"
            )
        call = (
            f" (its client logs {facts['call']}: DNS takes most of each slow call)"
            if facts.get("call")
            else ""
        )
        dots = base.count(".")
        return [
            Finding(
                "dns_search_expansion",
                f"Every lookup of {base} ({dots} dots, fewer than {where}) first tries each search domain: "
                f"CoreDNS answers NXDOMAIN for {listed} before the name itself{slow_part}{call}.",
                Severity.CRITICAL if slow_part else Severity.WARNING,
                f"dns/{base}",
                clip(f"{base}: {len(suffixes)} search-domain NXDOMAIN answers"),
                93 if slow_part else 60,  # above the forwarder's 92: the name that times out is an expansion
                f"Call the name fully qualified ({base}. with a trailing dot), or set dnsConfig.options "
                "ndots: 2 on the pod, so the search list is skipped; fix or drop the slow search domain.",
            )
        ]
