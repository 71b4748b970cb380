"""A call that fails in its protocol's own terms: TLS names, gRPC status codes, a proxy's upstream errors.

The line a client or proxy logs when a call fails names the layer that refused it, and each protocol
defines what its refusal means:

- TLS (RFC 6125): a server certificate is valid only for the DNS names it lists (its SANs). Go's
  "x509: certificate is valid for A, B, not C", OpenSSL's "hostname mismatch", curl's "no alternative
  certificate subject name matches", Java's "No subject alternative DNS name matching": the client calls
  the server by a name the certificate does not list (a reissued certificate that dropped it, a client
  using another form of the Service's name). The server's namespace (``name.namespace.svc``) is read for
  the Certificate that says which names it was issued for.
- gRPC status codes (grpc/doc/statuscodes.md): ``ResourceExhausted`` with "received message larger than
  max (A vs. B)" is the receiver's maximum message size (4 MiB by default) against a response of A bytes;
  ``Unavailable``, ``DeadlineExceeded``, ``Unimplemented``, ``PermissionDenied``, ``Unauthenticated`` as
  the codes define them. The callee is the workload named like the method's package.
- nginx's upstream errors (what ingress-nginx logs as it answers 502/504 to the client): "upstream sent
  too big header" (the response headers exceed ``proxy_buffer_size``, ingress-nginx's
  ``proxy-buffer-size``, 4k or 8k by default), "upstream prematurely closed connection", "upstream timed
  out", "no live upstreams", "connect() failed (111: Connection refused)". The application behind it may
  log a success for the same request.

An Ingress read leads to its controller's pods (a namespace named after the ingress class or "ingress"),
whose log holds the proxy's side.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    parse_events,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait
from diagnostics.agent.findings import Finding, ObjRef, Severity

_TLS_NAME = rx.compile(
    r"certificate is valid for ([^\n\"]+?), not ([\w.*-]+)|hostname mismatch|"
    r"no alternative certificate subject name matches target host name '([\w.-]+)'|"
    r"No subject alternative DNS name matching ([\w.-]+)",
    rx.IGNORECASE,
)
_SVC_NAME = rx.compile(r"^([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.|$)")
_GRPC = rx.compile(r"code = (\w+) desc = ([^\"\n]*)")
_GRPC_SIZE = rx.compile(r"received message larger than max \((\d+) vs\.? (\d+)\)")
_GRPC_METHOD = rx.compile(r"/([a-z][\w]*)(?:\.v\d+\w*)?\.(\w+)/(\w+)")
_GRPC_MEANING = {
    "Unavailable": "the server cannot be reached or is not serving (a transient condition)",
    "DeadlineExceeded": "the call did not finish within its deadline",
    "Unimplemented": "the server does not implement the method (a client newer than the server)",
    "PermissionDenied": "the caller is not allowed to call the method",
    "Unauthenticated": "the call carries no valid credentials",
    "ResourceExhausted": "a resource is exhausted (a quota, or a message size limit)",
}
_NGINX = rx.compile(
    r"upstream sent too big header|upstream prematurely closed connection|upstream timed out|"
    r"no live upstreams|connect\(\) failed \(111: Connection refused\) while connecting to upstream"
)
_NGINX_MEANING = {
    "upstream sent too big header": (
        502,
        "the upstream's response headers (large cookies, a long redirect) exceed the proxy buffer nginx "
        "reads headers into (proxy_buffer_size; ingress-nginx's proxy-buffer-size, 4k by default), so "
        "nginx answers 502 although the application answered",
    ),
    "upstream prematurely closed connection": (502, "the upstream closed the connection mid-response"),
    "upstream timed out": (504, "the upstream did not answer within the proxy's read timeout"),
    "no live upstreams": (502, "every upstream of the backend is marked down"),
    "connect() failed (111: Connection refused) while connecting to upstream": (
        502,
        "nothing listens on the upstream's port",
    ),
}
_UPSTREAM = rx.compile(r"upstream: \"https?://([\d.]+:\d+)")
_SERVER = rx.compile(r"server: ([\w.-]+)")
_REQUEST = rx.compile(r"request: \"[A-Z]+ (\S+)")
_ACCESS = rx.compile(r"\"(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (\S+) HTTP/[\d.]+\" (\d{3})\b")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _pods(state: AnalysisState) -> dict[str, list[str]]:
    return state.fact_dict("protocol_pods")


def _tls(line: str, where: str, state: AnalysisState) -> tuple[str, str, int]:
    match = _TLS_NAME.search(line)
    assert match is not None
    valid, used = match.group(1), match.group(2) or match.group(3) or match.group(4) or ""
    facts = state.fact_dict("tls_names")
    peer = _SVC_NAME.match(used or "")
    if peer and not facts.get("peer"):
        facts.update(peer=peer.group(1), namespace=peer.group(2), used=used)
        for kind in ("event", "certificate"):
            state.lead(ObjRef(kind, "*", peer.group(2)), f"the certificate {peer.group(1)} serves", 80)
    listed = f"valid for {valid}" if valid else "issued for other names"
    summary = (
        f"Calls fail TLS certificate verification{where}: the server's certificate is {listed}, not for "
        f"{used or 'the name the client uses'}, the name the client uses: a certificate is valid only for "
        "the DNS names (SANs) it lists, so its dnsNames lack the name the client calls"
    )
    return "tls_name_mismatch", summary, 84


def _grpc(line: str, where: str, state: AnalysisState, namespace: str) -> tuple[str, str, int]:
    match = _GRPC.search(line)
    assert match is not None
    code, desc = match.group(1), match.group(2).strip()
    method = _GRPC_METHOD.search(line)
    call = f"{method.group(3)} calls ({method.group(1)}.{method.group(2)})" if method else "gRPC calls"
    callee = ""
    if method:
        stem = method.group(1).lower()
        served = [p for p in _pods(state).get(namespace, []) if p.startswith(stem)]
        callee = f", answered by {rx.sub(r'-[a-z0-9]{8,10}-[a-z0-9]{5}$', '', served[0])}" if served else ""
    size = _GRPC_SIZE.search(line)
    if size:
        why = (
            f"the response ({size.group(1)} bytes){callee} is larger than the client's maximum receive "
            f"message size ({size.group(2)} bytes; gRPC's default is 4 MiB), so the client refuses it: "
            "the client must raise its max receive message size (MaxCallRecvMsgSize) or the server page "
            "its answer"
        )
        rank = 84
    else:
        why = f"{_GRPC_MEANING.get(code, 'the status the server returned')}{callee}: {clip(desc, 160)}"
        rank = 70
    return "grpc_status", f"{call} fail with gRPC status {code}{where}: {why}", rank


@register
class ProtocolErrorAnalyzer(Analyzer):
    name = "protocol_errors"

    def applies(self, out: ToolOutput) -> bool:
        return True  # logs, and the listings and objects that name the other side

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        namespace = str(out.params.get("namespace") or "")
        if not out.is_log:
            return self._read_objects(out, state, namespace) + _grpc_finding(state, out)
        _source, subject, where = log_subject(out, state)
        findings = []
        lines = out.text.splitlines()
        if not any(_NGINX.search(ln) for ln in lines):  # an application's access log: what it answered
            answered = state.fact_dict("answered")
            for match in _ACCESS.finditer(out.text):
                answered[match.group(1).split("?", 1)[0]] = match.group(2)
        explained: list[tuple[str, str, int, str]] = []
        if line := next((ln for ln in reversed(lines) if _TLS_NAME.search(ln)), ""):
            explained.append((*_tls(line, where, state), line))
        sized = [ln for ln in lines if _GRPC_SIZE.search(ln)]
        if sized:  # the largest refused message says most
            line = max(sized, key=lambda ln: int(_GRPC_SIZE.search(ln).group(1)))
        else:
            line = next((ln for ln in reversed(lines) if _GRPC.search(ln)), "")
        if line and not state.fact_dict("grpc").get("line"):
            # Stated once the namespace's pods are listed (the callee), or after a few reads.
            state.fact_dict("grpc").update(line=line, where=where, subject=subject, namespace=namespace)
            start_wait(state.fact_dict("grpc"))
            if namespace:
                state.lead(ObjRef("pod", "*", namespace), "the workload that answers the gRPC calls", 75)
        if line := next((ln for ln in reversed(lines) if _NGINX.search(ln)), ""):
            explained.append((*self._nginx(line, state, where), line))
        findings += _grpc_finding(state, out)
        for kind, summary, rank, line in explained:
            count = sum(1 for ln in lines if line[-60:] and _same(ln, line))
            findings.append(
                Finding(kind, f"{summary} ({count} lines).", Severity.CRITICAL, subject, clip(line), rank)
            )
        return findings

    @staticmethod
    def _nginx(line: str, state: AnalysisState, where: str) -> tuple[str, str, int]:
        match = _NGINX.search(line)
        assert match is not None
        code, meaning = _NGINX_MEANING.get(match.group(0), (502, "the upstream failed"))
        upstream = _UPSTREAM.search(line)
        server = _SERVER.search(line)
        to = f" for {server.group(1)}" if server else ""
        at = f" (upstream {upstream.group(1)})" if upstream else ""
        request = _REQUEST.search(line)
        path = request.group(1).split("?", 1)[0] if request else ""
        status = state.fact_dict("answered").get(path, "") if path else ""
        itself = f"; the application itself answered {path} with {status} (its own log)" if status else ""
        return (
            "proxy_upstream_error",
            f"The proxy answers {code}{to}{where}: nginx logs '{match.group(0)}'{at}: {meaning}{itself}",
            83,
        )

    @staticmethod
    def _read_objects(out: ToolOutput, state: AnalysisState, namespace: str) -> list[Finding]:
        if "NAME" in out.text and "STATUS" in out.text and namespace:
            table = parse_table(out.text)
            if table is not None and table.rows:
                _pods(state)[namespace] = [row[0] for row in table.rows if row]
        proxy = state.fact_dict("proxy")
        if str(out.params.get("kind") or "").startswith("ingress") and (table := parse_table(out.text)):
            proxy.setdefault("class", "ingress")  # an Ingress in front: its controller proxies the calls
            for row in table.rows[:3]:
                name = table.column(row, "NAME") if "NAME" in table.header else ""
                if name and namespace:
                    state.lead(ObjRef("ingress", name, namespace), "the Ingress in front of it", 70)
        if proxy.get("class") and not proxy.get("led"):
            for known in sorted(state.fact_set("namespaces")):
                if "ingress" in known or proxy["class"] in known:
                    proxy["led"] = True
                    state.lead(ObjRef("pod", "*", known), "the ingress controller (the proxy's side)", 78)
        tls = state.fact_dict("tls_names")
        if tls.get("peer") and namespace == tls.get("namespace"):
            for event in parse_events(out.text):
                if event.obj.lower().startswith("certificate/") and "dnsNames" in event.message:
                    name = event.obj.split("/", 1)[1]
                    tls.setdefault("reissued", name)
                    state.lead(ObjRef("certificate", name, namespace), "reissued for other dnsNames", 82)
        obj = manifest_of(out.text) if "kind:" in out.text or '"kind"' in out.text else None
        if not obj:
            return []
        kind = str(obj.get("kind") or "")
        spec: dict[str, Any] = _dict(obj.get("spec"))
        if kind == "Ingress":
            state.fact_dict("proxy").setdefault("class", str(spec.get("ingressClassName") or "ingress"))
        if kind == "Certificate" and tls.get("peer") and not tls.get("reported"):
            names = [str(n) for n in spec.get("dnsNames") or []]
            name = str((obj.get("metadata") or {}).get("name") or "")
            if names and tls["used"] not in names:
                tls["reported"] = True
                return [
                    Finding(
                        "certificate_lacks_name",
                        f"The Certificate {name} (namespace {namespace}) that {tls['peer']} serves lists "
                        f"dnsNames {', '.join(names)}, not {tls['used']}, the name its clients call: "
                        "reissued with dnsNames that lack it, so clients calling that name fail TLS "
                        "verification.",
                        Severity.CRITICAL,
                        f"certificate/{namespace}/{name}",
                        f"dnsNames: {', '.join(names)}",
                        86,
                        f"Add {tls['used']} to the Certificate's dnsNames, or call a name it lists.",
                    )
                ]
        return []


def _same(line: str, key: str) -> bool:
    """Whether ``line`` states the same failure as ``key`` (its pattern's text)."""
    for pattern in (_TLS_NAME, _GRPC, _NGINX):
        a, b = pattern.search(line), pattern.search(key)
        if a and b:
            return True
    return False


def _grpc_finding(state: AnalysisState, out: ToolOutput) -> list[Finding]:
    facts = state.fact_dict("grpc")
    if not facts.get("line") or facts.get("reported"):
        return []
    if facts["namespace"] not in _pods(state) and note_wait(facts, out) <= 3:
        return []
    facts["reported"] = True
    line = str(facts["line"])
    kind, summary, rank = _grpc(line, str(facts["where"]), state, str(facts["namespace"]))
    return [Finding(kind, f"{summary}.", Severity.CRITICAL, str(facts["subject"]), clip(line), rank)]
