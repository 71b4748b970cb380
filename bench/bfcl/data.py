"""The BFCL items the repository carries (``eval/bfcl/bfcl.jsonl``, built by ``bench.bfcl.build``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).resolve().parents[2] / "eval" / "bfcl" / "bfcl.jsonl"
CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")


class BfclDataError(ValueError):
    """A data line that is not a BFCL item (names the line)."""


@dataclass(frozen=True)
class Item:
    id: str
    category: str
    messages: list[dict[str, Any]]  # the user's turn as BFCL gives it (no system prompt of ours)
    functions: list[dict[str, Any]]  # BFCL's function docs ("type": "dict", dotted names)
    ground_truth: list[dict[str, dict[str, list[Any]]]]  # [{function: {arg: [allowed values]}}]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Item:
        try:
            item = cls(
                id=str(data["id"]),
                category=str(data["category"]),
                messages=list(data["messages"]),
                functions=list(data["functions"]),
                ground_truth=list(data["ground_truth"]),
            )
        except (KeyError, TypeError) as exc:
            raise BfclDataError(f"not a BFCL item: missing or malformed {exc}") from None
        if item.category not in CATEGORIES:
            raise BfclDataError(f"unknown BFCL category {item.category!r}")
        return item


def load_items(
    path: Path = DATA_FILE, *, categories: tuple[str, ...] | None = None, limit_per_category: int = 0
) -> list[Item]:
    """Items in file order, optionally only some categories and the first N of each."""
    wanted = set(categories or CATEGORIES)
    unknown = wanted - set(CATEGORIES)
    if unknown:
        raise BfclDataError(f"unknown BFCL categories: {', '.join(sorted(unknown))}")
    items: list[Item] = []
    counts: dict[str, int] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = Item.from_dict(json.loads(line))
        except (json.JSONDecodeError, BfclDataError) as exc:
            raise BfclDataError(f"{path.name} line {number}: {exc}") from None
        if item.category not in wanted:
            continue
        if limit_per_category and counts.get(item.category, 0) >= limit_per_category:
            continue
        counts[item.category] = counts.get(item.category, 0) + 1
        items.append(item)
    return items
