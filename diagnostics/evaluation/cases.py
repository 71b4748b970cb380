"""Recorded cases (eval/README.md): the alert or question the agent gets, and the facts a
correct diagnosis states. The agent sees only the alert/question; expected facts go to the grader.

Every case belongs to one split, fixed by a hash of its name (no list to edit, no choice by hand):
``dev`` (analyzers and planner rules are written looking at these) and ``held-out`` (about a third,
only ever measured, to check that what was written for ``dev`` generalizes). A case's
``test_case.yaml`` may say ``split: held-out`` (a set written before looking at the code, kept out of
``dev`` whatever its hash); it can never move a case into ``dev``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from diagnostics.agent.request.subject import (
    AlertContext,
    from_investigation,
    from_text,
    from_workload_health,
)

DEV = "dev"
HELD_OUT = "held-out"
SPLITS = (DEV, HELD_OUT)
HELD_OUT_MODULUS = 3


def split_of(name: str) -> str:
    """``held-out`` for about one case in HELD_OUT_MODULUS, by the SHA-256 of its name; else ``dev``."""
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()
    return HELD_OUT if int(digest[:8], 16) % HELD_OUT_MODULUS == 0 else DEV


@dataclass
class Case:
    name: str
    path: Path
    prompt: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    expected: list[str] | None = None
    tags: list[str] = field(default_factory=list)
    held_out: bool = False

    @property
    def intent(self) -> str:
        """The intent the case's author tagged (``intent:count``); '' when untagged."""
        return next((t.split(":", 1)[1] for t in self.tags if t.startswith("intent:")), "")

    @property
    def split(self) -> str:
        return HELD_OUT if self.held_out else split_of(self.name)

    def alert(self) -> AlertContext:
        if "request" in self.payload:
            return from_investigation(self.payload["request"], self.payload.get("issue"))
        if "resource" in self.payload:
            return from_workload_health(self.payload)
        return from_text(self.prompt)


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def expected_facts(value: Any) -> list[str] | None:
    """``expected_output`` as a list of facts: a YAML list, or a string (split on '- ' bullets)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    text = str(value).strip()
    lines = [line.strip() for line in text.splitlines()]
    bullets = [line[2:].strip() for line in lines if line.startswith("- ")]
    if bullets and all(line.startswith(("- ", "#")) or not line for line in lines):
        return bullets
    return [text] if text else []


def load_case(path: Path, root: Path) -> Case:
    spec_path = path / "test_case.yaml"
    spec = yaml.safe_load(spec_path.read_text()) if spec_path.is_file() else {}
    spec = spec if isinstance(spec, dict) else {}
    case = Case(name=str(path.relative_to(root)), path=path, prompt=str(spec.get("user_prompt") or ""))
    case.expected = expected_facts(spec.get("expected_output"))
    case.held_out = spec.get("split") == HELD_OUT
    tags = spec.get("tags")
    case.tags = [str(t) for t in tags] if isinstance(tags, list) else []
    request = _json(path / "investigate_request.json")
    workload = _json(path / "workload_health_request.json")
    if request:
        case.payload = {"request": request, "issue": _json(path / "issue_data.json")}
    elif workload:
        case.payload = workload
    return case


def discover_cases(root: Path) -> list[Case]:
    """Every folder under ``root`` that holds a test_case.yaml or an alert, in name order."""
    folders = {p.parent for p in root.rglob("test_case.yaml")}
    folders |= {p.parent for p in root.rglob("investigate_request.json")}
    folders |= {p.parent for p in root.rglob("workload_health_request.json")}
    return [load_case(folder, root) for folder in sorted(folders)]
