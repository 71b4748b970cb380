"""The analyzer interface (a small ABC and a registry) and parsing helpers they share.

An analyzer is a deterministic function from one raw tool output to findings. It recognizes the
output by its shape (a kubectl describe, a log, a trace tree, a JSON status...), not by the name
of the tool that produced it, so it works behind any ReadToolset. Analyzers may read and add
cross-output facts (e.g. a pod's node selector, the nodes' labels) and leads (objects worth a
look) on the shared AnalysisState; they never call tools themselves.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from diagnostics.agent import rx
from diagnostics.agent.evidence.inventory import Inventory
from diagnostics.agent.findings import Finding, ObjRef
from diagnostics.agent.request.intent import Intent
from diagnostics.agent.request.subject import AlertContext
from diagnostics.agent.request.timewindow import EvidenceWindow
from routing.json_body import loads_answer

# Output kinds (``ToolOutput.kind``); the same words a toolset may put on its results (ToolResult.kind).
LOGS, METRICS, EVENTS, TRACES = "logs", "metrics", "events", "traces"
OUTPUT_KINDS = (LOGS, METRICS, EVENTS, TRACES)


@dataclass(frozen=True)
class ToolOutput:
    """One tool result as analyzers see it (escaped quotes undone).

    ``kind``: what the output is when the toolset said so (``ToolResult.kind``, e.g. the output kind an
    operator set on an MCP tool, whose name its author chose); empty, the tool's name tells (a log
    when it has "log" in it). The few analyzers that choose outputs by kind rather than by their
    shape (the log analyzers, the answers that quote log lines) read ``output_kind``."""

    tool: str
    params: dict[str, Any]
    text: str
    ok: bool = True
    no_data: bool = False
    kind: str = ""

    @property
    def output_kind(self) -> str:
        """The declared kind when it is one of OUTPUT_KINDS, else the one the tool's name implies."""
        declared = self.kind.strip().lower()
        if declared in OUTPUT_KINDS:
            return declared
        return LOGS if "log" in self.tool.lower() or self.tool == "alert" else ""

    @property
    def is_log(self) -> bool:
        return self.output_kind == LOGS


@dataclass(frozen=True)
class Lead:
    obj: ObjRef
    reason: str
    priority: int = 50


@dataclass
class AnalysisState:
    """What one investigation has learned so far, shared by all analyzers."""

    alert: AlertContext
    leads: list[Lead] = field(default_factory=list)
    # Cross-output facts, e.g. "node_labels", "required_selectors", "namespaces", "urls".
    facts: dict[str, Any] = field(default_factory=dict)
    related: set[str] = field(default_factory=set)
    # The question's intent (None: an alert, a root-cause investigation), every tool output so far
    # (the answer shapes quote them) and the rows the listings returned (entity resolution).
    intent: Intent | None = None
    outputs: list[ToolOutput] = field(default_factory=list)
    inventory: Inventory = field(default_factory=Inventory)
    # From when evidence counts (older findings are history); None: every time counts.
    window: EvidenceWindow | None = None

    def record(self, out: ToolOutput) -> None:
        """Keeps one tool output for the answer and adds its listing rows to the inventory."""
        self.outputs.append(out)
        if out.tool != "alert":
            self.inventory.add(out.tool, out.params, out.text, no_data=out.no_data or not out.ok)

    def __post_init__(self) -> None:
        self.related.update(n.lower() for n in self.alert.subject.names)

    def lead(self, obj: ObjRef, reason: str, priority: int = 50) -> None:
        if obj.name and all(existing.obj != obj for existing in self.leads):
            self.leads.append(Lead(obj, reason, priority))
            if obj.name != "*":
                self.related.add(obj.name.lower())

    def is_related(self, name: str) -> bool:
        """Whether ``name`` is the subject or something found while inspecting it."""
        if not self.alert.subject.names:
            return True
        lowered = name.lower()
        return any(r and (r in lowered or lowered in r) for r in self.related if len(r) >= 3)

    def fact_set(self, key: str) -> set[str]:
        value = self.facts.setdefault(key, set())
        assert isinstance(value, set)
        return value

    def fact_dict(self, key: str) -> dict[str, Any]:
        value = self.facts.setdefault(key, {})
        assert isinstance(value, dict)
        return value


class Analyzer(ABC):
    name: ClassVar[str]

    def applies(self, out: ToolOutput) -> bool:
        return True

    @abstractmethod
    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]: ...


