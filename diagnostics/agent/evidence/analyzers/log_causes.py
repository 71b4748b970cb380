"""Logs -> the cause a key line states, from the semantics of the error it names, not from cases.

A crash loop, a failing readiness check or an error rate is a symptom; the line a process writes as it
fails names the cause, and these classes come from what the errors mean where they are defined:

- the operating system's resource errors: EMFILE/ENFILE (out of file descriptors), EADDRINUSE (the port is
  bound by another process), ENOSPC with the inodes used up (out of inodes, not out of bytes);
- a database's refusal of new connections (PostgreSQL's connection slots, MySQL's max_connections);
- HTTP 429 (RFC 6585: the caller is rate-limited by what it calls), and a dependency answering 502/503/504
  to a URL the service calls (it is up but not serving: a readiness check that calls it fails with it);
- time: a token or certificate "not yet valid" / "used before issued" (a clock behind the issuer's);
- a missing dependency of the program itself (Python's ModuleNotFoundError/ImportError, Node's
  "Cannot find module", the JVM's NoClassDefFoundError/ClassNotFoundException, a shared library the
  loader cannot open);
- credentials a server rejects (PostgreSQL's "password authentication failed", MySQL's "Access denied for
  user"): every retry fails the same way until the secret or the grant changes;
- configuration: a reload that fails (the process keeps serving its previous configuration, so nothing
  crashes and the new settings silently do not apply) and a configuration rejected at start (the process
  exits: a crash loop whose cause is the file, not the code);
- DNS: a lookup sent to a name server ``IP:53`` that times out or is refused: the cluster's DNS server does
  not answer (its pods are the lead, in ``kube-system`` by Kubernetes' convention).

(A shell script's syntax error, the key line of a job that exits 2, is ``commands.py``'s.)

Each finding quotes the line and ranks above the generic symptom findings (a crash loop ranks 55), so the
report's root cause is the line that says why.
"""

from __future__ import annotations

from collections.abc import Callable

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.findings import Finding, ObjRef, Severity

_HOST = rx.compile(
    r"(?:^|[^\w@/-])((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,})(?:[^\w-]|$)", rx.IGNORECASE
)
_ADDRESS = rx.compile(r"(?:listen|bind)\s+(?:tcp\d?|udp\d?)?\s*((?:[\w.\-\[\]]*):\d{2,5})", rx.IGNORECASE)


