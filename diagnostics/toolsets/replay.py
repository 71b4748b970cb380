"""The ``replay`` environment: recorded tool outputs of one case folder, nothing else.

Format (eval/README.md): every ``*.txt`` whose first line is JSON is one recorded call;
line 1 ``{"toolset_name", "tool_name", "match_params"}``, line 2 the result metadata, then the raw
output (optionally in ``stdout:`` / ``stderr:`` sections). A call matches a recording when every
key of ``match_params`` equals the call's parameter (``"*"`` matches anything; Kubernetes kinds
compare case-insensitively, as kubectl does). The most specific match wins.

Only those files are read: a ``.txt`` is opened, its first line checked, and the rest read only
when it is a recording. Manifests, sources and test definitions are never opened. A call with no
recording returns a clear no-data ToolResult (never an exception) and is counted.

Besides the recorded tools the toolset offers the standard Kubernetes read tools a live cluster
would have, so the agent's plan does not depend on which calls happened to be recorded. Listings are
derived rather than recorded when no such call was recorded: listing namespaces
(``kubectl_get_by_kind_in_cluster`` with ``kind=namespace``) returns the namespaces that the recorded
calls address; listing a kind (in a namespace, or a cluster-scoped kind such as ``persistentvolume``)
or searching one by keyword returns the objects of that kind the recorded calls address by name; each
labelled as derived.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from diagnostics import conf as diagnostics_conf
from diagnostics.agent.request.timewindow import latest_time, line_time
from diagnostics.toolsets.base import ReadToolset, ToolResult, ToolSpec
from diagnostics.toolsets.registry import Environment, UnknownEnvironment, register_environment

WILDCARD = "*"
CASE_INSENSITIVE_KEYS = frozenset({"kind", "resource_type"})
# Parameters that name what a call is about; never given a default in the advertised schema.
IDENTITY_KEYS = frozenset(
    {
        "kind",
        "name",
        "namespace",
        "keyword",
        "pod_name",
        "resource_name",
        "resource_type",
        "app_name",
        "trace_id",
        "id",
        "url",
        "query",
        "service",
        "cluster_id",
    }
)


def _string(desc: str) -> dict[str, Any]:
    return {"type": "string", "description": desc}


_KIND = _string("Kubernetes kind, e.g. pod, deployment, job, node, persistentvolumeclaim")
_NAME = _string("object name")
_NS = _string("namespace")

# The read tools a Kubernetes cluster offers (HolmesGPT's kubernetes/core and kubernetes/logs).
STANDARD_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "kubectl_find_resource",
        "Find objects of a kind whose name contains a keyword, in all namespaces (kubectl get -A | grep).",
        {
            "type": "object",
            "properties": {"kind": _KIND, "keyword": _string("part of the name")},
            "required": ["kind", "keyword"],
        },
    ),
    ToolSpec(
        "kubectl_describe",
        "kubectl describe one object (status, conditions, events).",
        {
            "type": "object",
            "properties": {"kind": _KIND, "name": _NAME, "namespace": _NS},
            "required": ["kind", "name", "namespace"],
        },
    ),
    ToolSpec(
        "kubectl_get_by_name",
        "kubectl get one object (one line, wide, with labels).",
        {
            "type": "object",
            "properties": {"kind": _KIND, "name": _NAME, "namespace": _NS},
            "required": ["kind", "name", "namespace"],
        },
    ),
    ToolSpec(
        "kubectl_get_yaml",
        "kubectl get -o yaml one object.",
        {
            "type": "object",
            "properties": {"kind": _KIND, "name": _NAME, "namespace": _NS},
            "required": ["kind", "name", "namespace"],
        },
    ),
    ToolSpec(
        "kubectl_get_by_kind_in_namespace",
        "List all objects of a kind in a namespace.",
        {
            "type": "object",
            "properties": {"kind": _KIND, "namespace": _NS},
            "required": ["kind", "namespace"],
        },
    ),
    ToolSpec(
        "kubectl_get_by_kind_in_cluster",
        "List all objects of a cluster-scoped kind (node, namespace).",
        {"type": "object", "properties": {"kind": _KIND}, "required": ["kind"]},
    ),
    ToolSpec(
        "kubectl_events",
        "Events of one object.",
        {
            "type": "object",
            "properties": {"resource_type": _KIND, "resource_name": _NAME, "namespace": _NS},
            "required": ["resource_type", "resource_name", "namespace"],
        },
    ),
    ToolSpec(
        "kubectl_lineage_children",
        "The objects a workload owns (replica sets, pods, events, services).",
        {
            "type": "object",
            "properties": {"kind": _KIND, "name": _NAME, "namespace": _NS},
            "required": ["kind", "name", "namespace"],
        },
    ),
    ToolSpec(
        "fetch_pod_logs",
        "Logs of a pod (current and previous containers), optionally only between two times.",
        {
            "type": "object",
            "properties": {
                "pod_name": _NAME,
                "namespace": _NS,
                "start_time": _string("only lines at or after this time (RFC 3339)"),
                "end_time": _string("only lines at or before this time (RFC 3339)"),
            },
            "required": ["pod_name", "namespace"],
        },
    ),
    ToolSpec(
        "kubectl_previous_logs",
        "Logs of the previous (crashed) container of a pod.",
        {
            "type": "object",
            "properties": {"pod_name": _NAME, "namespace": _NS},
            "required": ["pod_name", "namespace"],
        },
    ),
    ToolSpec("kubectl_top_pods", "CPU and memory use of all pods.", {"type": "object", "properties": {}}),
    ToolSpec("kubectl_top_nodes", "CPU and memory use of all nodes.", {"type": "object", "properties": {}}),
)


@dataclass(frozen=True)
class Recording:
    file: str
    toolset: str
    tool: str
    match_params: dict[str, Any]
    status: str
    error: str
    output: str

    def matches(self, params: dict[str, Any]) -> bool:
        for key, expected in self.match_params.items():
            if expected == WILDCARD:
                continue
            if key not in params or params[key] is None:
                return False
            got, want = str(params[key]), str(expected)
            if key in CASE_INSENSITIVE_KEYS:
                got, want = got.lower(), want.lower()
            if got != want:
                return False
        return True

    @property
    def specificity(self) -> int:
        return sum(1 for v in self.match_params.values() if v != WILDCARD)


def _split_sections(raw: str) -> str:
    """Raw output: the text before ``stdout:``, the stdout, and a non-empty stderr."""
    lines = raw.splitlines()
    if "stdout:" not in (line.strip() for line in lines):
        return raw.strip("\n")
    pre: list[str] = []
    out: list[str] = []
    err: list[str] = []
    target = pre
    for line in lines:
        if line.strip() == "stdout:" and target is pre:
            target = out
            continue
        if line.strip() == "stderr:" and target is out:
            target = err
            continue
        target.append(line)
    parts = ["\n".join(pre).strip("\n"), "\n".join(out).strip("\n")]
    if "".join(err).strip():
        parts.append("stderr:\n" + "\n".join(err).strip("\n"))
    return "\n".join(p for p in parts if p)


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str) or not re.match(r"\d{4}-\d{2}-\d{2}T", value):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _within(output: str, params: dict[str, Any], matched: dict[str, Any]) -> str:
    """A recorded log cut to the window a call asks for (``start_time``/``end_time`` in RFC 3339), as the
    live tool would; lines without a timestamp are kept. Unchanged when the recording matched on them."""
    start, end = _moment(params.get("start_time")), _moment(params.get("end_time"))
    if (start is None and end is None) or "start_time" in matched or "end_time" in matched:
        return output
    kept = []
    for line in output.splitlines():
        moment = line_time(line)
        if moment is None or ((start is None or moment >= start) and (end is None or moment <= end)):
            kept.append(line)
    return "\n".join(kept)


def load_recording(path: Path) -> Recording | None:
    """The recording in ``path``, or None when its first line is not a recording header."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        first = handle.readline()
        try:
            header = json.loads(first)
        except json.JSONDecodeError:
            return None
        if not isinstance(header, dict) or not header.get("tool_name"):
            return None
        rest = handle.read()
    meta: dict[str, Any] = {}
    second, _, body = rest.partition("\n")
    try:
        parsed = json.loads(second)
        if isinstance(parsed, dict):
            meta = parsed
        else:
            body = rest
    except json.JSONDecodeError:
        body = rest
    match = header.get("match_params")
    return Recording(
        file=path.name,
        toolset=str(header.get("toolset_name", "")),
        tool=str(header["tool_name"]),
        match_params=dict(match) if isinstance(match, dict) else {},
        status=str(meta.get("status") or "success"),
        error=str(meta.get("error") or ""),
        output=_split_sections(body),
    )


