"""What the environment lists: rows of kubectl listings (get, get -A, find), read from the tool outputs of
one diagnosis, and the names of a question resolved against them.

Resolution confirms a candidate name by the environment's own listings (never by the words alone):
an exact name wins, then a workload's pods (``name-<hash>-<id>``), then names that contain it. A name
that matches nothing is unknown; one that matches objects in several namespaces is ambiguous.
The listings are the outputs the Probe already returned, so each list call is made once per diagnosis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.findings import normalize_kind

CLUSTER_SCOPED = frozenset({"node", "namespace", "persistentvolume", "storageclass", "clusterrole"})
_AGO = rx.compile(r"\s*\([^)]*\bago\)")
_POD_OF = r"(?:-[a-z0-9]{5,10})?-[a-z0-9]{4,5}$"


@dataclass(frozen=True)
class Row:
    kind: str
    name: str
    namespace: str = ""
    status: str = ""
    ready: str = ""
    restarts: str = ""
    age: str = ""
    line: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    def to_json(self) -> dict[str, str]:
        data = {"kind": self.kind, "name": self.name, "namespace": self.namespace}
        for key in ("status", "ready", "restarts", "age"):
            if getattr(self, key):
                data[key] = getattr(self, key)
        return data


def _columns(header: list[str], tokens: list[str]) -> dict[str, str]:
    return {column: tokens[i] for i, column in enumerate(header) if i < len(tokens)}


def _row(kind: str, values: dict[str, str], namespace: str, line: str) -> Row | None:
    name = values.get("NAME", "")
    if not name or not rx.fullmatch(r"[a-z0-9][-a-z0-9.:]*", name):
        return None
    name = name.split("/", 1)[-1]
    return Row(
        kind=kind,
        name=name,
        namespace=values.get("NAMESPACE", namespace) if kind not in CLUSTER_SCOPED else "",
        status=values.get("STATUS", ""),
        ready=values.get("READY", ""),
        restarts=values.get("RESTARTS", ""),
        age=values.get("AGE", ""),
        line=" ".join(line.split()),
    )


_POD_HEADER = ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
_WORKLOAD_HEADER = ["NAMESPACE", "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
_GUESSED_HEADERS = {
    "pod": _POD_HEADER,
    "job": ["NAMESPACE", "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
    "service": ["NAMESPACE", "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
    "persistentvolumeclaim": ["NAMESPACE", "NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES"],
}
_JOB_STATUSES = {"Running", "Complete", "Failed", "Suspended", "Completed"}


def parse_listing(tool: str, params: dict[str, Any], text: str) -> list[Row]:
    """The rows of one listing output (a kubectl table with its header, or ``get -A | grep`` lines
    without one); [] when ``text`` is not a listing."""
    kind = normalize_kind(str(params.get("kind") or params.get("resource_type") or ""))
    if not kind or kind == "*":
        return []
    namespace = str(params.get("namespace") or "")
    lines = [
        _AGO.sub("", line).strip().strip('"')
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "stdout:", "stderr:", "{"))
    ]
    rows: list[Row] = []
    header: list[str] | None = None
    for line in lines:
        tokens = line.split()
        if tokens and tokens[0] in ("NAME", "NAMESPACE") and all(t.isupper() or "-" in t for t in tokens[:3]):
            header = [t for t in rx.split(r"\s{2,}", line) if t]
            header = [h for col in header for h in (col.split() if col in ("NOMINATED NODE",) else [col])]
            continue
        if header is None:
            if "keyword" not in params or len(tokens) < 3:
                continue
            # `kubectl get -A | grep`: the namespace first (cluster kinds have none).
            guess = _GUESSED_HEADERS.get(kind, _WORKLOAD_HEADER)
            if kind in CLUSTER_SCOPED:
                guess = ["NAME", "STATUS"]
            elif rx.fullmatch(r"\d+/\d+", tokens[1]) or (kind == "job" and tokens[1] in _JOB_STATUSES):
                # `kubectl get` without -A: no namespace column, the current (default) namespace.
                guess = guess[1:]
                namespace = namespace or "default"
            values = _columns(guess, tokens)
        else:
            values = _columns(header, tokens)
        row = _row(kind, values, namespace, line)
        if row is not None:
            rows.append(row)
    return rows


def _filled(row: Row) -> int:
    return sum(bool(v) for v in (row.status, row.ready, row.restarts, row.age))


@dataclass
class Resolution:
    """What a candidate name matched in the inventory."""

    name: str
    matches: list[Row] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return bool(self.matches)

    @property
    def namespaces(self) -> list[str]:
        return sorted({r.namespace for r in self.matches if r.namespace})

    @property
    def ambiguous(self) -> bool:
        workloads = {(r.namespace, r.name) for r in self.matches if r.kind != "pod"}
        return len(self.namespaces) > 1 or (len(workloads) > 1 and not self.exact)

    @property
    def exact(self) -> bool:
        return any(r.name == self.name for r in self.matches)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "matches": [r.to_json() for r in self.matches[:20]]}


@dataclass
class Inventory:
    """Every row the listings of one diagnosis returned, by kind."""

    rows: list[Row] = field(default_factory=list)
    listed: set[tuple[str, str]] = field(default_factory=set)  # (kind, namespace or "*")

    def add(self, tool: str, params: dict[str, Any], text: str, *, no_data: bool) -> list[Row]:
        kind = normalize_kind(str(params.get("kind") or ""))
        if no_data or not kind:
            return []
        found = parse_listing(tool, params, text)
        if found or ("keyword" not in params and "name" not in params):
            self.listed.add((kind, str(params.get("namespace") or "*")))
        index = {(r.kind, r.namespace, r.name): i for i, r in enumerate(self.rows)}
        for row in found:
            at = index.get((row.kind, row.namespace, row.name))
            if at is None:
                index[(row.kind, row.namespace, row.name)] = len(self.rows)
                self.rows.append(row)
            elif _filled(row) > _filled(self.rows[at]):
                self.rows[at] = row  # a finder's bare row, then the listing's full one
        return found

    def of_kind(self, kind: str, namespace: str = "") -> list[Row]:
        kind = normalize_kind(kind)
        return [r for r in self.rows if r.kind == kind and (not namespace or r.namespace == namespace)]

    @property
    def namespaces(self) -> list[str]:
        names = {r.name for r in self.rows if r.kind == "namespace"}
        names |= {r.namespace for r in self.rows if r.namespace}
        return sorted(names)

    def resolve(self, name: str, kinds: tuple[str, ...] = ()) -> Resolution:
        lowered = name.lower()
        rows = [r for r in self.rows if r.kind != "namespace" and (not kinds or r.kind in kinds)]
        exact = [r for r in rows if r.name == lowered]
        pods = [r for r in rows if r.kind == "pod" and rx.fullmatch(rx.escape(lowered) + _POD_OF, r.name)]
        contains = [r for r in rows if lowered in r.name and r not in exact and r not in pods]
        return Resolution(name=lowered, matches=exact + pods + (contains if not exact and not pods else []))

    def pods_of(self, resolution: Resolution) -> list[Row]:
        """The pods a resolved name stands for: itself when it is a pod, else the pods named after it."""
        pods = [r for r in resolution.matches if r.kind == "pod"]
        if pods:
            return pods
        found: list[Row] = []
        for row in resolution.matches:
            found += [
                p
                for p in self.of_kind("pod", row.namespace)
                if rx.fullmatch(rx.escape(row.name) + _POD_OF, p.name) and p not in found
            ]
        return found
