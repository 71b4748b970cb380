"""A question about a Helm release ("is the helm release grafana in monitoring ok?"), read the way Helm and
Kubernetes print a release: ``helm list`` (NAME, NAMESPACE, REVISION, UPDATED, STATUS, CHART), ``helm
history`` (REVISION, UPDATED, STATUS, CHART, ..., DESCRIPTION), ``helm status`` (``STATUS:``, ``REVISION:``),
and without a Helm tool its storage: the ``sh.helm.release.v1.<release>.v<N>`` Secrets, labelled
``status=deployed|failed|pending-*`` and ``version=N``. Its objects are those labelled
``app.kubernetes.io/instance=<release>`` (or ``release=<release>``), or named after it. A release is healthy
when its last revision is ``deployed`` and every pod and workload of it is running and ready.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.questions.asked import TableRow, labels_of, parse_tables
from diagnostics.agent.request.names import QUESTION_WORDS

ASKS = rx.compile(r"\bhelm\b|\bcharts?\b")
# "release X" / "the X release" / "the helm upgrade of X" (separate patterns: one match of either must not
# hide the other).
_NAMED = (
    rx.compile(r"\b(?:release|chart)\s+(?:named\s+|called\s+)?[`'\"]?([a-z0-9][-a-z0-9.]*[a-z0-9])"),
    rx.compile(r"\b([a-z0-9][-a-z0-9.]*[a-z0-9])[`'\"]?\s+(?:helm\s+)?(?:release|chart)\b"),
    rx.compile(
        r"\bhelm\s+(?:upgrade|install|rollback|deploy\w*|release|chart)s?\s+(?:of|for)\s+(?:the\s+)?"
        r"[`'\"]?([a-z0-9][-a-z0-9.]*[a-z0-9])"
    ),
)
_NOT_NAMES = (
    frozenset(
        """the a an my our this that its helm release releases chart charts is are of in for which what
    healthy ok okay fine up working broken good bad deployed installed upgraded rolled back""".split()
    )
    | QUESTION_WORDS
)
_SECRET = rx.compile(r"^sh\.helm\.release\.v1\.(.+)\.v(\d+)$")
_STATUS_LINE = rx.compile(r"(?mi)^\s*STATUS:\s*(\S+)")
_REVISION_LINE = rx.compile(r"(?mi)^\s*REVISION:\s*(\d+)")
_NAME_LINE = rx.compile(r"(?mi)^\s*NAME:\s*(\S+)")
_DESCRIPTION_LINE = rx.compile(r"(?mi)^\s*DESCRIPTION:\s*(.+)$")
_HEALTHY_POD = ("Running", "Completed", "Succeeded")
_WORKLOADS = ("deployment", "statefulset", "daemonset")
BAD_STATUSES = ("failed", "pending-install", "pending-upgrade", "pending-rollback", "uninstalling")


def asked_names(text: str) -> list[str]:
    """The release names a question about a Helm release names; [] when it is not about one."""
    lowered = " ".join(text.lower().split())
    if not ASKS.search(lowered):
        return []
    names = []
    for pattern in _NAMED:
        for match in pattern.finditer(lowered):
            if match.group(1) not in _NOT_NAMES and len(match.group(1)) > 1:
                names.append(match.group(1))
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Revision:
    number: int
    status: str
    source: str
    description: str = ""


def revisions(state: AnalysisState, release: str) -> list[Revision]:
    """The revisions of ``release`` the reads show (helm list/history/status, the release Secrets), last
    first."""
    found: dict[int, Revision] = {}
    for out in state.outputs:
        if out.no_data or not out.ok:
            continue
        if "helm" in out.tool.lower():
            for row in parse_tables(out.text, out.tool, first=("NAME", "NAMESPACE", "REVISION")):
                name = row.values.get("NAME", release)
                number = row.values.get("REVISION", "")
                if name == release and number.isdigit() and row.values.get("STATUS"):
                    found[int(number)] = Revision(
                        int(number), row.values["STATUS"].lower(), out.tool, row.values.get("DESCRIPTION", "")
                    )
            status, number, name = (
                _STATUS_LINE.search(out.text),
                _REVISION_LINE.search(out.text),
                _NAME_LINE.search(out.text),
            )
            if status and number and (name is None or name.group(1) == release):
                description = _DESCRIPTION_LINE.search(out.text)
                found[int(number.group(1))] = Revision(
                    int(number.group(1)),
                    status.group(1).lower(),
                    out.tool,
                    description.group(1).strip() if description else "",
                )
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            match = _SECRET.match(row.name)
            if match is None or match.group(1) != release or int(match.group(2)) in found:
                continue
            labels = dict(part.split("=", 1) for part in row.get("LABELS").split(",") if "=" in part)
            status = labels.get("status", "")
            found[int(match.group(2))] = Revision(int(match.group(2)), status, f"secret {row.name}")
    return sorted(found.values(), key=lambda r: -r.number)


def _of_release(row: TableRow, release: str, labels: dict[tuple[str, str], set[str]]) -> bool:
    have = labels.get((row.values.get("NAMESPACE") or row.namespace, row.name), set())
    if have:
        return bool({f"app.kubernetes.io/instance={release}", f"release={release}"} & have)
    return row.name == release or row.name.startswith(release + "-")


def _ready(value: str) -> tuple[int, int] | None:
    match = rx.fullmatch(r"(\d+)/(\d+)", value or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


# The suffixes controllers give their pods: a Deployment's ReplicaSet hash and pod hash, a DaemonSet's or
# Job's pod hash, a StatefulSet's ordinal.
_POD_SUFFIX = rx.compile(r"^(.+?)(?:-[a-z0-9]{6,10}-[a-z0-9]{5}|-[a-z0-9]{5}|-\d+)$")


def _owner(pod: str, workloads: list[str]) -> str:
    """The workload a pod belongs to: the longest workload name it starts with, else its name without the
    suffix its controller gave it."""
    owners = [w for w in workloads if pod.startswith(w + "-")]
    if owners:
        return max(owners, key=len)
    match = _POD_SUFFIX.match(pod)
    return match.group(1) if match else pod


def release_lines(state: AnalysisState, release: str) -> tuple[str, list[str]]:
    """(the verdict, the facts under it) about ``release`` from the reads."""
    labels = labels_of(state)
    pods, workloads = [], []
    for out in state.outputs:
        if out.no_data or not out.ok:
            continue
        kind = str(out.params.get("kind") or "").lower()
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            if row.name.startswith("#") or not _of_release(row, release, labels):
                continue
            if kind in ("pod", "pods") and row.get("STATUS"):
                pods.append(row)
            elif kind in _WORKLOADS and row.get("READY"):
                workloads.append((kind, row))
    history = revisions(state, release)
    if not pods and not workloads and not history:
        return (
            f"No data: no read showed the Helm release {release} (no helm listing, no release Secret, no pod "
            f"labelled app.kubernetes.io/instance={release}), so I cannot tell whether it is ok.",
            [],
        )
    problems, facts = [], []
    if history:
        last = history[0]
        # After a failed upgrade the release still runs its last deployed revision.
        deployed = [r for r in history[1:] if r.status == "deployed"]
        running = deployed[0] if deployed and last.status != "deployed" else None
        older = ", ".join(f"{r.number} {r.status}" for r in history[1:4])
        facts.append(
            f"Helm release {release}: revision {last.number} is {last.status or '?'} ({last.source})"
            + (f"; earlier revisions: {older}" if older else "")
            + (f"; revision {running.number} is still deployed" if running is not None else "")
            + (f"; {last.description}" if last.description else "")
            + "."
        )
        if last.status in BAD_STATUSES:
            problems.append(f"its last revision {last.number} is {last.status}")
    names = [row.name for _, row in workloads]
    unready: dict[str, str] = {}
    unready_pods: set[str] = set()
    for row in pods:
        ready, status = _ready(row.get("READY")), row.get("STATUS")
        owner = _owner(row.name, names)
        if status not in _HEALTHY_POD or (status == "Running" and ready and ready[0] < ready[1]):
            how = f"pod {row.name}, {row.get('READY')} ready, restarts {row.get('RESTARTS')}"
            unready_pods.add(row.name)
            unready.setdefault(owner, f"not ready ({how})" if status == "Running" else f"in {status} ({how})")
    for owner, how in unready.items():
        problems.append(f"{owner} is {how}")
    for kind, row in workloads:
        ready = _ready(row.get("READY"))
        fine = ready is not None and ready[0] == ready[1] and row.name not in unready
        itself = f"{row.name} itself" if row.name == release else row.name
        if fine:
            facts.append(f"{itself} ({kind}) is Running and ready: {row.get('READY')} ready.")
        else:
            facts.append(f"{itself} ({kind}) is not ready: {row.get('READY')} ready.")
            if row.name not in unready:
                problems.append(f"{kind} {row.name} has {row.get('READY')} ready")
    if not workloads:
        fine_pods = [
            row.name for row in pods if row.get("STATUS") == "Running" and row.name not in unready_pods
        ]
        facts += [f"Pod {name} is Running and ready." for name in fine_pods[:6]]
    if problems:
        return f"No: Helm release {release} is not ok: {'; '.join(problems)}.", facts
    count = f"its {len(pods)} pods are running and ready" if pods else "its workloads are ready"
    if not history:
        return f"Yes, as far as read: {count} (the release's revisions were not read).", facts
    return f"Yes: Helm release {release} looks ok: its last revision is deployed and {count}.", facts


_NOT_DEPLOYED = rx.compile(
    r"\bnot\s+(?:in\s+)?(?:the\s+)?deployed\b|\bfail\w*|\bbroken\b|\bunhealthy\b|\bstuck\b|\bpending\b|\bbad\b"
)


def all_releases(state: AnalysisState) -> dict[tuple[str, str], Revision]:
    """(namespace, release) -> its last revision, from ``helm list`` tables or the release Secrets."""
    found: dict[tuple[str, str], Revision] = {}
    for out in state.outputs:
        if out.no_data or not out.ok:
            continue
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            where = row.values.get("NAMESPACE") or row.namespace
            number, status = row.values.get("REVISION", ""), row.values.get("STATUS", "").lower()
            if "helm" in out.tool.lower() and number.isdigit() and status:
                found[(where, row.name)] = Revision(int(number), status, row.values.get("CHART", ""))
            elif (match := _SECRET.match(row.name)) is not None:
                labels = dict(part.split("=", 1) for part in row.get("LABELS").split(",") if "=" in part)
                key, revision = (where, match.group(1)), int(match.group(2))
                if key not in found or found[key].number < revision:
                    found[key] = Revision(revision, labels.get("status", "?"), f"secret {row.name}")
    return found


def releases_lines(state: AnalysisState) -> tuple[str, list[str]]:
    """The Helm releases the reads show; those not deployed only when the question asks for them."""
    found = all_releases(state)
    if not found:
        return (
            "No data: no read listed Helm releases (no helm listing, no sh.helm.release Secret), so I cannot "
            "list them (this is not the same as none).",
            [],
        )
    lowered = " ".join((state.alert.text or "").lower().split())
    only_bad = bool(_NOT_DEPLOYED.search(lowered))
    chosen = sorted((k, r) for k, r in found.items() if r.status != "deployed" or not only_bad)
    shown = [f"{name} (namespace {ns}) {r.status} at revision {r.number}" for (ns, name), r in chosen]
    what = "Helm releases not deployed" if only_bad else "Helm releases"
    headline = f"{len(chosen)} {what} (of {len(found)} listed)" + (f": {'; '.join(shown)}." if shown else ".")
    return headline, [
        f"- {name} (namespace {ns}): {r.status}, revision {r.number}, {r.source}" for (ns, name), r in chosen
    ]
