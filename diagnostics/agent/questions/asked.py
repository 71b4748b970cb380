"""The facts a question asks for beyond a verdict, read from the tables the tools returned (no LLM).

"How much memory is X using", "which node is X on", "which pod has IP A", "what state are the pods of
X in", "how many pods labelled app=Y": each is answered from the columns kubectl prints (``kubectl top``'s
CPU and MEMORY, ``-o wide``'s IP and NODE, ``--show-labels``' LABELS, ``describe``'s ``Node:``), by the
column, never by a case's words. Nothing is said about a column no read returned.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.inventory import Row
from diagnostics.agent.questions.workload_facts import top_lines, workload_details
from diagnostics.agent.request.intent import Intent

_HEADER_START = ("NAME", "NAMESPACE")
_DESCRIBE_NODE = rx.compile(r"(?m)^Node:\s+([^\s/]+)")
_DESCRIBE_NAME = rx.compile(r"(?m)^Name:\s+(\S+)")
_DESCRIBE_NAMESPACE = rx.compile(r"(?m)^Namespace:\s+(\S+)")
_DESCRIBE_REPLICAS = rx.compile(
    r"(?m)^Replicas:\s+(\d+) desired \| (\d+) updated \| (\d+) total \| (\d+) available \| (\d+) unavailable"
)


@dataclass(frozen=True)
class TableRow:
    """One row of a kubectl table, by its header's column names."""

    tool: str
    values: dict[str, str]
    namespace: str = ""

    @property
    def name(self) -> str:
        return self.values.get("NAME", "").split("/", 1)[-1]

    @property
    def where(self) -> str:
        namespace = self.values.get("NAMESPACE") or self.namespace
        return f" (namespace {namespace})" if namespace else ""

    def get(self, *columns: str) -> str:
        return next((self.values[c] for c in columns if self.values.get(c)), "")


def _cells(line: str, header: list[str], starts: list[int]) -> dict[str, str]:
    """A row's cells: split on runs of spaces when that gives one cell a column, else cut at the header's
    column positions (kubectl left-aligns every cell under its header)."""
    parts = [p for p in rx.split(r"\s{2,}", line.strip()) if p]
    if len(parts) == len(header):
        return dict(zip(header, parts, strict=True))
    cells = {}
    for i, column in enumerate(header):
        end = starts[i + 1] if i + 1 < len(starts) else len(line)
        cells[column] = line[starts[i] : end].strip()
    return cells


def parse_tables(
    text: str, tool: str = "", namespace: str = "", first: tuple[str, ...] = _HEADER_START
) -> list[TableRow]:
    """Every row of the kubectl tables in ``text`` (a header line starting NAME or NAMESPACE, or a word of
    ``first``: ``REVISION`` for ``helm history``). Tabs pad columns as runs of spaces do."""
    rows: list[TableRow] = []
    header: list[str] = []
    starts: list[int] = []
    for raw in text.splitlines():
        line = raw.replace("\t", "  ")
        if not line.strip() or line.lstrip().startswith(("stdout:", "stderr:", "{", "#")):
            continue
        if line.split()[0] in first and len(line.split()) >= 2:
            header, starts = [], []
            for match in rx.finditer(r"\S+(?: \S+)*", line):
                header.append(match.group(0))
                starts.append(match.start())
            continue
        tabbed = [cell.strip() for cell in raw.split("\t")]
        if header and len(tabbed) == len(header):  # tab-separated (helm): a tab ends each cell
            rows.append(TableRow(tool, dict(zip(header, tabbed, strict=True)), namespace))
        elif header:
            rows.append(TableRow(tool, _cells(line, header, starts), namespace))
    return rows


def _tables(state: AnalysisState) -> list[TableRow]:
    rows: list[TableRow] = []
    for out in state.outputs:
        if out.ok and not out.no_data and not out.is_log:
            rows += parse_tables(out.text, out.tool, str(out.params.get("namespace") or ""))
    return rows


def _named(name: str, names: list[str]) -> bool:
    """``name`` is one of ``names`` or a pod of one (``api`` -> ``api-6f5e4d3c2-hb8vz``, ``redis-0``)."""
    return any(name == n or name.startswith(n + "-") for n in names)


def asked_names(state: AnalysisState) -> list[str]:
    """The names the question and its subject mention, best first."""
    intent = state.intent
    names = [*(intent.names if intent else []), *state.alert.subject.names, state.alert.subject.name]
    return [n.lower() for n in dict.fromkeys(names) if n]


def labels_of(state: AnalysisState) -> dict[tuple[str, str], set[str]]:
    """(namespace, name) -> its ``key=value`` labels, from every LABELS column read."""
    labels: dict[tuple[str, str], set[str]] = {}
    for row in _tables(state):
        value = row.get("LABELS")
        if value and value != "<none>":
            key = (row.values.get("NAMESPACE") or row.namespace, row.name)
            labels.setdefault(key, set()).update(v.strip().lower() for v in value.split(","))
    return labels


