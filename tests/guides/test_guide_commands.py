"""Every command block of the guides runs as written on a fresh `make run` (issue 41).

One `manage.py serve` (what `make run` runs, without the local vLLM and the demo traffic) on a fresh
database serves every page; each page's ```bash, ```sh and ```python blocks run in order in one shell
(tests/support/guides.py), and the test checks what the page says they print. The teacher and the
student are a local server speaking the OpenAI protocol (the local vLLM is not started) that answers the
demo's extract-json prompt as a faithful model would. Slack's Web API is a local server speaking its
protocol (tests/support/slack_stub.py, the only other stand-in); the server runs with
docs/guides/slack.md's own ``export SLACK_...`` settings, so that page's signed requests are checked
with the secret it gives, and the test sees what the bot posts; the page's Approve and Deny clicks
(``block_actions`` payloads it builds and signs) must reach Slack as the proposal's message updated in
place and the opener's refusal sent to that member alone. docs/guides/diagnosis-agents.md's walk
starts the lab (in the server's folder, on free ports), breaks it, has the fix approved by a second user
and checks the heal. Blocks marked ``<!-- guide-test: skip: why -->``
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
from tests.support.slack_stub import SlackStub
from tests.support.wait import wait_until

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
        r"\[BAD\] api",  # the lab's walk: the fault shows, is diagnosed, approved by another user, healed
        r"request_timeout_s",
        r"\('patch_config', \{'service': 'api', 'key': 'request_timeout_s', 'value': 30\}\)",
        r'"status": ?"approved".*"decided_by": ?"demo-approver"',
        r"resolved \[\('executed', 'cleared'\)\]",
        r"(\s*\[ok \] (store|api|web|worker|loadgen): [^\n]*\n){5}",
        r"bad_config \(target api\)",
        r'"title": ?"the crashpod keeps restarting"',
        r'"environment": ?"replay"',
    ],
    GUIDES / "slack.md": [
        r"U012AB3CD acts as demo; (can|cannot) approve",
        r"^Opening an incident: checkout returns 502$",
        "wrong signature: 401",
        r'"source": ?"slack".*"created_by": ?"demo".*"ref": ?"U012AB3CD"',
        r"U0APPROVER acts as demo-approver; can approve",  # the Approve / Deny walk
        r"\('(restart_service|patch_config)', \{'service': 'api'[^)]*\}, 'pending'\)",
        r"^approve_action by U0APPROVER: 200$",
        r"^deny_action by U012AB3CD: 200$",
        r"\[\('(approved|executing|executed)', 'demo-approver'\)\]",
    ],
}
# What must not follow a line of the output: once the incident is resolved, no service of the lab is bad.
ABSENT_AFTER = {GUIDES / "diagnosis-agents.md": ("resolved [('executed', ", "[BAD]")}
RUN = list(EXPECTED)
_SETTING = re.compile(r"^export (.+)$", re.M)  # the page's own text
_CAPITAL = re.compile(r"(\w+) is the capital of (\w+)\.")  # the demo's own prompt, in a test


def faithful(body: dict[str, Any]) -> Reply:
    """What a faithful model answers to the demo's extract-json prompt; "ok" to anything else."""
    text = str(body.get("messages", [{}])[-1].get("content", ""))
    found = _CAPITAL.search(text)
    if found is None:
        return Reply(content="ok")
    return Reply(content=json.dumps({"city": found[1], "country": found[2]}))


