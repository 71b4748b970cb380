"""Log rotation that stopped: logrotate says which files it skips and why.

logrotate refuses to rotate a file whose parent directory is writable by others or by a group other than
root ("skipping ... because parent directory has insecure permissions", unless a ``su`` directive says
whom to rotate as), and says so on each run while the file keeps growing. In a pod it usually runs as a
sidecar beside the writer, sharing the log volume; ``kubectl logs --all-containers --prefix`` puts
``[pod/<pod>/<container>]`` before each line. A volume that fills with logs is then a rotation that
stopped, not traffic: the claim is the pod's volume the skipped files live on.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.findings import Finding, Severity

_SKIPPING = rx.compile(r"(?:error: )?skipping \"([^\"]+)\" because (.*?)(?:\s*\(|$)")
_PREFIX = rx.compile(r"^\[pod/([^/\]]+)/([^\]]+)\]\s*")


def _claim_of(state: AnalysisState, pod: str, path: str) -> str:
    """The claim behind the volume a pod describe mounts at a directory holding ``path``."""
    for out in state.outputs:
        if not rx.search(rf"^Name:\s+{rx.escape(pod)}\s*$", out.text, rx.MULTILINE):
            continue
        for mount, volume in rx.findall(r"^\s+(/\S+) from (\S+) \(", out.text, rx.MULTILINE):
            if path.startswith(mount.rstrip("/") + "/"):
                claim = rx.search(
                    rf"^\s+{rx.escape(volume)}:\s*\n(?:\s+.*\n)*?\s+ClaimName:\s+(\S+)",
                    out.text,
                    rx.MULTILINE,
                )
                if claim:
                    return claim.group(1)
    return ""


@register
class LogRotationAnalyzer(Analyzer):
    name = "log_rotation"

    def applies(self, out: ToolOutput) -> bool:
        return out.is_log and "skipping" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        skipped: dict[str, tuple[str, str, str, str]] = {}
        for line in out.text.splitlines():
            prefix = _PREFIX.match(line)
            match = _SKIPPING.search(line)
            if match:
                pod = prefix.group(1) if prefix else str(out.params.get("pod_name") or "")
                container = prefix.group(2) if prefix else ""
                skipped[match.group(1)] = (match.group(2).strip(), pod, container, line.strip())
        if not skipped:
            return []
        why, pod, container, last = next(reversed(skipped.values()))
        files = ", ".join(skipped)
        claim = _claim_of(state, pod, next(iter(skipped))) if pod else ""
        where = f"the PVC {claim} fills because " if claim else ""
        who = f"the {container} sidecar" if container else "logrotate"
        subject = f"persistentvolumeclaim/{claim}" if claim else (f"pod/{pod}" if pod else out.tool)
        return [
            Finding(
                "log_rotation_skipped",
                f"Logs are no longer rotated: {where}{files} keep growing, since {who} skips them "
                f"because their {why} (logrotate refuses such directories unless a 'su' directive is set).",
                Severity.CRITICAL,
                subject,
                clip(_PREFIX.sub("", last)),
                84,
                "Make the log directory writable only by its owner (chmod 755, or the group root), or add "
                "'su <user> <group>' to the logrotate rule; then rotate once to free the volume.",
            )
        ]
