"""The README's first call asks for what its profile verifies: the demo's extract-json prompt (JSON with
a city and a country), so a newcomer's first answer can pass. The old prompt ("Extract the city.") asked
for neither JSON nor the country, so the profile's schema failed every faithful answer."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from app.demo import EXTRACT_JSON_FORMAT, PROFILES
from routing.verifiers.base import build_verifier

README = Path(__file__).resolve().parents[2] / "README.md"


def first_call() -> dict[str, object]:
    """The keyword arguments of the README's first ``create(...)`` call, read from its Python block."""
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    call = next(
        node
        for node in ast.walk(ast.parse(block.group(1)))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "create"
    )
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}


def test_the_readme_prompt_asks_for_what_its_profile_verifies() -> None:
    kwargs = first_call()
    task = kwargs["metadata"]["task"]  # type: ignore[index]
    content = kwargs["messages"][0]["content"]  # type: ignore[index]
    assert task == "extract-json"
    assert content == f"Paris is the capital of France. {EXTRACT_JSON_FORMAT}"  # the demo's own prompt
    verifier = build_verifier(PROFILES[task]["verifier"])
    request = {"messages": kwargs["messages"]}
    faithful = {"role": "assistant", "content": json.dumps({"city": "Paris", "country": "France"})}
    assert verifier.verify(request=request, message=faithful).passed
    city_only = {"role": "assistant", "content": json.dumps({"city": "Paris"})}  # what the old prompt got
    assert not verifier.verify(request=request, message=city_only).passed
