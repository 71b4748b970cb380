"""The real agent CLIs against the running gateway, their teacher and student the local OpenAI-protocol
stub: Claude Code (``claude -p``, Anthropic's Messages API) and Codex (``codex exec``, the Responses
API), each for a tool-using turn: the stub asks for the CLI's own file or shell tool, the CLI runs it
and sends the result back, and the stub's answer quotes it. Both run offline, with nothing but the
gateway's base URL and key (no login, no telemetry). The CLIs are pinned in tests/clients/package.json
(install: ``npm ci --prefix tests/clients``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench.support.openai_stub import Reply
from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.gateway import STUDENT_PRICES, TEACHER_PRICES

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        shutil.which("node") is None or shutil.which("npm") is None,
        reason="node and npm are needed to run the agent CLIs (tests/clients/package.json)",
    ),
]

BIN = Path(__file__).parent / "node_modules" / ".bin"
SECRET = "the launch code is 7421"


def cli(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{path} is missing: run `npm ci --prefix tests/clients`"
    return str(path)


def tool_then_answer(tool: str, arguments: dict[str, Any]) -> Callable[[dict[str, Any]], Reply]:
    """The stub's script: ask for ``tool`` first; once its result is in the conversation, answer with it."""

    def respond(body: dict[str, Any]) -> Reply:
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if results:
            return Reply(content=f"The tool said: {results[-1]}")
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": tool, "arguments": json.dumps(arguments)},
        }
        return Reply(content=None, tool_calls=[call])

    return respond


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A CLI with only what it is given: a fresh HOME, no proxy, no inherited keys."""
    base = {"PATH": os.environ["PATH"], "HOME": str(cwd.parent / "home"), "LANG": "C.UTF-8", "NO_COLOR": "1"}
    (cwd.parent / "home").mkdir(exist_ok=True)
    done = subprocess.run(
        command,
        env={**base, **env},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, (
        f"{command[0]} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


def assert_charged(rows: list[Invocation], prices: tuple[Decimal, Decimal]) -> None:
    for row in rows:
        assert row.status_code == 200 and row.error == ""
        expected = row.prompt_tokens * prices[0] + row.completion_tokens * prices[1]
        assert row.prompt_tokens > 0 and row.cost_usd == expected


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "note.txt").write_text(SECRET + "\n")
    return work


def test_claude_code_reads_a_file_through_its_tool_on_the_student_route(
    gateway_url, backends, api_key, stub, workdir
):
    TaskProfileFactory.create(
        name="cli", policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK, student=backends["student"]
    )
    stub.responder = tool_then_answer("Read", {"file_path": str(workdir / "note.txt")})
    env = {
        "ANTHROPIC_BASE_URL": gateway_url,
        "ANTHROPIC_API_KEY": api_key.raw,
        "ANTHROPIC_CUSTOM_HEADERS": "X-Skillgate-Task: cli",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    command = [cli("claude"), "-p", "What does note.txt say?", "--model", "auto", "--output-format", "json"]
    done = run([*command, "--allowedTools", "Read", "--no-session-persistence"], env, workdir)

    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["num_turns"] == 2
    assert result["result"].startswith("The tool said:") and SECRET in result["result"]
    # The CLI's own request: its large system prompt and its tools, streamed, came through translated.
    first, second = stub.requests
    assert first["stream"] is True and first["messages"][0]["role"] == "system"
    # Its cache breakpoints ask for writes the stub's backends do not price: dropped, not sent.
    assert "cache_control" not in json.dumps(stub.requests)
    assert len(json.dumps(first)) > 20_000 and "Read" in [t["function"]["name"] for t in first["tools"]]
    # (its tool result had a breakpoint: still a list of text parts, the marker taken off)
    tool = second["messages"][-1]
    assert tool["role"] == "tool" and SECRET in json.dumps(tool["content"])
    rows = list(Invocation.objects.order_by("created_at"))
    assert [(r.endpoint, r.route, r.served_by) for r in rows] == [("/v1/messages", "student", "student")] * 2
    assert_charged(rows, STUDENT_PRICES)


def codex_home(folder: Path, gateway_url: str) -> Path:
    """The README's Codex configuration, in a CODEX_HOME of its own."""
    folder.mkdir()
    (folder / "config.toml").write_text(
        'model = "auto"\n'
        'model_provider = "skillgate"\n\n'
        "[model_providers.skillgate]\n"
        'name = "Skillgate"\n'
        f'base_url = "{gateway_url}/v1"\n'
        'env_key = "SKILLGATE_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    return folder


def test_codex_runs_a_shell_command_through_its_tool_and_answers_with_its_output(
    gateway_url, backends, api_key, stub, workdir
):
    stub.responder = tool_then_answer("exec_command", {"cmd": "cat note.txt"})
    home = codex_home(workdir.parent / "codex", gateway_url)
    env = {"CODEX_HOME": str(home), "SKILLGATE_API_KEY": api_key.raw}
    command = [
        cli("codex"),
        "exec",
        "--skip-git-repo-check",
        "--sandbox",
        "danger-full-access",
        "--json",
        "What does note.txt say?",
    ]
    done = run(command, env, workdir)

    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    assert len(commands) == 1 and SECRET in commands[0]["aggregated_output"]
    answers = [i["text"] for i in items if i.get("type") == "agent_message"]
    assert answers and answers[-1].startswith("The tool said:") and SECRET in answers[-1]
    first, second = stub.requests
    assert first["stream"] is True and "exec_command" in [t["function"]["name"] for t in first["tools"]]
    assert second["messages"][-1]["role"] == "tool" and SECRET in second["messages"][-1]["content"]
    rows = list(Invocation.objects.order_by("created_at"))
    assert [(r.endpoint, r.route, r.served_by) for r in rows] == [("/v1/responses", "teacher", "teacher")] * 2
    assert_charged(rows, TEACHER_PRICES)