def slack_settings() -> dict[str, str]:
    """The ``export SLACK_...=...`` settings docs/guides/slack.md gives, as the server's environment."""
    found: dict[str, str] = {}
    for block in blocks(GUIDES / "slack.md"):
        for line in _SETTING.findall(block.body):
            found.update(pair.split("=", 1) for pair in line.split() if pair.startswith("SLACK_"))
    assert set(found) == {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"}, found
    return found


@pytest.fixture(scope="module")
def slack() -> Iterator[SlackStub]:
    with SlackStub() as stub:
        yield stub


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory, slack: SlackStub) -> Iterator[Serve]:
    with OpenAIStub(responder=faithful) as upstream:
        base = f"http://127.0.0.1:{upstream.port}/v1"
        server_env = {"SKILLGATE_TEACHER_API_BASE": base, "SKILLGATE_STUDENT_API_BASE": base}
        server_env |= {**slack_settings(), "SLACK_API_URL": slack.base_url}
        with fresh_serve(tmp_path_factory.mktemp("guides"), server_env) as started:
            yield started


def _slack_thread(slack: SlackStub, token: str) -> list[dict[str, Any]]:
    """The incident's root message in the page's channel and the bot's messages in its thread, once the
    diagnosis has posted there; [] before."""
    posted = slack.posted()
    roots = [m for m in posted if m["channel"] == "C0INCIDENTS" and "checkout returns 502" in m["text"]]
    thread = [m for m in posted if roots and m.get("thread_ts") == roots[0]["ts"]]
    tokens = {call.token for call in slack.calls}
    return [*roots, *thread] if roots and thread and tokens == {token} else []


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN, ids=lambda page: page.name)
def test_every_command_of_the_page_runs_on_a_fresh_serve(serve: Serve, slack: SlackStub, page: Any) -> None:
    run = serve.run(page)
    out = run.stdout
    print(out)  # shown when the test fails
    assert run.returncode == 0, out[-4000:]
    assert out.count(DONE) == sum(block.runs for block in blocks(page)), out[-4000:]
    for expected in EXPECTED[page]:
        assert re.search(expected, out, re.I | re.M), (expected, out[-4000:])
    if page in ABSENT_AFTER:
        after, absent = ABSENT_AFTER[page]
        assert absent not in out.split(after, 1)[1], out[-4000:]
    if page.name == "slack.md":  # what Slack receives: the incident in the channel, its diagnosis threaded
        token = slack_settings()["SLACK_BOT_TOKEN"]
        wait_until(lambda: _slack_thread(slack, token), timeout=120, interval=0.5, what="the bot's thread")
        _the_clicks_reached_slack(slack)


def _the_clicks_reached_slack(slack: SlackStub) -> None:
    """The guide's Approve / Deny clicks, as Slack sees them: the proposal's message (the one with the
    buttons, in the incident's thread) updated in place to say who approved it, without buttons; the
    requester's Deny refused to that member alone (an ephemeral message) with the two-person rule's
    reason."""
    proposals = {  # the messages with buttons in a thread, by their ts (the check after a fix that did
        m["ts"]: m  # not clear may diagnose again and propose another)
        for m in slack.posted()
        if m.get("thread_ts") and any(b.get("type") == "actions" for b in m.get("blocks") or [])
    }
    assert proposals

    def updated() -> list[dict[str, Any]]:
        return [u for u in slack.of("chat.update") if u["ts"] in proposals and "demo-approver" in str(u)]

    final = wait_until(updated, timeout=60, interval=0.5, what="the proposal's message updated")[-1]
    proposal = proposals[final["ts"]]
    value = json.loads(proposal["blocks"][-1]["elements"][0]["value"])
    assert final["channel"] == proposal["channel"] and f"Proposed action {value['action']}" in final["text"]
    assert not any(b.get("type") == "actions" for b in final["blocks"])  # the buttons are gone
    assert "Approved by demo-approver" in json.dumps(final["blocks"])

    def refused() -> list[dict[str, Any]]:
        return [e for e in slack.of("chat.postEphemeral") if e["user"] == "U012AB3CD"]

    refusal = wait_until(refused, timeout=60, interval=0.5, what="the opener's Deny refused")[-1]
    assert "You requested this action" in refusal["text"] and "someone else must" in refusal["text"]
    assert refusal["thread_ts"] == proposal["thread_ts"]
    assert not [e for e in slack.of("chat.postEphemeral") if e["user"] == "U0APPROVER"]  # nothing refused