_REGISTRY: dict[str, type[Analyzer]] = {}
# Correlators see each output's findings after the analyzers, with the shared state, and may add
# findings that tie several outputs together (e.g. a problem that follows a recorded change).
Correlator = Callable[[AnalysisState, list[Finding]], list[Finding]]
_CORRELATORS: dict[str, Correlator] = {}


def register(cls: type[Analyzer]) -> type[Analyzer]:
    _REGISTRY[cls.name] = cls
    return cls


def register_correlator(func: Correlator) -> Correlator:
    _CORRELATORS[func.__name__] = func
    return func


def service_of(subject: str) -> str:
    """The service a finding's subject belongs to: ``process/worker_0`` -> ``worker``."""
    return rx.sub(r"_\d+$", "", subject.rsplit("/", 1)[-1])


def analyzer_names() -> list[str]:
    return sorted(_REGISTRY)


def analyze(out: ToolOutput, state: AnalysisState) -> list[Finding]:
    """Every registered analyzer that applies, in name order; findings deduplicated."""
    findings: list[Finding] = []
    seen: set[tuple[str, str, str]] = set()
    for name in analyzer_names():
        analyzer = _REGISTRY[name]()
        if not analyzer.applies(out):
            continue
        for finding in analyzer.analyze(out, state):
            if finding.key() not in seen:
                seen.add(finding.key())
                findings.append(finding)
    for name in sorted(_CORRELATORS):
        findings += [f for f in _CORRELATORS[name](state, findings) if f.key() not in seen]
    return findings


# --- text helpers -------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """Undo one layer of escaping (recorded outputs often carry it); a whole JSON document is kept as
    it is, since its escapes are its own."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and '\\"' in stripped:
        try:
            loads_answer(stripped)
        except ValueError:  # not JSON, or nested past the answer depth bound
            pass
        else:
            return text
    return text.replace('\\"', '"').replace("\\t", "\t").replace("\\n", "\n")


def clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def field_value(text: str, name: str) -> str:
    """The value of a top-level ``Name:   value`` line of a kubectl describe."""
    match = rx.search(rf"^{rx.escape(name)}:[ \t]*(.*)$", text, rx.MULTILINE)
    return match.group(1).strip() if match else ""


def looks_like_describe(text: str) -> bool:
    return bool(rx.search(r"^\s*\"?Name:\s+\S+", text, rx.MULTILINE)) and bool(
        rx.search(r"^\s*Namespace:\s+\S+", text, rx.MULTILINE)
    )


@dataclass
class Node:
    key: str
    value: str
    indent: int
    children: list[Node] = field(default_factory=list)

    def child(self, key: str) -> Node | None:
        return next((c for c in self.children if c.key == key), None)

    def get(self, key: str) -> str:
        found = self.child(key)
        return found.value if found else ""

    def texts(self) -> list[str]:
        return [c.value for c in self.children if not c.key]


_KEY_LINE = rx.compile(r"^([A-Za-z][\w .\-/()]*?):(?:[ \t]+(.*)|[ \t]*)$")


def describe_tree(text: str) -> Node:
    """kubectl describe output as an indentation tree of ``key: value`` nodes (text lines have no key)."""
    root = Node("", "", -1)
    stack = [root]
    for raw in text.splitlines():
        if not raw.strip():
            continue
        line = raw.lstrip(' "')
        indent = len(raw) - len(raw.lstrip(" "))
        match = _KEY_LINE.match(line.rstrip())
        node = (
            Node(match.group(1), (match.group(2) or "").strip(), indent)
            if match
            else Node("", line.strip(), indent)
        )
        while stack[-1].indent >= indent:
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
    return root


def walk(node: Node) -> Iterator[Node]:
    for child in node.children:
        yield child
        yield from walk(child)


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    count: int = 1
    obj: str = ""
    age: str = ""  # when it was last seen, as kubectl gives it ("38m", "3m2s"): "" unknown


_EVENT_DESCRIBE = rx.compile(
    r"^\s*(Normal|Warning)\s+(\w+)\s+(\S+(?:\s+\(x(\d+) over \S+\))?)\s+(\S+)\s+(.*)$"
)
_EVENT_KUBECTL = rx.compile(
    r"^\s*(\S+(?:\s+\(x(\d+) over \S+\))?)\s+(Normal|Warning)\s+(\w+)\s+(\S+)\s+(.*)$"
)
_EVENT_LINEAGE = rx.compile(r"Event/\S+\s+-\s+(\w+):\s+(.*?)\s{2,}\S+\s*$")


