"""Regenerates ``eval/bfcl/bfcl.jsonl`` from the ``bfcl-eval`` package (PyPI, Apache-2.0).

    .venv/bin/python -m bench.bfcl.build [--package-dir DIR]

Only needed to refresh the data: the repository carries the result, so nothing imports ``bfcl_eval`` at
run time. One line per item: ``id``, ``category``, ``messages`` (the single turn's chat messages),
``functions`` (BFCL's function docs, unchanged) and ``ground_truth`` (BFCL's possible answers; ``[]``
for irrelevance, where the correct answer calls no function).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from bench.bfcl.data import CATEGORIES, DATA_FILE

SOURCE_FILES = {
    "simple": "BFCL_v4_simple_python.json",
    "multiple": "BFCL_v4_multiple.json",
    "parallel": "BFCL_v4_parallel.json",
    "parallel_multiple": "BFCL_v4_parallel_multiple.json",
    "irrelevance": "BFCL_v4_irrelevance.json",
}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def build(package_dir: Path) -> list[dict]:
    data = package_dir / "data"
    items = []
    for category in CATEGORIES:
        answers: dict[str, list] = {}
        answer_file = data / "possible_answer" / SOURCE_FILES[category]
        if answer_file.exists():
            answers = {a["id"]: a["ground_truth"] for a in _lines(answer_file)}
        for entry in _lines(data / SOURCE_FILES[category]):
            if len(entry["question"]) != 1:
                continue  # single-turn categories only
            if category != "irrelevance" and entry["id"] not in answers:
                continue
            items.append(
                {
                    "id": entry["id"],
                    "category": category,
                    "messages": entry["question"][0],
                    "functions": entry["function"],
                    "ground_truth": answers.get(entry["id"], []),
                }
            )
    return items


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    spec = importlib.util.find_spec("bfcl_eval")
    default = Path(spec.origin).parent if spec and spec.origin else None
    parser.add_argument("--package-dir", type=Path, default=default, help="the bfcl_eval package folder")
    args = parser.parse_args()
    if args.package_dir is None:
        parser.error("bfcl_eval is not installed: pip install --no-deps bfcl-eval, or pass --package-dir")
    items = build(args.package_dir)
    DATA_FILE.parent.mkdir(parents=True, exist_ok=True)
    with DATA_FILE.open("w") as out:
        for item in items:
            out.write(json.dumps(item, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"{len(items)} items -> {DATA_FILE}")


if __name__ == "__main__":
    main()
