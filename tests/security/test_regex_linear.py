"""Every regular expression routing runs on caller or model text is linear-time (issue 37).

Model answers and caller text go through code-fence, ``<tool_call>`` and JSON extraction in the
json_schema and tool_args verifiers and in self-consistency votes; Python's backtracking ``re`` made
those quadratic on long runs of blanks. They are plain string operations now (checked equal to the
expressions they replace on generated inputs), linear on a megabyte of blanks, and through the running
server an answer made of blank runs fails quickly while an ordinary call answers in under a second.
A walk of routing's code fails on any new ``re.`` use that is not on the commented allow-list below.
"""

from __future__ import annotations

import contextlib
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.support.openai_stub import Reply
from diagnostics.agent.investigation.observer import parse_decision
from routing.call.votes import answer_key
from routing.fences import unfenced
from routing.models import TaskProfile
from routing.verifiers.json_schema import parse_json
from routing.verifiers.tool_text import blocks, cut_short, written_calls
from routing.verifiers.tool_text import unfenced as tool_unfenced
from tests.factories import TaskProfileFactory
from tests.support.re_uses import re_uses
from training.services.cycle.skillbook import DistillationError, parse_distilled

ROOT = Path(__file__).resolve().parents[2]

# Each ``re`` use left in routing/, by (file, pattern): why it is linear or never sees untrusted text.
# Use RE2 (google-re2, see routing/verifiers/regex.py) or plain string operations for anything new.
_TG = "routing/verifiers/tool_grounding.py"
_SCALED = r"(-?\d+(?:,\d{3})*(?:\.\d+)?)(?:\s*(thousand|million|billion|[kKmM]\b))?"
_QUOTE_OPEN, _QUOTE_CLOSE = "['\\\"“‘]", "['\\\"”’]"
ALLOWED = {
    ("routing/budgets/store.py", "[^A-Za-z0-9_.]"): "the host's own name, not caller text",
    ("routing/call/events.py", "[A-Za-z0-9][A-Za-z0-9_.-]{0,199}"): "one class, a bounded repeat",
    ("routing/call/replicas.py", r"failed \((\d{3})\)"): "a literal prefix and three digits",
    (
        "routing/api/messages/cache.py",
        r"messages\[(\d+)\]\.content\[(\d+)\]\.cache_control",
    ): "our own error's param, literals and digits",
    ("routing/json_body.py", "[\ud800-\udfff]"): "one class",
    ("routing/json_body.py", "\x00"): "a literal",
    ("routing/media_urls.py", r"\A\s*[A-Za-z][A-Za-z0-9+.\-]*://"): "anchored, one attempt, disjoint classes",
    (
        "routing/replica_urls.py",
        "[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?|[0-9a-f:.]+",
    ): "an operator's host name",
    ("routing/pricing.py", r"input_cost_per_token_above_(\d+)k_tokens"): "litellm's bundled price keys",
    ("routing/router/learning/calls.py", r"(?<![\w.])-?\d+(?:\.\d+)?"): "digits: one way to match",
    ("routing/router/learning/calls.py", "[A-Za-z][a-z]+|[A-Z]+(?![a-z])"): "each match consumes its run",
    # tool_grounding.py, on request text and tool descriptions: each attempt is bounded by the run it
    # starts (digits, then one blank run no other attempt rescans) or by its {2,80} / {1,40} repeats.
    (_TG, _SCALED): "digits, then one blank run",
    (_TG, r"(?<![\w.^])" + _SCALED): "the same, after a fixed-width look-behind",
    (_TG, r"[.)]\s"): "two characters",
    (_TG, r"[^\W_]+"): "one class",
    (_TG, "[\\\"“]([^\\\"”\\n]{2,80})[\\\"”]|(?<!\\w)'([^'\\n]{2,80})'(?!\\w)"): "bounded repeats",
    (
        _TG,
        "\\b([A-Z][\\w'’-]*(?:[ \\t]+(?:of[ \\t]+|de[ \\t]+)?[A-Z][\\w'’-]*)*)",
    ): "one attempt per blank run",
    (_TG, _QUOTE_OPEN + "([^'\\\"”’\\n]{1,40})" + _QUOTE_CLOSE): "a bounded repeat",
    (
        _TG,
        "default(?:s)?(?:\\s+value)?(?:\\s+is|\\s+to|\\s*:|\\s*=)?\\s*"
        + _QUOTE_OPEN
        + "([^'\\\"”’\\n]{1,40})"
        + _QUOTE_CLOSE,
    ): "one blank run per 'default', its alternatives in sequence",
}


