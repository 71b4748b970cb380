"""Logs (and alert text) -> failure findings: missing env vars and files, connection and DNS failures,
expired certificates, full disks, permissions (timing, exceptions and HTTP error rates: log_signals)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.shm import shm_line
from diagnostics.agent.findings import Finding, ObjRef, Remedy, Severity

_ENV_PATTERNS = (
    rx.compile(
        r"(?:environment variable|env(?:ironment)?[ "
        r"_-]?var(?:iable)?|\benv)\s+[`'\"$]?\{?([A-Z][A-Z0-9_]{2,})"
        r"\}?[`'\"]?\s+(?:is\s+)?(?:not set|undefined|not defined|missing|required|empty|is empty|must be set"
        r"|unset)",
        rx.IGNORECASE,
    ),
    rx.compile(
        r"missing (?:required )?(?:environment variable|env(?:ironment)? var(?:iable)?)s?:?\s+[`'\"]?"
        r"([A-Z][A-Z0-9_]{2,})",
        rx.IGNORECASE,
    ),
    rx.compile(
        r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b[`'\"]?\s+(?:environment variable\s+)?(?:is not set|must be set|is "
        r"required|not set|is undefined|is missing)"
    ),
    rx.compile(r"KeyError: ['\"]([A-Z][A-Z0-9_]{2,})['\"]"),
    rx.compile(r"required key \[?([A-Z][A-Z0-9_]+)\]? missing value"),
)
_COPES = rx.compile(r"using (?:the )?default|default(?:s|ing)? to|fall(?:ing)? back|ignor", rx.IGNORECASE)
_FILE_PATTERNS = (
    rx.compile(
        r"(?:No such file or directory|ENOENT|does not exist|not found|cannot open|can't open|unable to "
        r"open)[^\n/]{0,40}['\"`]?(/[\w.@-]+(?:/[\w.@-]+)+)"
    ),
    rx.compile(
        r"['\"`]?(/[\w.@-]+(?:/[\w.@-]+)+)['\"`]?:?[^\n]{0,20}(?:No such file or directory|no such file|does "
        r"not exist|not found)",
        rx.IGNORECASE,
    ),
)
_HOST_PORT = rx.compile(
    r"(?:^|[^\w.:/-])((?:[a-zA-Z][\w-]*(?:\.[\w-]+)*)|(?:\d{1,3}(?:\.\d{1,3}){3})):(\d{2,5})\b"
)
_CONN_WORDS = rx.compile(
    r"refused|timed? ?out|unreachable|could not connect|couldn't connect|unable to connect|cannot "
    r"connect|failed to "
    r"connect|connection (?:failed|error|reset|closed)|connect failed|no available "
    r"connection|econnrefused|etimedout|"
    r"dial tcp|host\(s\) tried|no route",
    rx.IGNORECASE,
)
# A stack frame's "File.java:696" has the shape of host:port and is none.
_SOURCE_FILE = rx.compile(
    r"\.(?:java|kt|scala|groovy|py|go|js|mjs|ts|rb|cs|cpp|cc|c|h|rs|php|exs?|swift)$", rx.IGNORECASE
)
# How a connection failed, in the words a log states it.
_CONN_REASON = rx.compile(
    r"connection reset by peer|connection refused|connection timed out|no route to host|"
    r"(?:host|network) (?:is )?unreachable|no available connection|connection (?:is )?not available|"
    r"connection closed|econnreset|econnrefused|etimedout|timed? ?out",
    rx.IGNORECASE,
)
DB_WORDS = rx.compile(
    r"\b(db|database|sql|postgres\w*|mysql|mongo\w*|redis|jdbc|query|cassandra|oracle)\b", rx.IGNORECASE
)
_REFUSED = rx.compile(r"connection refused|ECONNREFUSED", rx.IGNORECASE)
_DB_PORTS = {"5432", "3306", "27017", "6379", "1521", "1433", "9042", "3333"}
_DNS_PATTERNS = (
    rx.compile(r"Could not resolve host:?\s*([\w.-]+)"),
    rx.compile(r"could not translate host name \"([\w.-]+)\" to address"),
    rx.compile(r"getaddrinfo for host \"([\w.-]+)\"[^\n]{0,40}(?:failed|not known)"),
    rx.compile(r"getaddrinfo (?:ENOTFOUND|EAI_AGAIN)\s+([\w.-]+)"),
    rx.compile(r"lookup ([\w.-]+)(?: on [\d.:\[\]]+)?: (?:no such host|server misbehaving|i/o timeout)"),
    rx.compile(r"UnknownHostException:?\s*([\w.-]+)"),
    rx.compile(r"bad address '([\w.-]+)'"),  # busybox (nc, wget, ping): the name did not resolve
    rx.compile(r"server can't find ([\w.-]+?)\.?:"),
    rx.compile(
        r"(?:Failed to resolve|could not resolve|cannot resolve|unable to "
        r"resolve)\s+['\"]?([\w.-]+\.[a-z]{2,})",
        rx.IGNORECASE,
    ),
    rx.compile(
        r"([\w.-]+\.[a-z]{2,})[^\n]{0,40}(?:Name or service not known|Temporary failure in name resolution|"
        r"nodename nor servname provided)"
    ),
)
_CERT = rx.compile(
    r"certificate has expired|certificate (?:is )?expired|x509: certificate has "
    r"expired|CERTIFICATE_VERIFY_FAILED[^\n]*"
    r"expired|SSL certificate problem: certificate has expired|cert(?:ificate)? expired",
    rx.IGNORECASE,
)
_CERT_DATE = rx.compile(
    r"(?:after|expired (?:on|at)|notAfter=?|not after:?|expir\w* (?:on|at))\s*([0-9]{4}-[0-9]{2}-"
    r"[0-9]{2}[T ]?[0-9:]*Z?)",
    rx.IGNORECASE,
)
_CERT_SOON = rx.compile(r"certificate[^\n]{0,60}expires? in (\d+) days?", rx.IGNORECASE)

_STOP_SIGNAL = rx.compile(r"\bSIG(?:TERM|KILL|INT)\b|signal: (?:terminated|killed)", rx.IGNORECASE)
_PROGRESS = rx.compile(r"\b\d{1,3}(?:\.\d+)?\s?%|\b\d[\d,]* (?:of|/) \d[\d,]*\b|\bprogress\b", rx.IGNORECASE)


def log_subject(out: ToolOutput, state: AnalysisState) -> tuple[str, str, str]:
    """(whose log, the finding subject, ' in the logs of X') for a log output."""
    source = str(out.params.get("pod_name") or out.params.get("service") or out.params.get("name") or "")
    if source in ("", "*"):
        source = state.alert.subject.name
    subject = f"pod/{out.params.get('namespace')}/{source}" if out.params.get("namespace") else source
    whose = f"pod {source}" if out.params.get("pod_name") else source
    where = f" in the logs of {whose}" if source and out.tool != "alert" else ""
    return source, subject, where


def _transient(text: str, needle: str) -> str:
    """'3 of 2649 log lines' when ``needle`` is rare in a long log, else ''."""
    lines = text.splitlines()
    hits = sum(1 for line in lines if needle in line)
    if len(lines) > 200 and hits / len(lines) < 0.01:
        return f"{hits} of {len(lines)} log lines"
    return ""


_CONFIG_ERROR = rx.compile(
    r"config(?:uration)? error[^\n]*?\b([a-z][a-z0-9_.]*) must be (?:an? )?([^,\n]*?),? got '([^'\n]*)'",
    rx.IGNORECASE,
)
_UNIT_NUMBER = rx.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds)?\s*$", rx.IGNORECASE)


def _coerce(expected: str, got: str) -> Any:
    """The value meant by a config value of the wrong type ('30s' for a number -> 30), else None."""
    if not rx.search(r"integer|number|float|int\b", expected, rx.IGNORECASE):
        return None
    match = _UNIT_NUMBER.match(got)
    if match is None:
        return None
    value = float(match.group(1)) / (1000 if (match.group(2) or "").lower() == "ms" else 1)
    return int(value) if value.is_integer() else value


@register
class LogAnalyzer(Analyzer):
    name = "logs"

    def applies(self, out: ToolOutput) -> bool:
        return out.is_log and bool(out.text.strip())

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        text = out.text
        source, subject, where = log_subject(out, state)
        findings: list[Finding] = []
        findings += self._env(text, subject, where, source)
        findings += self._files(text, subject, where)
        findings += self._dns(text, subject, where, state)
        if not any(f.kind == "dns_failure" for f in findings):
            findings += self._connections(text, subject, where, source)
            _remember_dialed(findings, out, state)
        findings += self._certs(text, subject, where)
        if any("No space left on device" in ln and not shm_line(ln) for ln in text.splitlines()):
            findings.append(
                Finding(
                    "disk_full",
                    f"The disk is full{where}: writes fail with 'No space left on device'.",
                    Severity.CRITICAL,
                    subject,
                    "No space left on device",
                    85,
                    "Free space or grow the volume.",
                    Remedy(
                        ("clean_disk", "cleanup", "free_disk", "clear_quota_folder"),
                        source,
                        {},
                        "free disk space",
                    ),
                )
            )
        findings += self._config_errors(text, subject, where, source)
        findings += self._stopped_mid_work(text, subject, where)
        if rx.search(r"permission denied|EACCES", text, rx.IGNORECASE):
            line = next(
                li for li in text.splitlines() if rx.search(r"permission denied|EACCES", li, rx.IGNORECASE)
            )
            findings.append(
                Finding(
                    "permission_denied",
                    f"Permission denied{where}: {clip(line, 160)}.",
                    Severity.WARNING,
                    subject,
                    clip(line),
                    60,
                )
            )
        return findings

    @staticmethod
    def _stopped_mid_work(text: str, subject: str, where: str) -> list[Finding]:
        """The log ends on a stop signal right after progress lines: something outside stopped the
        process while it was still working (a deadline, an eviction, a rollout), not a crash of its own."""
        lines = [line for line in text.splitlines() if line.strip()]
        tail = lines[-3:]
        signal = next((line for line in tail if _STOP_SIGNAL.search(line)), None)
        how = _STOP_SIGNAL.search(signal) if signal is not None else None
        if signal is None or how is None:
            return []
        progress = [line for line in lines[: lines.index(signal)] if _PROGRESS.search(line)]
        if not progress:
            return []
        return [
            Finding(
                "stopped_mid_work",
                f"The process{where} was stopped from outside ({how.group(0)}) while "
                f"still working; its last progress line: {clip(progress[-1].strip(), 120)}.",
                Severity.WARNING,
                subject,
                clip(signal),
                45,
            )
        ]

    def _config_errors(self, text: str, subject: str, where: str, source: str) -> list[Finding]:
        """'config error: KEY must be a number, got '30s'': the service refuses to start on its config."""
        findings: list[Finding] = []
        seen: set[str] = set()
        for match in _CONFIG_ERROR.finditer(text):
            key, expected, got = match.group(1), match.group(2).strip(), match.group(3)
            if key in seen:
                continue
            seen.add(key)
            value = _coerce(expected, got)
            remedy = None
            if value is not None:
                remedy = Remedy(
                    ("patch_config", "set_config", "update_config"),
                    source,
                    {"key": key, "value": value},
                    f"set {key} to {value!r}",
                )
            findings.append(
                Finding(
                    "bad_config",
                    f"Invalid configuration{where}: {key} must be {expected}, got '{got}'; "
                    "the service exits at start.",
                    Severity.CRITICAL,
                    subject,
                    clip(match.group(0)),
                    92,
                    f"Set {key} to a valid value ({expected})"
                    + (f", e.g. {value!r}" if value is not None else "")
                    + ", then restart.",
                    remedy,
                )
            )
        return findings

    def _env(self, text: str, subject: str, where: str, source: str) -> list[Finding]:
        names: dict[str, str] = {}
        for pattern in _ENV_PATTERNS:
            for match in pattern.finditer(text):
                if not _COPES.search(text[match.end() :].split("\n", 1)[0]):  # "X not set, using default"
                    names.setdefault(match.group(1), match.group(0))
        return [
            Finding(
                "missing_env_var",
                f"The `{name}` environment variable is undefined or missing{where}: the application reports "
                f"'{clip(line, 120)}' and exits.",
                Severity.CRITICAL,
                subject,
                clip(line),
                92,
                f"Set the environment variable {name} in the container spec (env or envFrom).",
                Remedy(
                    ("set_env", "patch_env", "rollback", "rollout_undo"),
                    source,
                    {"name": name},
                    f"set the environment variable {name}",
                ),
            )
            for name, line in names.items()
        ]

    def _files(self, text: str, subject: str, where: str) -> list[Finding]:
        paths: dict[str, str] = {}
        for pattern in _FILE_PATTERNS:
            for match in pattern.finditer(text):
                path = match.group(1)
                if not path.startswith(("/dev/", "/proc/", "/var/run/secrets")):
                    paths.setdefault(path, match.group(0))
        return [
            Finding(
                "missing_file",
                f"A required file is missing{where}: {path} does not exist ('{clip(line, 120)}').",
                Severity.CRITICAL,
                subject,
                clip(line),
                85,
                f"Provide {path} (mount the ConfigMap/Secret/volume that holds it) or fix the configured "
                "path.",
            )
            for path, line in list(paths.items())[:3]
        ]

    def _dns(self, text: str, subject: str, where: str, state: AnalysisState) -> list[Finding]:
        hosts: dict[str, str] = {}
        for pattern in _DNS_PATTERNS:
            for match in pattern.finditer(text):
                hosts.setdefault(match.group(1).rstrip("."), match.group(0))
        findings = []
        parts = subject.split("/")
        namespace = parts[1] if len(parts) == 3 else ""
        for host, line in hosts.items():
            state.fact_dict("unresolved_hosts").setdefault(host, namespace)
            if namespace and not rx.fullmatch(r"[\d.]+", host):
                state.lead(ObjRef("service", "*", namespace), f"the Services that {host} should be", 75)
            urls = [u for u in state.fact_set("urls") if host in u]
            url = f" (URL {urls[0]})" if urls else ""
            transient = _transient(text, host)
            findings.append(
                Finding(
                    "dns_failure",
                    f"DNS resolution failure{where}: the host {host} could not be resolved to an IP "
                    f"address{url} "
                    f"('{clip(line, 100)}')" + (f"; only {transient} (transient)." if transient else "."),
                    Severity.WARNING if transient else Severity.CRITICAL,
                    subject,
                    clip(line),
                    30 if transient else 90,
                    f"Check the hostname {host} (a typo or a host that does not exist), the DNS server and "
                    "any "
                    "NetworkPolicy blocking DNS (port 53).",
                )
            )
        return findings

    def _connections(self, text: str, subject: str, where: str, source: str) -> list[Finding]:
        targets: dict[str, list[str]] = defaultdict(list)
        for line in text.splitlines():
            if not _CONN_WORDS.search(line) or ("http://" in line.lower() and "refused" not in line.lower()):
                continue
            for host, port in _HOST_PORT.findall(line):
                if host.lower() in ("http", "https", "localhost") and port in ("80", "443"):
                    continue
                if _SOURCE_FILE.search(host):
                    continue
                targets[f"{host}:{port}"].append(line.strip())
        findings = []
        total = max(1, len(text.splitlines()))
        for target, lines in targets.items():
            sample = lines[0]
            is_db = bool(DB_WORDS.search(sample)) or target.rsplit(":", 1)[1] in _DB_PORTS
            refused = "refused" in sample.lower()
            what = "the database" if is_db else "the dependency"
            reason = _CONN_REASON.search(sample)
            if refused:
                how = "connection refused"
            elif reason and reason.group(0).lower() not in clip(sample, 120).lower():
                how = f"{reason.group(0)}: {clip(sample, 120)}"
            else:
                how = clip(sample, 120)
            often = f"repeatedly ({len(lines)} times)" if len(lines) > 1 else "once"
            transient = total > 200 and len(lines) / total < 0.01
            findings.append(
                Finding(
                    "connection_failure",
                    f"{source or 'The application'} fails to connect to {what} at {target} {often}, per "
                    "its logs: "
                    f"'{how}'" + (" (transient)." if transient else "."),
                    Severity.WARNING if transient else Severity.CRITICAL,
                    subject,
                    clip(sample),
                    30 if transient else (85 if is_db else 82),
                    f"Check that {target} is up, reachable and the right address (service name and port).",
                    Remedy(
                        ("restart", "start"),
                        target.rsplit(":", 1)[0],
                        {},
                        f"restart {target.rsplit(':', 1)[0]}",
                    ),
                )
            )
        refusals = [li for li in text.splitlines() if _REFUSED.search(li)] if not findings else []
        if refusals:
            line = refusals[0]
            # A few refusals in a long log are a restart's moment (the dependency came back), not an outage.
            transient = total > 200 and len(refusals) / total < 0.01
            findings.append(
                Finding(
                    "connection_failure",
                    f"Connections are refused{where}: '{clip(line, 140)}'"
                    + (f"; only {len(refusals)} of {total} log lines (transient)." if transient else "."),
                    Severity.WARNING if transient else Severity.CRITICAL,
                    subject,
                    clip(line),
                    30 if transient else 75,
                )
            )
        return findings[:3]

    def _certs(self, text: str, subject: str, where: str) -> list[Finding]:
        match = _CERT.search(text)
        if match:
            line = next((li for li in text.splitlines() if _CERT.search(li)), match.group(0))
            date = _CERT_DATE.search(text)
            when = f" (expired {date.group(1)})" if date else ""
            return [
                Finding(
                    "certificate_expired",
                    f"A TLS certificate has expired{when}{where}: '{clip(line, 140)}'.",
                    Severity.CRITICAL,
                    subject,
                    clip(line),
                    90,
                    "Renew the certificate (and the Secret that holds it), then restart the clients.",
                )
            ]
        soon = _CERT_SOON.search(text)
        if soon and int(soon.group(1)) <= 14:
            return [
                Finding(
                    "certificate_expiring",
                    f"A TLS certificate expires in {soon.group(1)} days{where}.",
                    Severity.WARNING,
                    subject,
                    clip(soon.group(0)),
                    50,
                    "Renew the certificate soon.",
                )
            ]
        return []


_DIALED = rx.compile(r" at ([a-z0-9][a-z0-9-]*)(?:\.[\w.-]+)?:(\d{2,5}) ")


def _remember_dialed(findings: list[Finding], out: ToolOutput, state: AnalysisState) -> None:
    """A refused connection to a name that may be a Service: remember the port dialled and look at the
    Service (``conditions.dialed_port_mismatch`` compares its ports)."""
    namespace = str(out.params.get("namespace") or state.alert.subject.namespace or "")
    for finding in findings:
        match = _DIALED.search(finding.summary) if finding.kind == "connection_failure" else None
        if match is None or not namespace or "refused" not in finding.summary.lower():
            continue
        service, port = match.group(1), match.group(2)
        state.fact_dict("dialed_ports")[f"{namespace}/{service}"] = port
        state.lead(ObjRef("service", service, namespace), f"the Service {service}:{port} dials", 70)
