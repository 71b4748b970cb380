"""Broken commands -> the failing command or script line: shell syntax errors (bash and dash), commands
not found (a typo is matched against well-known program names), exec errors of the container runtime.

It reads logs, kubectl describe (a container's last-state message, events) and alert text alike: the
messages are the shell's and the runtime's own, so they look the same wherever they are printed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.findings import Finding, Severity

# Programs container commands commonly start; a command that is not found and is one or two letters
# away from one of them is reported as a likely typo of it.
KNOWN_PROGRAMS = (
    "bash",
    "sh",
    "python",
    "python3",
    "pip",
    "node",
    "npm",
    "npx",
    "yarn",
    "java",
    "gunicorn",
    "uvicorn",
    "celery",
    "nginx",
    "curl",
    "wget",
    "psql",
    "pg_dump",
    "mysql",
    "mysqldump",
    "redis-cli",
    "kubectl",
    "echo",
    "sleep",
    "cat",
    "grep",
    "awk",
    "sed",
    "jq",
    "ruby",
    "rails",
    "bundle",
    "php",
    "go",
    "dotnet",
    "envsubst",
    "tar",
    "gzip",
    "aws",
    "gsutil",
    "mongosh",
    "mongodump",
)

_SCRIPT = r"(?P<script>(?:/|\./)?[\w./-]*[\w])"
_SYNTAX_BASH = rx.compile(
    _SCRIPT
    + r": line (?P<line>\d+): (?P<message>syntax error near unexpected token [`'](?P<token>[^'`\n]*)')"
)
_SYNTAX_EOF = rx.compile(
    _SCRIPT
    + r": line (?P<line>\d+): (?P<message>unexpected EOF while looking for matching [`'](?P<token>.)')"
)
_SYNTAX_DASH = rx.compile(_SCRIPT + r": (?P<line>\d+): (?:[^:\n]+: )?(?P<message>Syntax error: [^\n]+)")
_SYNTAX_END = rx.compile(_SCRIPT + r": line (?P<line>\d+): (?P<message>syntax error: unexpected end of file)")
_NOT_FOUND = rx.compile(_SCRIPT + r": (?:line )?(?P<line>\d+): (?P<command>[^\s:]+): (?:command )?not found")
_EXEC_PATH = rx.compile(r"exec: \"(?P<command>[^\"\n]+)\": (?P<message>executable file not found in \$PATH)")
_PROBE_ERRORED = rx.compile(r"\b(Liveness|Readiness|Startup) probe errored", rx.IGNORECASE)
_EXEC_FILE = rx.compile(
    r"exec (?P<command>/[^\s:]+): (?P<message>no such file or directory|exec format error|permission denied)"
)


@dataclass(frozen=True)
class _Hit:
    kind: str
    script: str
    line: str
    message: str
    command: str = ""


def _typo_hint(command: str) -> str:
    name = command.rsplit("/", 1)[-1]
    if name in KNOWN_PROGRAMS:
        return ""
    close = difflib.get_close_matches(name, KNOWN_PROGRAMS, n=1, cutoff=0.75)
    return f" The command looks misspelled: did you mean `{close[0]}`?" if close else ""


def find_command_errors(text: str) -> list[_Hit]:
    hits: list[_Hit] = []
    for pattern in (_SYNTAX_BASH, _SYNTAX_EOF, _SYNTAX_END, _SYNTAX_DASH):
        for match in pattern.finditer(text):
            hits.append(_Hit("shell_syntax_error", match["script"], match["line"], match["message"]))
    for match in _NOT_FOUND.finditer(text):
        hits.append(_Hit("command_not_found", match["script"], match["line"], "not found", match["command"]))
    for pattern in (_EXEC_PATH, _EXEC_FILE):
        for match in pattern.finditer(text):
            hits.append(_Hit("exec_failed", "", "", match["message"], match["command"]))
    unique: dict[tuple[str, str, str], _Hit] = {}
    for hit in hits:
        unique.setdefault((hit.kind, hit.line, hit.command or hit.message), hit)
    return list(unique.values())


def _is_shell(script: str) -> bool:
    return script.rsplit("/", 1)[-1] in ("sh", "bash", "dash", "ash", "zsh")


@register
class CommandErrorAnalyzer(Analyzer):
    name = "command_errors"

    def applies(self, out: ToolOutput) -> bool:
        return bool(rx.search(r"line \d+:|: \d+: |exec[: ]", out.text))

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        source, subject, where = log_subject(out, state)
        if not out.is_log:
            name = str(out.params.get("name") or "")
            kind = str(out.params.get("kind") or "")
            if name:
                namespace = out.params.get("namespace")
                subject = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
                where = f" ({kind} {name})"
        findings: list[Finding] = []
        for hit in find_command_errors(out.text):
            evidence = next((ln.strip() for ln in out.text.splitlines() if hit.message in ln), hit.message)
            if hit.kind == "shell_syntax_error":
                script = "the inline shell command" if _is_shell(hit.script) else f"script {hit.script}"
                summary = (
                    f"Shell syntax error in {script} at line {hit.line}: {hit.message}{where}. "
                    "The script cannot run, so the container exits with an error."
                )
                fix = f"Fix the syntax of {script} at line {hit.line} (a missing or extra keyword or quote)."
            elif hit.kind == "command_not_found":
                script = "the container's shell command" if _is_shell(hit.script) else f"script {hit.script}"
                summary = (
                    f"The command `{hit.command}` is not found (exit code 127): {script} runs "
                    f"`{hit.command}` at line {hit.line}, which does not exist in the image{where}."
                    + _typo_hint(hit.command)
                )
                fix = f"Fix the command `{hit.command}` (spelling, or install it in the image)."
            elif probe := _PROBE_ERRORED.search(evidence):
                # The kubelet execs a probe's command inside the running container: the image lacks it,
                # not the container's entrypoint; the application may well be healthy.
                image = rx.search(r"^\s*Image:\s+(\S+)", out.text, rx.MULTILINE)
                kind = probe.group(1).lower()
                consequence = (
                    "the kubelet restarts the container although the application itself may be healthy, "
                    "failing the requests in flight at each restart"
                    if kind == "liveness"
                    else "the container is never marked ready"
                    if kind == "readiness"
                    else "the container never counts as started and is restarted"
                )
                summary = (
                    f"The {kind} probe cannot run: it execs `{hit.command}`, which image "
                    f"{image.group(1) if image else 'of the container'} does not contain "
                    f"({hit.message}){where}; "
                    f"every probe errors, so {consequence}."
                )
                fix = (
                    f"Make the {kind} probe use a command the image has (or an httpGet probe), or add "
                    f"`{hit.command}` to the image."
                )
            else:
                summary = (
                    f"The container fails to start: the command `{hit.command}` is not found "
                    f"({hit.message}){where}." + _typo_hint(hit.command)
                )
                fix = f"Fix the container command `{hit.command}` (its spelling or its path in the image)."
            findings.append(
                Finding(hit.kind, summary, Severity.CRITICAL, subject or source, evidence[:300], 88, fix)
            )
        return findings
