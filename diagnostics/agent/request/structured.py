"""Subjects from structure, read before prose (issue 39).

What names an object outright beats the words around it:

- JSON documents pasted into a question or an alert: a finding reference (``{"finding": ...,
  "object": {"kind": "Pod", "name": ..., "namespace": ...}}``), a Kubernetes object reference
  (``kind``/``name``/``namespace``, ``metadata``, ``involvedObject``, ``regarding``), a ``"kind/name"``
  string under a reference key, Alertmanager's ``labels``;
- a Slack message an alert was posted as (Alertmanager's Slack notifications): its ``attachments``
  (``fields`` as label/value pairs, ``text`` with ``label: value`` lines, the ``[FIRING:n] Name`` title)
  and ``blocks`` (section ``text`` and ``fields``).

Every input is hostile: documents are found with the standard library's decoder at a bounded number of
places in a bounded text, walked to a bounded depth and breadth; nothing here raises on bad input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.findings import normalize_kind
from diagnostics.agent.request.names import KIND_WORDS, Subject

MAX_TEXT = 50_000  # characters searched for JSON documents
MAX_STARTS = 40  # places a document is tried from
MAX_NODES = 2_000  # values walked per document
MAX_DEPTH = 12
# Keys whose value is (or holds) the object a document is about, best first.
_REFERENCE_KEYS = (
    "object",
    "subject",
    "resource",
    "involvedObject",
    "regarding",
    "target",
    "ref",
    "objectRef",
    "workload",
)
_KINDS = frozenset(KIND_WORDS.values()) - {""} | {
    "ingress",
    "horizontalpodautoscaler",
    "networkpolicy",
    "persistentvolume",
    "configmap",
    "secret",
    "namespace",
    "certificate",
}
_LABEL_KEY = rx.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,62}$")
_LABEL_LINE = rx.compile(
    r"^[\s>•*_\-`]*([A-Za-z_][A-Za-z0-9_.]{0,62})[*_`\s]*(?::|=)[\s*_`]*([^`*\n]{1,253}?)[`*_\s]*$"
)
_FIRING = rx.compile(r"\[(?:FIRING|RESOLVED)(?::\d+)?\]\s*([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Structure:
    """What the structured parts of a text name: object references (best first) and labels."""

    references: list[Subject] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    # The text with its JSON documents taken out (what prose parsing should read).
    prose: str = ""


def json_documents(text: str) -> tuple[list[Any], str]:
    """The JSON objects and arrays in ``text`` (in order) and the text without them."""
    decoder = json.JSONDecoder()
    text = text[:MAX_TEXT]
    found: list[Any] = []
    prose: list[str] = []
    position, starts = 0, 0
    while starts < MAX_STARTS:
        brace, bracket = text.find("{", position), text.find("[", position)
        start = min((i for i in (brace, bracket) if i != -1), default=-1)
        if start == -1:
            break
        starts += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            prose.append(text[position : start + 1])
            position = start + 1
            continue
        if isinstance(value, dict | list):
            found.append(value)
            prose.append(text[position:start] + " ")
        else:
            prose.append(text[position:end])
        position = end
    prose.append(text[position:])
    return found, "".join(prose)


def _reference(value: Any) -> Subject | None:
    """``value`` as an object reference: a mapping with a kind and a name (or ``metadata``), or a
    ``kind/name`` / ``kind/namespace/name`` string."""
    if isinstance(value, str):
        parts = [p for p in value.strip().split("/") if p]
        if len(parts) in (2, 3) and normalize_kind(parts[0]) in _KINDS:
            namespace = parts[1] if len(parts) == 3 else ""
            return Subject(
                kind=normalize_kind(parts[0]), name=parts[-1], namespace=namespace, names=[parts[-1]]
            )
        return None
    if not isinstance(value, dict):
        return None
    metadata = value["metadata"] if isinstance(value.get("metadata"), dict) else {}
    name = value.get("name") or metadata.get("name")
    kind = value.get("kind") or value.get("type") or ""
    if not isinstance(name, str) or not name.strip() or not isinstance(kind, str):
        return None
    namespace = value.get("namespace") or metadata.get("namespace") or ""
    name = name.strip()
    return Subject(
        kind=normalize_kind(kind),
        name=name,
        namespace=namespace.strip() if isinstance(namespace, str) else "",
        names=[name],
    )


def _walk(document: Any, structure: Structure) -> None:
    """References and labels in ``document``, breadth first: a document's own reference keys before
    what is nested deeper."""
    queue: list[tuple[Any, int]] = [(document, 0)]
    seen = 0
    while queue and seen < MAX_NODES:
        value, depth = queue.pop(0)
        seen += 1
        if isinstance(value, list) and depth < MAX_DEPTH:
            # the items of a document that is a list are documents of their own
            queue += [(item, depth + 1 if depth or seen > 1 else 0) for item in value[:100]]
            continue
        if not isinstance(value, dict):
            continue
        labels = value.get("labels")
        if isinstance(labels, dict):
            for key, item in labels.items():
                if isinstance(key, str) and isinstance(item, str) and _LABEL_KEY.match(key):
                    structure.labels.setdefault(key, item.strip()[:253])
        for key in _REFERENCE_KEYS:
            if key in value and (reference := _reference(value[key])):
                _add(structure, reference)
        # A document's own name counts (with its kind or type, if any); nested mappings need a kind.
        reference = _reference(value)
        if reference and (depth == 0 or value.get("kind") or "metadata" in value):
            _add(structure, reference)
        if depth < MAX_DEPTH:
            queue += [(item, depth + 1) for key, item in list(value.items())[:200] if key != "labels"]


def _add(structure: Structure, reference: Subject) -> None:
    if all(
        (r.kind, r.name, r.namespace) != (reference.kind, reference.name, reference.namespace)
        for r in structure.references
    ):
        structure.references.append(reference)


def structure_of(text: str) -> Structure:
    """The references and labels of the JSON documents in ``text``, and the prose around them."""
    documents, prose = json_documents(text)
    structure = Structure(prose=prose)
    for document in documents:
        _walk(document, structure)
    return structure


# --- Slack messages -------------------------------------------------------------------------------


def _texts(value: Any, depth: int = 0) -> list[str]:
    """Every ``text`` of a Block Kit structure (sections, fields, context and rich text elements)."""
    if depth > 8:
        return []
    if isinstance(value, list):
        return [t for item in value[:100] for t in _texts(item, depth + 1)]
    if not isinstance(value, dict):
        return []
    found = [value["text"]] if isinstance(value.get("text"), str) else []
    for key in ("text", "fields", "elements", "blocks"):
        if isinstance(value.get(key), list | dict):
            found += _texts(value[key], depth + 1)
    return found


def slack_message_labels(message: Any) -> dict[str, str]:
    """The alert labels a Slack message carries (an Alertmanager notification): attachment fields
    (title = label, value = value), ``label: value`` / ``label = value`` lines of attachment and block
    texts, and the alert name of a ``[FIRING:n] Name`` title. {} when it carries none."""
    if not isinstance(message, dict):
        return {}
    labels: dict[str, str] = {}
    lines: list[str] = []
    attachments = message["attachments"] if isinstance(message.get("attachments"), list) else []
    for attachment in attachments[:20]:
        if not isinstance(attachment, dict):
            continue
        for item in attachment.get("fields") or []:
            if (
                isinstance(item, dict)
                and isinstance(item.get("title"), str)
                and isinstance(item.get("value"), str)
            ):
                key, value = item["title"].strip().strip("*_` :"), item["value"].strip().strip("`*_ ")
                if _LABEL_KEY.match(key) and value and "\n" not in value:
                    labels.setdefault(key, value[:253])
        for key in ("title", "pretext", "text", "fallback"):
            if isinstance(attachment.get(key), str):
                lines += attachment[key].splitlines()
        lines += [line for t in _texts(attachment.get("blocks")) for line in _pair_lines(t)]
    lines += [line for t in _texts(message.get("blocks")) for line in _pair_lines(t)]
    if isinstance(message.get("text"), str):
        lines += message["text"].splitlines()
    for line in lines[:2000]:
        line = line[:600]
        if match := _LABEL_LINE.match(line):
            key, value = match.group(1), match.group(2).strip()
            if value and " " not in value.strip():
                labels.setdefault(key, value)
        if "alertname" not in labels and (firing := _FIRING.search(line)):
            labels["alertname"] = firing.group(1)
    return labels


def _pair_lines(text: str) -> list[str]:
    """A block field's ``*label:*`` and value on two lines, as one line; other texts line by line."""
    lines = text.splitlines()
    if len(lines) == 2 and lines[0].strip().strip("*_`").endswith(":"):
        return [f"{lines[0]} {lines[1]}"]
    return lines
