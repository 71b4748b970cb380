"""Reads that adapt: when a read comes back empty or fails, the next form of it, from the tool's own schema.

A read is tried another way, up to a budget per investigation, and each attempt is its own recorded step:

1. without its filter (``grep``, ``match``, ``filter``, ``pattern``, a label or field selector): if the
   unfiltered read has data, the filtered one was a real answer, *zero matches*, which is evidence
   (``search_empty``), not "cannot tell";
2. with a wider window: a log or event read without its time bounds, or with ten times its line count
   (within the schema's maximum);
3. another tool with the same subject: a pod's previous container's logs when its current logs are empty;
   one object's manifest (``get -o yaml``) when its description (or a plain get) is empty, and its
   description when the manifest is.

Plain functions of the tool specs and the parameters; the runner makes the calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diagnostics.agent.findings import Finding, Severity
from diagnostics.toolsets.base import ToolSpec

# Reads tried another way per investigation, and forms tried per read.
BUDGET = 6
PER_READ = 2
WITHOUT_FILTER = "without the filter"
FILTER_KEYS = ("grep", "match", "filter", "pattern", "search", "contains", "label_selector", "field_selector")
WINDOW_KEYS = ("start_time", "end_time", "since", "until", "since_seconds", "start", "end")
COUNT_KEYS = ("lines", "tail", "tail_lines", "limit")
# The words of a tool that reads one object's manifest, and of one that reads one object by name.
MANIFEST_WORDS = ("yaml", "manifest", "json")
OBJECT_READ_WORDS = ("describe", "get", "read", "show", "inspect")


@dataclass(frozen=True)
class Form:
    tool: str
    params: dict[str, Any]
    why: str


def _props(spec: ToolSpec) -> dict[str, Any]:
    props = spec.parameters.get("properties") if isinstance(spec.parameters, dict) else None
    return props if isinstance(props, dict) else {}


def _required(spec: ToolSpec) -> set[str]:
    required = spec.parameters.get("required") if isinstance(spec.parameters, dict) else None
    return set(required) if isinstance(required, list) else set()


def next_forms(
    tool: str,
    params: dict[str, Any],
    tools: list[ToolSpec],
    done: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> list[Form]:
    """The other forms of ``tool(params)``, best first (none that was the same call, nor one of the
    calls ``done`` already made: ``{"tool": ..., "params": ...}``)."""
    by_name = {spec.name: spec for spec in tools}
    spec = by_name.get(tool)
    if spec is None:
        return []
    forms: list[Form] = []
    required = _required(spec)
    filters = [k for k in FILTER_KEYS if k in params and k not in required]
    if filters:
        shown = ", ".join(f"{k}={params[k]!r}" for k in filters)
        forms.append(
            Form(tool, {k: v for k, v in params.items() if k not in filters}, f"{WITHOUT_FILTER} ({shown})")
        )
    timed = "log" in tool.lower() or "event" in tool.lower()
    bounds = [k for k in WINDOW_KEYS if k in params and k not in required]
    if timed and bounds:
        forms.append(
            Form(
                tool, {k: v for k, v in params.items() if k not in bounds}, "a wider window (no time bounds)"
            ),
        )
    for key in COUNT_KEYS:
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and key not in required:
            schema = _props(spec).get(key)
            top = schema.get("maximum") if isinstance(schema, dict) else None
            wider = min(value * 10, int(top)) if isinstance(top, int | float) else value * 10
            if wider > value:
                forms.append(Form(tool, {**params, key: wider}, f"more lines ({key}={wider})"))
            break
    if "log" in tool.lower() and "previous" not in tool.lower():
        for other in tools:
            name = other.name.lower()
            if "previous" in name and "log" in name and _required(other) <= set(params):
                keep = {k: v for k, v in params.items() if k in _props(other) or k in _required(other)}
                forms.append(Form(other.name, keep, "the previous container's logs"))
                break
    forms += _object_forms(tool, params, tools)
    made = [(call.get("tool"), call.get("params")) for call in done]
    return [f for f in forms if (f.tool, f.params) != (tool, params) and (f.tool, f.params) not in made]


def _object_forms(tool: str, params: dict[str, Any], tools: list[ToolSpec]) -> list[Form]:
    """One named object read another way: its manifest after an empty description or get, its
    description after an empty manifest (a tool that takes the same object and nothing more)."""
    lowered = tool.lower()
    if not {"kind", "name"} <= set(params) or not any(w in lowered for w in OBJECT_READ_WORDS):
        return []
    manifest = any(w in lowered for w in MANIFEST_WORDS)
    wants = ("describe",) if manifest else MANIFEST_WORDS
    for other in tools:
        name = other.name.lower()
        props = _props(other)
        if other.name == tool or not any(w in name for w in wants) or "name" not in props:
            continue
        keep = {k: v for k, v in params.items() if k in props}
        if {"kind", "name"} <= set(keep) and _required(other) <= set(keep):
            return [Form(other.name, keep, "its description" if manifest else "the object's manifest")]
    return []


def search_empty_finding(tool: str, params: dict[str, Any], form: Form) -> Finding:
    """The filtered read found nothing while the source has data: zero matches is the answer."""
    filters = {k: v for k, v in params.items() if k in FILTER_KEYS}
    shown = ", ".join(f"{k}={v!r}" for k, v in filters.items())
    source = ", ".join(f"{k}={v}" for k, v in sorted(form.params.items())) or "the source"
    return Finding(
        "search_empty",
        f"Zero matches: {tool}({source}) has data, and none of it matches {shown}.",
        Severity.INFO,
        str(params.get("pod_name") or params.get("service") or params.get("name") or ""),
        f"{tool} {shown}: 0 matches",
        8,
    )