def parse_events(text: str) -> list[Event]:
    events = []
    for line in text.splitlines():
        if match := _EVENT_DESCRIBE.match(line):
            events.append(
                Event(
                    match.group(1),
                    match.group(2),
                    match.group(6).strip(),
                    int(match.group(4) or 1),
                    age=match.group(3).split()[0],
                )
            )
        elif match := _EVENT_KUBECTL.match(line):
            events.append(
                Event(
                    match.group(3),
                    match.group(4),
                    match.group(6).strip(),
                    int(match.group(2) or 1),
                    match.group(5),
                    match.group(1).split()[0],
                )
            )
        elif match := _EVENT_LINEAGE.search(line):
            reason = match.group(1)
            kind = "Warning" if reason in WARNING_REASONS else "Normal"
            events.append(Event(kind, reason, match.group(2).strip()))
    return events


WARNING_REASONS = frozenset(
    {
        "BackOff",
        "Failed",
        "FailedScheduling",
        "FailedMount",
        "FailedCreate",
        "Unhealthy",
        "ProvisioningFailed",
        "BackoffLimitExceeded",
        "Evicted",
        "OOMKilling",
        "FailedAttachVolume",
        "FailedCreatePodSandBox",
        "NodeNotReady",
        "DeadlineExceeded",
        "FailedSync",
        "ErrImagePull",
        "InspectFailed",
    }
)


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]

    def column(self, row: list[str], name: str) -> str:
        if name in self.header:
            index = self.header.index(name)
            if index < len(row):
                return row[index]
        return ""


def table_cells(row: list[str]) -> list[str]:
    """A listing's row split on blanks, with a restart count's "(3m ago)" kept in its cell: kubectl
    prints ``RESTARTS`` as ``11 (3m ago)``, and split apart it shifted every later column (AGE, IP,
    NODE) by two."""
    cells: list[str] = []
    for token in row:
        open_paren = bool(cells) and "(" in cells[-1] and not cells[-1].endswith(")")
        if open_paren or (token.startswith("(") and cells and cells[-1].isdigit()):
            cells[-1] += f" {token}"
        else:
            cells.append(token)
    return cells


def parse_table(text: str) -> Table | None:
    """A kubectl-style table (a header of upper-case column names, then rows)."""
    lines = [
        line.lstrip(' "') for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    for i, line in enumerate(lines):
        tokens = line.split()
        if (
            tokens
            and tokens[0] in ("NAME", "NAMESPACE", "GROUP")
            and all(t.isupper() or "-" in t for t in tokens[:3])
        ):
            header = rx.split(r"\s{2,}", line.strip())
            rows = [table_cells(row.split()) for row in lines[i + 1 :] if not row.startswith("---")]
            return Table(header, rows)
    return None


def rows_of(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def quantity(value: str) -> float | None:
    """A Kubernetes quantity in base units (bytes, cores)."""
    match = rx.fullmatch(r"([\d.]+)\s*([KMGTPE]i?|m)?", value.strip())
    if not match:
        return None
    number = float(match.group(1))
    unit = match.group(2) or ""
    factors = {
        "m": 1e-3,
        "K": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
    }
    return number * factors.get(unit, 1)


def first(items: Iterable[str]) -> str:
    return next(iter(items), "")


EXIT_CODE_MEANINGS = {
    1: "a generic application error",
    2: "a misuse of a shell command or bad arguments",
    6: "curl could not resolve the host",
    7: "curl could not connect to the host",
    125: "the container command itself failed (exit 125)",
    126: "the command is not executable",
    127: "the command was not found",
    134: "an abort (SIGABRT)",
    137: "a SIGKILL (usually the out-of-memory killer)",
    139: "a segmentation fault (SIGSEGV)",
    143: "a SIGTERM (it was asked to stop)",
}


def json_payloads(text: str) -> list[object]:
    """Every JSON object embedded in ``text`` (a tool may print JSON after a preamble)."""
    found: list[object] = []
    decoder = json.JSONDecoder()
    index = text.find("{")
    while index != -1 and len(found) < 5:
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            index = text.find("{", index + 1)
            continue
        found.append(value)
        index = text.find("{", end)
    return found