def _re_uses() -> set[tuple[str, str]]:
    return re_uses("routing")


def test_every_re_use_in_routing_is_on_the_allow_list():
    new = sorted(_re_uses() - ALLOWED.keys())
    assert not new, (
        f"Python re on possibly untrusted text (use RE2 or string operations, or allow it here): {new}"
    )


def test_the_allow_list_has_no_stale_entries():
    assert not sorted(ALLOWED.keys() - _re_uses())


# --- equal to the expressions they replace ---------------------------------------------------------

OLD_FENCED_JSON = re.compile(
    r"\A\s*```[ \t]*(?:json)?[ \t]*\n(.*?)\n?[ \t]*```\s*\Z", re.DOTALL | re.IGNORECASE
)
OLD_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
OLD_FENCE = re.compile(r"\A\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*\Z", re.DOTALL)
PIECES = st.lists(
    st.sampled_from(
        ["```", "json", "JSON", "\n", " ", "\t", "x", "{}", "`", "<tool_call>", "</tool_call>", "\r"]
    ),
    max_size=12,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(PIECES)
def test_the_string_operations_equal_the_old_expressions(text):
    old = OLD_FENCED_JSON.match(text)
    assert unfenced(text) == (old.group(1) if old else None)
    assert blocks(text) == OLD_BLOCK.findall(text)
    old_fence = OLD_FENCE.match(text)
    assert tool_unfenced(text) == (old_fence.group(1) if old_fence else text).strip()


BLANKS = " \t\n" * 350_000  # ~1 MB


@pytest.mark.parametrize(
    "text",
    [
        f"```json\n{BLANKS}x",
        f"```{BLANKS}",
        f"<tool_call>{BLANKS}x",
        f"<tool_call>{BLANKS}</tool_call>" * 3,
        f"{{{BLANKS}",
    ],
    ids=["fence-unclosed", "fence-blanks", "block-unclosed", "blocks", "json-blanks"],
)
def test_a_megabyte_of_blanks_is_read_in_linear_time(text):
    started = time.thread_time()  # CPU time of this thread: other work on the machine does not count
    parse_json(text)
    written_calls_or_error(text)
    cut_short(text)
    answer_key({"role": "assistant", "content": text})
    # the same fence, on the diagnosis Observer's answers and the SkillBook distiller's teacher answers
    parse_decision(text, {"type": "object"}, {}, {})
    with contextlib.suppress(DistillationError):
        parse_distilled(text)
    assert time.thread_time() - started < 1.0


def test_the_old_fence_expression_is_quadratic_on_blank_runs():
    """The check above can fail: the expression routing.fences replaced takes seconds on blanks."""
    text = "```json\n" + " \t" * 5_000 + "x"
    started = time.perf_counter()
    OLD_FENCED_JSON.match(text)
    old = time.perf_counter() - started
    started = time.perf_counter()
    unfenced(text)
    assert time.perf_counter() - started < old / 10


def written_calls_or_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        written_calls(text)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "verifier",
    [{"kind": "json_schema", "schema": {"type": "object"}}, {"kind": "tool_args", "content_calls": True}],
    ids=["json_schema", "tool_args"],
)
def test_blank_run_answers_fail_quickly_through_the_server(gateway_url, backends, api_key, stub, verifier):
    TaskProfileFactory.create(name="blanks", verifier=verifier, policy=TaskProfile.Policy.ALWAYS_TEACHER)
    answer = "```json\n" + " \t" * 60_000 + "\n<tool_call>" + " " * 60_000 + "x"
    stub.responder = lambda body: Reply(content=answer if body["messages"][-1]["content"] == "go" else "ok")
    headers = {"Authorization": f"Bearer {api_key.raw}"}
    body = {"model": "auto", "messages": [{"role": "user", "content": "go"}], "metadata": {"task": "blanks"}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    if verifier["kind"] == "tool_args":
        body["tools"] = tools
    with ThreadPoolExecutor(max_workers=2) as pool:
        started = time.perf_counter()
        url = f"{gateway_url}/v1/chat/completions"
        attacks = [pool.submit(httpx.post, url, json=body, headers=headers, timeout=60) for _ in range(2)]
        time.sleep(0.05)
        plain = time.perf_counter()
        models = httpx.get(f"{gateway_url}/v1/models", headers=headers, timeout=30)
        plain = time.perf_counter() - plain
        responses = [attack.result() for attack in attacks]
        took = time.perf_counter() - started
    assert models.status_code == 200 and plain < 1.0
    for response in responses:
        assert response.status_code == 200, response.text
        assert response.headers["x-skillgate-verdict"] == "fail"
    assert took < 10