def load_recordings(case_dir: Path) -> list[Recording]:
    recordings = []
    for path in sorted(case_dir.rglob("*.txt")):
        if path.is_file():
            recording = load_recording(path)
            if recording is not None:
                recordings.append(recording)
    return recordings


class ReplayToolset(ReadToolset):
    name = "replay"

    def __init__(self, case_dir: str | Path) -> None:
        self.case_dir = Path(case_dir)
        if not self.case_dir.is_dir():
            raise ValueError(f"replay case folder {self.case_dir} does not exist")
        self._recordings = load_recordings(self.case_dir)
        self.calls = 0
        self.misses = 0
        self.missed: list[tuple[str, dict[str, Any]]] = []

    def reference_time(self) -> datetime | None:
        """When the recordings were made, as far as they tell: the latest timestamp in them (a question
        about "the last hour" is read from it, never from the wall clock of the replay)."""
        return latest_time([rec.output[:200_000] for rec in self._recordings])

    def tools(self) -> list[ToolSpec]:
        specs = {spec.name: spec for spec in STANDARD_TOOLS}
        by_tool: dict[str, list[Recording]] = {}
        for rec in self._recordings:
            by_tool.setdefault(rec.tool, []).append(rec)
        for tool, recs in by_tool.items():
            specs[tool] = self._spec_for(tool, recs, specs.get(tool))
        return list(specs.values())

    @staticmethod
    def _spec_for(tool: str, recs: list[Recording], standard: ToolSpec | None) -> ToolSpec:
        props: dict[str, Any] = dict((standard.parameters.get("properties") or {}) if standard else {})
        counts: Counter[str] = Counter()
        values: dict[str, set[str]] = {}
        for rec in recs:
            for key, value in rec.match_params.items():
                counts[key] += 1
                values.setdefault(key, set()).add(json.dumps(value))
                if key not in props:
                    props[key] = {"type": "integer" if isinstance(value, int) else "string"}
        required = list((standard.parameters.get("required") or []) if standard else [])
        if standard is None:
            required = [k for k, n in counts.items() if n == len(recs)]
        for key, seen in values.items():
            if key not in IDENTITY_KEYS and counts[key] == len(recs) and len(seen) == 1:
                value = json.loads(next(iter(seen)))
                if value != WILDCARD:
                    props[key] = {**props[key], "default": value}
        toolsets = sorted({rec.toolset for rec in recs if rec.toolset})
        description = standard.description if standard else f"Recorded tool {tool}"
        if toolsets:
            description += f" (toolset: {', '.join(toolsets)})"
        return ToolSpec(tool, description, {"type": "object", "properties": props, "required": required})

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        self.calls += 1
        candidates = [rec for rec in self._recordings if rec.tool == tool and rec.matches(params)]
        if candidates:
            best = max(candidates, key=lambda rec: rec.specificity)
            ok = best.status != "error"
            output = best.output or best.error
            if not ok and best.error and best.error not in output:
                output = f"{best.error}\n{output}".strip()
            output = _within(output, params, best.match_params)
            return ToolResult(tool, params, output, ok=ok, no_data=best.status == "no_data")
        derived = self._derived(tool, params)
        if derived is not None:
            return derived
        self.misses += 1
        self.missed.append((tool, dict(params)))
        shown = json.dumps(params, sort_keys=True)
        return ToolResult(
            tool,
            params,
            f"No data: nothing was recorded for {tool} with parameters {shown} in this replay case.",
            ok=False,
            no_data=True,
        )

    def _derived(self, tool: str, params: dict[str, Any]) -> ToolResult | None:
        kind = str(params.get("kind", "")).lower()
        if tool == "kubectl_get_by_kind_in_cluster" and kind in ("namespace", "namespaces", "ns"):
            addressed = self._addressed()
            # A namespace listed (even with no object in it named) is a namespace of the cluster.
            namespaces = sorted(
                {ns for _, ns, _ in addressed if ns} | {n for k, _, n in addressed if k == "namespace"}
            )
            if not namespaces:
                return None
            lines = ["# replay: derived from the namespaces the recorded calls address", "NAME   STATUS"]
            return ToolResult(tool, params, "\n".join(lines + [f"{ns}   Active" for ns in namespaces]))
        keyword = str(params.get("keyword") or "").lower()
        namespace = str(params.get("namespace") or "")
        if tool == "kubectl_find_resource" and keyword and kind:
            rows = [(ns, name) for k, ns, name in self._addressed() if k == kind and keyword in name.lower()]
        elif tool == "kubectl_get_by_kind_in_namespace" and kind and namespace:
            rows = [(ns, name) for k, ns, name in self._addressed() if k == kind and ns == namespace]
        elif tool == "kubectl_get_by_kind_in_cluster" and kind:
            # A cluster-scoped kind (persistentvolume, csinode, storageclass): the objects calls address.
            rows = [("", name) for k, ns, name in self._addressed() if k == kind and not ns]
            if rows:
                head = f"# replay: derived from the {kind} objects the recorded calls address"
                return ToolResult(tool, params, "\n".join([head, "NAME", *sorted({n for _, n in rows})]))
            return None
        else:
            return None
        if not rows:
            return None
        lines = [
            f"# replay: derived from the {kind} objects the recorded calls address (their status "
            f"was not recorded)",
            "NAMESPACE   NAME",
        ]
        return ToolResult(
            tool, params, "\n".join(lines + [f"{ns}   {name}" for ns, name in sorted(set(rows))])
        )

    def _addressed(self) -> set[tuple[str, str, str]]:
        """(kind, namespace, name) of every object a recorded call addresses by name."""
        found: set[tuple[str, str, str]] = set()
        for rec in self._recordings:
            params = rec.match_params
            namespace = str(params.get("namespace") or "")
            namespace = "" if namespace == WILDCARD else namespace
            for kind_key, name_key in (("kind", "name"), ("resource_type", "resource_name")):
                kind, name = str(params.get(kind_key) or "").lower(), str(params.get(name_key) or "")
                if kind and name and WILDCARD not in (kind, name):
                    found.add((_KIND_NAMES.get(kind, kind), namespace, name))
            pod = str(params.get("pod_name") or "")
            if pod and pod != WILDCARD:
                found.add(("pod", namespace, pod))
            if namespace:
                found.add(("namespace", "", namespace))
        return found


_KIND_NAMES = {"pods": "pod", "deployments": "deployment", "pvc": "persistentvolumeclaim", "svc": "service"}


def replay_root() -> Path:
    return diagnostics_conf.get().environments.replay_root


@register_environment
class ReplayEnvironment(Environment):
    """Options: ``case`` (a folder relative to DIAGNOSTICS_REPLAY_ROOT, safe to take from the
    API) or ``case_dir`` (an absolute folder: only for the CLI and tests). No write tools."""

    name = "replay"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.case_dir = self._resolve()

    def _resolve(self) -> Path:
        if self.options.get("case_dir"):
            return Path(str(self.options["case_dir"]))
        case = str(self.options.get("case") or "")
        if not case:
            raise UnknownEnvironment("The replay environment needs the option 'case' (a case folder).")
        root = replay_root().resolve()
        path = (root / case).resolve()
        if not path.is_relative_to(root) or not path.is_dir():
            raise UnknownEnvironment(f"No replay case {case!r}.")  # never the server's folders
        return path

    def read_toolsets(self) -> list[ReadToolset]:
        return [ReplayToolset(self.case_dir)]