def _line(text: str, pattern: rx.Pattern) -> str:
    """The last line of ``text`` that matches (the most recent statement of it); a line that ends with a
    colon goes on with the next one (a message over two lines: "errors:" then what they are)."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if pattern.search(lines[i]):
            line = lines[i].strip()
            if line.endswith(":") and i + 1 < len(lines):
                line += " " + lines[i + 1].strip()
            return line
    return ""


def _count(text: str, pattern: rx.Pattern) -> int:
    return sum(1 for line in text.splitlines() if pattern.search(line))


_Explain = Callable[[str, str, int], tuple[str, str, str]]


def _descriptors(line: str, where: str, n: int) -> tuple[str, str, str]:
    return (
        "fd_exhausted",
        f"Out of file descriptors{where}: the process hit its open file limit ('too many open files', "
        f"{n} lines), so it cannot accept connections or open files: '{clip(line, 140)}'",
        "Raise the process's open-file limit (ulimit -n, LimitNOFILE) or find what leaks descriptors.",
    )


def _port_in_use(line: str, where: str, n: int) -> tuple[str, str, str]:
    match = _ADDRESS.search(line)
    port = f" {match.group(1)}" if match else ""
    return (
        "port_in_use",
        f"The process cannot bind its port{port}{where}: 'address already in use' (another process, e.g. "
        f"on the host network, holds the port), so it exits: '{clip(line, 140)}'",
        "Free the port (stop the other process) or configure another port.",
    )


def _db_slots(line: str, where: str, n: int) -> tuple[str, str, str]:
    lowered = line.lower()
    engine = (
        "PostgreSQL"
        if "too many clients" in lowered or "connection slots" in lowered
        else ("MySQL" if "too many connections" in lowered else "the database")
    )
    return (
        "db_connections_exhausted",
        f"The database refuses new connections{where}: {engine}'s connection slots are used up "
        f"(max_connections reached), so it cannot connect: '{clip(line, 140)}'",
        "Find who holds the connections (a pool too large, a leak) or raise max_connections; use a pooler.",
    )


def _rate_limited(line: str, where: str, n: int) -> tuple[str, str, str]:
    host = _HOST.search(line)
    upstream = f" by the upstream {host.group(1)}" if host else " by an upstream"
    return (
        "rate_limited",
        f"Requests fail because the service is rate-limited{upstream} (HTTP 429 Too Many Requests, "
        f"{n} lines){where}: '{clip(line, 140)}'",
        "Slow the calls down (respect Retry-After, cache, batch) or raise the quota with the upstream API.",
    )


def _clock_skew(line: str, where: str, n: int) -> tuple[str, str, str]:
    return (
        "clock_skew",
        f"Tokens or certificates are rejected as not yet valid{where} ('{clip(line, 120)}'): the clock of "
        "this node is behind the issuer's (clock skew); check its time synchronization (NTP)",
        "Fix the node's time synchronization (NTP/chrony); allow a small leeway for iat/nbf.",
    )


def _missing_dependency(line: str, where: str, n: int) -> tuple[str, str, str]:
    return (
        "missing_dependency",
        f"The program cannot load a dependency it needs{where}: '{clip(line, 140)}'; the image (a new "
        "release?) lacks it, so the process exits at start",
        "Add the dependency to the image (its requirements or package manifest) or roll back the release.",
    )


def _inodes(line: str, where: str, n: int) -> tuple[str, str, str]:
    return (
        "inodes_exhausted",
        f"The filesystem is out of inodes{where}: writes fail with 'No space left on device' although bytes "
        f"are free (inodes exhausted): '{clip(line, 140)}'",
        "Delete the many small files (or raise the inode count when recreating the filesystem).",
    )


_USER = rx.compile(r"(?:for|user)\s+(?:user\s+)?[\"'`]?([\w.@-]+)", rx.IGNORECASE)


def _credentials(line: str, where: str, n: int) -> tuple[str, str, str]:
    match = _USER.search(line.split("authentication failed", 1)[-1]) or _USER.search(line)
    user = f" for user {match.group(1)}" if match else ""
    return (
        "credentials_rejected",
        f"The database rejects the credentials{user}{where} ({n} lines): every attempt fails the same way "
        f"and exits, until the password (its Secret) or the grant is fixed: '{clip(line, 160)}'",
        "Make the Secret's password match the database user's (or restore the user's grant), then rerun.",
    )


def _reload_failed(line: str, where: str, n: int) -> tuple[str, str, str]:
    return (
        "config_reload_failed",
        f"Reloading the new configuration failed{where} ({n} lines), so the process keeps running its "
        f"previous configuration (the new settings do not apply, nothing crashes): '{clip(line, 200)}'",
        "Fix the error the reload names in the configuration, then reload again; check that it applied.",
    )


def _config_rejected(line: str, where: str, n: int) -> tuple[str, str, str]:
    return (
        "config_rejected",
        f"The process rejects its configuration at start{where} and exits: '{clip(line, 200)}'",
        "Fix the configuration the error names (or roll back the change that produced it).",
    )


_DNS_SERVER = rx.compile(
    r"\blookup\s+(\S+?)\s+on\s+([\d.]+:53)\b[^\n]*?"
    r"(i/o timeout|connection refused|no such host|server misbehaving)",
    rx.IGNORECASE,
)


def _dns_unanswered(line: str, where: str, n: int) -> tuple[str, str, str]:
    match = _DNS_SERVER.search(line)
    name, server, how = match.groups() if match else ("a name", "the DNS server", "timeout")
    verdict = "does not resolve" if how.lower() == "no such host" else "does not answer"
    return (
        "dns_server_unanswered",
        f"DNS lookups fail{where} ({n} lines): the name server {server} {verdict} ({how}) for {name}, so "
        f"every call by name fails: '{clip(line, 160)}'",
        "Look at the cluster DNS (its pods in kube-system, their logs) and the path to it.",
    )


_STATUS_PHRASE = {"502": "Bad Gateway", "503": "Service Unavailable", "504": "Gateway Timeout"}
_DEPENDENCY_5XX = rx.compile(
    r"https?://([a-z][\w-]*)[\w.:-]*\S*[^\n]{0,40}?\b(50[234])\b",
    rx.IGNORECASE,
)


def _dependency_unavailable(line: str, where: str, n: int) -> tuple[str, str, str]:
    match = _DEPENDENCY_5XX.search(line)
    host, code = (match.group(1), match.group(2)) if match else ("a dependency", "5xx")
    return (
        "dependency_unavailable",
        f"The dependency {host} answers HTTP {code} {_STATUS_PHRASE.get(code, '')} to the service{where} "
        f"({n} lines): what fails here (a readiness check, requests) fails with it: '{clip(line, 140)}'",
        f"Look at {host}: it is up but not serving (its own pods, its dependencies).",
    )


# (pattern, explanation, rank): the first class whose pattern matches a line of the log.
_CLASSES: tuple[tuple[rx.Pattern, _Explain, int], ...] = (
    (rx.compile(r"too many open files|\bEMFILE\b|\bENFILE\b", rx.IGNORECASE), _descriptors, 78),
    (rx.compile(r"address already in use|\bEADDRINUSE\b", rx.IGNORECASE), _port_in_use, 82),
    (
        rx.compile(
            r"too many clients already|remaining connection slots are reserved|too many connections\b|"
            r"max_connections",
            rx.IGNORECASE,
        ),
        _db_slots,
        82,
    ),
    (
        rx.compile(r"\b429\b[^\n]{0,40}too many requests|too many requests[^\n]{0,40}\b429\b", rx.I),
        _rate_limited,
        72,
    ),
    (
        rx.compile(
            r"used before issued|not yet valid|token is not valid yet|issued in the future|"
            r"iat[^\n]{0,40}future|clock skew|clock offset",
            rx.IGNORECASE,
        ),
        _clock_skew,
        74,
    ),
    (
        rx.compile(
            r"ModuleNotFoundError|ImportError: |Cannot find module '|NoClassDefFoundError|"
            r"ClassNotFoundException|error while loading shared libraries",
        ),
        _missing_dependency,
        80,
    ),
    (_DEPENDENCY_5XX, _dependency_unavailable, 66),
    (
        rx.compile(
            r"password authentication failed|Access denied for user|authentication failed for user", rx.I
        ),
        _credentials,
        80,
    ),
    (
        rx.compile(
            r"error reloading config|loading configuration file failed|"
            r"(?:config(?:uration)?[^\n]{0,40}reload|reload[^\n]{0,40}config(?:uration)?)[^\n]{0,40}(?:fail|error)",
            rx.IGNORECASE,
        ),
        _reload_failed,
        76,
    ),
    (
        rx.compile(
            r"error initializing configuration|invalid configuration|"
            r"failed to (?:load|parse) (?:the )?config",
            rx.IGNORECASE,
        ),
        _config_rejected,
        77,
    ),
    (_DNS_SERVER, _dns_unanswered, 70),
    (
        rx.compile(r"\b100% inodes|inodes? (?:exhausted|used up)|out of inodes|IUse%\s*100%", rx.I),
        _inodes,
        90,
    ),
)


@register
class LogCauseAnalyzer(Analyzer):
    """The key line of a log, read for the cause it states (see the module's docstring)."""

    name = "log_causes"

    def applies(self, out: ToolOutput) -> bool:
        return out.is_log and out.tool != "alert" and bool(out.text.strip())

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        _source, subject, where = log_subject(out, state)
        findings: list[Finding] = []
        for pattern, explain, rank in _CLASSES:
            line = _line(out.text, pattern)
            if not line:
                continue
            kind, summary, fix = explain(line, where, _count(out.text, pattern))
            if kind == "dns_server_unanswered":
                state.lead(ObjRef("pod", "*", "kube-system"), "the cluster DNS pods (kube-system)", 72)
            findings.append(Finding(kind, summary + ".", Severity.CRITICAL, subject, clip(line), rank, fix))
        return findings
