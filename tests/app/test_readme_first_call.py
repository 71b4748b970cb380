"""The README's first call asks for what its profile verifies: the demo's extract-json prompt (JSON with
a city and a country), so a newcomer's first answer can pass. The old prompt ("Extract the city.") asked
for neither JSON nor the country, so the profile's schema failed every faithful answer."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from app.demo import EXTRACT_JSON_FORMAT, PROFILES
from bench.support.openai_stub import OpenAIStub, Reply
from routing.models import TaskProfile
from routing.verifiers.base import build_verifier
from tests.factories.routing import make_key

README = Path(__file__).resolve().parents[2] / "README.md"


def first_block() -> str:
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    return block.group(1)


def first_call() -> dict[str, object]:
    """The keyword arguments of the README's first ``create(...)`` call, read from its Python block."""
    call = next(
        node
        for node in ast.walk(ast.parse(first_block()))
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


FAITHFUL = json.dumps({"city": "Paris", "country": "France"})


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("student_says", "shown"),
    [(FAITHFUL, ["student", "student", "pass"]), ('{"city": "Paris"}', ["student", "teacher", "pass"])],
    ids=["student-passes", "student-fails"],
)
def test_the_readme_first_call_run_as_written_prints_pass(
    gateway_url: str,
    backends: dict[str, object],
    stub: OpenAIStub,
    capsys: pytest.CaptureFixture[str],
    student_says: str,
    shown: list[str],
) -> None:
    """The README's Python block, run as a newcomer runs it (only the key's placeholder and the base URL
    replaced) against the gateway with the demo's extract-json profile: its first printed line is
    route, served-by, verdict and cost, and the verdict is pass, whether the student answers faithfully or
    (as a small model may) leaves out the country and the teacher serves."""
    TaskProfile.objects.create(name="extract-json", **PROFILES["extract-json"])
    secret = make_key(name="demo").raw
    stub.responder = lambda body: Reply(content=student_says if "student" in body["model"] else FAITHFUL)
    code = first_block()
    assert 'base_url="http://127.0.0.1:8000/v1", api_key="sg-…"' in code  # what is replaced, as written
    code = code.replace("http://127.0.0.1:8000/v1", f"{gateway_url}/v1").replace("sg-…", secret)
    exec(compile(code, "README.md", "exec"), {})  # the README's own code, run as written
    printed = capsys.readouterr().out.splitlines()
    route, served_by, verdict, cost = printed[0].split()
    assert [route, served_by, verdict] == shown and float(cost) > 0
    assert json.loads(printed[1]) == {"city": "Paris", "country": "France"}