def selected(rows: list[Row], selector: list[str], state: AnalysisState) -> list[Row] | None:
    """The rows a label selector (``app=ledger``, ``tier!=web``) keeps; None when no LABELS were read."""
    labels = labels_of(state)
    if not selector or not labels:
        return None

    def matches(row: Row) -> bool:
        have = labels.get((row.namespace, row.name), set())
        for term in selector:
            if "!=" in term:
                if term.replace("!=", "=") in have:
                    return False
            elif term not in have:
                return False
        return True

    return [r for r in rows if matches(r)]


def _usage(intent: Intent, state: AnalysisState, names: list[str], namespace: str) -> list[str]:
    rows = [r for r in _tables(state) if r.get("MEMORY(bytes)", "CPU(cores)")]
    chosen = [r for r in rows if _named(r.name, names)]
    if namespace and any(r.get("NAMESPACE") == namespace for r in chosen):
        chosen = [r for r in chosen if r.get("NAMESPACE") == namespace]
    return [
        f"{r.name}{r.where} uses CPU {r.get('CPU(cores)') or '?'} and memory {r.get('MEMORY(bytes)') or '?'} "
        "(kubectl top)."
        for r in chosen[:10]
    ]


def _placement(state: AnalysisState, names: list[str]) -> list[str]:
    found: dict[str, str] = {}
    for row in _tables(state):
        node = row.get("NODE")
        if node and node != "<none>" and _named(row.name, names):
            found.setdefault(row.name, f"{row.name}{row.where} runs on node {node}.")
    for out in state.outputs:
        if out.no_data or "describe" not in out.tool.lower():
            continue
        name, node = _DESCRIBE_NAME.search(out.text), _DESCRIBE_NODE.search(out.text)
        if name and node and node.group(1) != "<none>" and _named(name.group(1), names):
            ns = _DESCRIBE_NAMESPACE.search(out.text)
            where = f" (namespace {ns.group(1)})" if ns else ""
            found.setdefault(name.group(1), f"{name.group(1)}{where} runs on node {node.group(1)}.")
    return list(found.values())[:10]


def _addresses(intent: Intent, state: AnalysisState) -> list[str]:
    lines: list[str] = []
    for row in _tables(state):
        for column in ("IP", "INTERNAL-IP", "EXTERNAL-IP", "CLUSTER-IP", "POD-IP"):
            if row.values.get(column) in intent.addresses:
                node = row.get("NODE")
                on = f", on node {node}" if node and node != "<none>" else ""
                what = (
                    "node " if column in ("INTERNAL-IP", "EXTERNAL-IP") and not row.get("NAMESPACE") else ""
                )
                lines.append(f"{what}{row.name}{row.where} has {column} {row.values[column]}{on}.")
    if intent.addresses and not lines:
        lines.append(f"No listing read shows the address {', '.join(intent.addresses)}.")
    return list(dict.fromkeys(lines))[:10]


def _pods(state: AnalysisState, names: list[str], namespace: str) -> list[str]:
    lines = []
    pods = state.inventory.of_kind("pod", namespace)
    for name in names[:2]:
        mine = [p for p in pods if p.name != name and p.name.startswith(name + "-")]
        if not mine:
            continue
        by_status: dict[str, int] = {}
        for pod in mine:
            by_status[pod.status or "?"] = by_status.get(pod.status or "?", 0) + 1
        counts = ", ".join(f"{n} {status}" for status, n in sorted(by_status.items(), key=lambda kv: -kv[1]))
        unready = [
            p.name for p in mine if (m := rx.fullmatch(r"(\d+)/(\d+)", p.ready)) and m.group(1) != m.group(2)
        ]
        ready = len(mine) - len(unready)
        line = f"Pods of {name}: {len(mine)} ({counts}); {ready} of {len(mine)} ready"
        lines.append(line + (f"; not ready: {', '.join(unready[:6])}." if unready else "."))
    return lines


def _replicas(state: AnalysisState, names: list[str]) -> list[str]:
    """A workload's replicas as its controller counts them (``describe``'s ``Replicas:`` line)."""
    lines = []
    for out in state.outputs:
        name = str(out.params.get("name") or "")
        match = _DESCRIBE_REPLICAS.search(out.text) if not out.no_data else None
        if match and name.lower() in names:
            desired, available, unavailable = match.group(1), match.group(4), match.group(5)
            kind = str(out.params.get("kind") or "workload").capitalize()
            lines.append(
                f"{kind} {name}: {available} of {desired} replicas available ({unavailable} unavailable)."
            )
    return list(dict.fromkeys(lines))


def asked_details(state: AnalysisState, namespace: str = "") -> list[str]:
    """The lines that answer what the question asks besides a verdict; [] when it asks nothing more."""
    intent = state.intent
    if intent is None:
        return []
    names = asked_names(state)
    lines: list[str] = []
    if "usage" in intent.asks:
        text = " ".join((state.alert.text or "").lower().split())
        top_rows = [r.values for r in _tables(state) if r.get("MEMORY(bytes)", "CPU(cores)")]
        top = top_lines(state, top_rows, text, namespace)
        lines += top or _usage(intent, state, names, namespace)
    lines += workload_details(state, names)
    if "node" in intent.asks:
        lines += _placement(state, names)
    if intent.addresses:
        lines += _addresses(intent, state)
    if "replicas" in intent.asks:
        lines += _replicas(state, names)
    if "pods" in intent.asks or "replicas" in intent.asks:
        lines += _pods(state, names, namespace)
    return lines
