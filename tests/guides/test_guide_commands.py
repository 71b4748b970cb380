"""Every command block of the guides runs as written on a fresh `make run` (issue 41).

One `manage.py serve` (what `make run` runs, without the local vLLM and the demo traffic) on a fresh
database serves every page; each page's ```bash, ```sh and ```python blocks run in order in one shell
(tests/support/guides.py), and the test checks what the page says they print. The teacher and the
student are a local server speaking the OpenAI protocol (the local vLLM is not started) that answers the
demo's extract-json prompt as a faithful model would. Blocks marked ``<!-- guide-test: skip: why -->``
need what this machine lacks (the npm registry, the agent CLIs), are the benchmark itself, or are
`make run` and `make test` (a server until Ctrl-C, the whole suite);
``test_guide_pages.py`` checks that every other block is run here. docs/guides/mcp.md has its own test
(tests/mcp/test_guide_commands.py: its server needs an MCP program allowed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from bench.support.openai_stub import OpenAIStub, Reply
from tests.support.guides import DOCS, DONE, Serve, blocks, fresh_serve

GUIDES = DOCS / "guides"
# Each page whose blocks run, and what its output must show (patterns; the page says so next to the block).
EXPECTED = {
    GUIDES / "gateway.md": [r"student student pass \d+\.\d+", r'\{"city": "Paris", "country": "France"\}'],
    GUIDES / "routing.md": [
        "x-skillgate-route: student",
        "x-skillgate-verdict: pass",
        r"x-skillgate-cost-usd: \d",
        '"code": ?"budget_exceeded"',
    ],
    GUIDES / "learning.md": ['"profile": ?"extract-json"', '"status": ?"(queued|running)"'],
    GUIDES / "diagnosis.md": ["held-out  pass rate", r"\| intent \| split \|"],
    GUIDES / "diagnosis-agents.md": [
        r"bad_config \(target api\)",
        r'"title": ?"the crashpod keeps restarting"',
        r'"environment": ?"replay"',
    ],
}
RUN = list(EXPECTED)
_CAPITAL = re.compile(r"(\w+) is the capital of (\w+)\.")  # the demo's own prompt, in a test


def faithful(body: dict[str, Any]) -> Reply:
    """What a faithful model answers to the demo's extract-json prompt; "ok" to anything else."""
    text = str(body.get("messages", [{}])[-1].get("content", ""))
    found = _CAPITAL.search(text)
    if found is None:
        return Reply(content="ok")
    return Reply(content=json.dumps({"city": found[1], "country": found[2]}))


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    with OpenAIStub(responder=faithful) as upstream:
        base = f"http://127.0.0.1:{upstream.port}/v1"
        server_env = {"SKILLGATE_TEACHER_API_BASE": base, "SKILLGATE_STUDENT_API_BASE": base}
        with fresh_serve(tmp_path_factory.mktemp("guides"), server_env) as started:
            yield started


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN, ids=lambda page: page.name)
def test_every_command_of_the_page_runs_on_a_fresh_serve(serve: Serve, page: Any) -> None:
    run = serve.run(page)
    out = run.stdout
    assert run.returncode == 0, out[-4000:]
    assert out.count(DONE) == sum(block.runs for block in blocks(page)), out[-4000:]
    for expected in EXPECTED[page]:
        assert re.search(expected, out, re.I), (expected, out[-4000:])
