"""Claude Code with Skillgate as an HTTP MCP server (docs/guides/mcp.md, section 2): ``claude -p "why is the
api failing?"`` against the running Skillgate, its model the local OpenAI-protocol stub behind the gateway's
Messages API (as in test_agent_clis.py). The stub asks for Skillgate's ``ask`` tool; Claude Code calls it
over Streamable HTTP with the key from its MCP configuration; the incident's diagnosis runs in a real
Celery worker (the tests' fake environment); the answer Claude Code prints quotes the diagnosis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnostics.models import Incident, Trajectory
from routing import scopes
from routing.models import Invocation
from tests.clients.test_agent_clis import cli, run, tool_then_answer
from tests.factories import make_role_key
from tests.support.celery_worker import Worker, celery_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(transactional_db: None) -> Iterator[Worker]:
    with celery_worker("claude-code-mcp", app="tests.support.slack_worker") as running:
        yield running


def test_claude_code_asks_skillgate_why_a_service_fails_and_gets_the_diagnosis(
    gateway_url, backends, stub, worker, tmp_path: Path
):
    key = make_role_key(
        "claude", "operator", scopes=[scopes.LLM, scopes.INCIDENTS_WRITE, scopes.INCIDENTS_READ]
    )
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "skillgate": {
                        "type": "http",
                        "url": f"{gateway_url}/mcp",
                        "headers": {"Authorization": f"Bearer {key.raw}"},
                    }
                }
            }
        )
    )
    stub.responder = tool_then_answer(
        "mcp__skillgate__ask", {"question": "why is the api failing?", "environment": "fake", "wait_s": 60}
    )
    env = {
        "ANTHROPIC_BASE_URL": gateway_url,
        "ANTHROPIC_API_KEY": key.raw,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "MCP_TIMEOUT": "30000",
        "MCP_TOOL_TIMEOUT": "90000",
    }
    command = [cli("claude"), "-p", "why is the api failing?", "--model", "auto", "--output-format", "json"]
    command += ["--mcp-config", str(config), "--strict-mcp-config", "--allowedTools", "mcp__skillgate__ask"]
    done = run([*command, "--no-session-persistence"], env, work)

    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["num_turns"] == 2, result
    assert result["result"].startswith("The tool said:") and "DATABASE_URL is not set" in result["result"]
    first, second = stub.requests
    assert "mcp__skillgate__ask" in [t["function"]["name"] for t in first["tools"]]
    tool = second["messages"][-1]
    # a string, or text parts (Claude Code marks its tool results for caching; an unpriced marker is
    # dropped from the parts, which stay parts)
    assert tool["role"] == "tool" and '\\"answered\\": true' in json.dumps(tool["content"])
    incident = Incident.objects.get()
    assert incident.trigger_key_id == key.pk and incident.environment == "fake"
    assert incident.trajectories.get().status == Trajectory.Status.SUCCEEDED
    assert Invocation.objects.filter(api_key=key.key, endpoint="/v1/messages").count() == 2
