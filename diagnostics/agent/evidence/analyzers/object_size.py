"""An object the API server refuses because it is over a size limit.

The API server validates sizes before anything is stored: a ConfigMap's or a Secret's data may hold at
most 1 MiB (``The ConfigMap "x" is invalid: []: Too long: must have at most 1048576 bytes``), annotations
256 KiB in all (``metadata.annotations: Too long: must have at most 262144 bytes``, the classic of
``kubectl apply`` keeping a large object in its last-applied annotation), a request body 3 MiB
(``Request entity too large: limit is 3145728``), and etcd a request 1.5 MiB (``etcdserver: request is
too large``). The write is refused as a whole, so the object keeps its old content and whatever was to
use the new one does not. Read from any output that quotes the refusal (a job's log, a Helm or GitOps
error, an event); the size that was sent from the same output when it shows it (``ls -l``, ``N bytes``).
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.findings import Finding, Severity

_INVALID = rx.compile(
    r"The (\w+) \"([\w.-]+)\" is invalid: \[?([^\n]*?)"
    r"Too long: (?:may|must) have at most (\d+) (bytes|characters)"
)
_OTHER = rx.compile(r"etcdserver: request is too large|Request entity too large: limit is (\d+)")
# ls -l: mode, links, owner, group, size, month, day, time or year, path
_LS = rx.compile(
    r"^[-l][rwxsStT-]{9}\S*\s+\d+\s+\S+\s+\S+\s+(\d+)\s+\w{3}\s+\d{1,2}\s+[\d:]{4,5}\s+(\S+)\s*$"
)
_BYTES = rx.compile(r"\b(\d{4,})\s*bytes\b")
_CRON_SUFFIX = rx.compile(r"-\d{8,}$")


def _sent(text: str, limit: int) -> tuple[int, str]:
    """The largest size over ``limit`` the output shows (an ``ls -l`` row's, with its file, or 'N bytes')."""
    best, name = 0, ""
    for line in text.splitlines():
        if (row := _LS.match(line.strip())) and int(row.group(1)) > max(best, limit):
            best, name = int(row.group(1)), row.group(2).rsplit("/", 1)[-1]
        for match in _BYTES.finditer(line):
            if int(match.group(1)) > max(best, limit) and not _INVALID.search(line):
                best, name = int(match.group(1)), ""
    return best, name


def _limit_words(limit: int) -> str:
    for size, words in ((1048576, "1 MiB"), (262144, "256 KiB"), (3145728, "3 MiB")):
        if limit == size:
            return f" ({words})"
    return ""


@register
class ObjectSizeAnalyzer(Analyzer):
    name = "object_over_size_limit"

    def applies(self, out: ToolOutput) -> bool:
        return "Too long" in out.text or "too large" in out.text.lower()

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("object_size")
        match = _INVALID.search(out.text)
        other = _OTHER.search(out.text) if match is None else None
        if (match is None and other is None) or facts.get("reported"):
            return []
        facts["reported"] = True
        pod = str(out.params.get("pod_name") or "")
        who = _CRON_SUFFIX.sub("", workload_of(pod)) if pod else ""
        writer = f"The `{who}` job fails because the" if who and out.is_log else "The"
        line = next(ln.strip() for ln in out.text.splitlines() if (match or other) and ln and _hit(ln))
        if match is not None:
            kind, name, path, limit = match.group(1), match.group(2), match.group(3), int(match.group(4))
            size, file = _sent(out.text, limit)
            what = (
                "its annotations"
                if "annotations" in path
                else "its data"
                if path.strip(" []:") == ""
                else path
            )
            sent = (
                f"the new {file} is {size} bytes, "
                if size and file
                else f"it is {size} bytes, "
                if size
                else ""
            )
            summary = (
                f"{writer} API server refuses the {kind} `{name}`: {sent}{what} over a {kind}'s limit of "
                f"{limit} bytes{_limit_words(limit)}, so `{name}` keeps its old content (the whole write is "
                f"refused) ('{clip(line, 140)}')."
            )
            fix = (
                f"Keep the {kind} under {limit} bytes: split it, compress it, or move the content out of the "
                "API (a volume, an object store, an image); for kubectl apply's annotation, use server-side "
                "apply or kubectl create/replace."
            )
        else:
            summary = (
                f"{writer} API server refuses a write as too large ('{clip(line, 140)}'): the object keeps "
                "its old content."
            )
            fix = "Make the object smaller (split it, or keep large content outside the API)."
        return [
            Finding(
                "object_over_size_limit",
                summary,
                Severity.CRITICAL,
                f"pod/{pod}" if pod else "",
                clip(line),
                90,
                fix,
            )
        ]


def _hit(line: str) -> bool:
    return _INVALID.search(line) is not None or _OTHER.search(line) is not None
