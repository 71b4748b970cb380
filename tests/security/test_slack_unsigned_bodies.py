"""An unsigned body sent to the Slack endpoint costs the serving process its HMAC, nothing more (issue
37, classes 1 and 5; round seven).

Bolt parses a Slack body (a JSON event, a slash command's form, an interaction's ``payload``) before it
checks the signature, and the endpoint's own guard parsed it first too (``parse_qsl``, in Python, under
the GIL). Anyone who can reach the port could make the server work on 3.8 MB forms: 1.3 million
``%41`` escapes cost about a second of CPU each, and four at once held ``GET /v1/models`` for 1.7 s
(probe, ``python -m app.serve``; such forms are now refused by the edge's escape bound first); 1.9
million empty fields, which have no escape, were a 500 after 18 s. Now the signature is
checked first, over the raw bytes at C speed (diagnostics/slack/views.py ``signed``), and only a
body Slack signed is parsed.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from diagnostics.slack.models import SlackEvent
from tests.support.gateway_process import APP_SERVE, gateway_process
from tests.support.liveness import models_keep_answering
from tests.support.slack_bot import SECRET, SlackClient

pytestmark = pytest.mark.django_db(transaction=True)

FORM = "application/x-www-form-urlencoded"
# Forms without percent escapes: those with more than SKILLGATE_MAX_FORM_ESCAPES are refused by the edge
# before they reach the endpoint (tests/security/test_form_escapes.py).
BODIES = {
    "empty fields": b"payload=1" + b"&a" * 1_900_000,
    "pairs": b"payload=1" + b"&a=b" * 950_000,
}


def send(url: str, body: bytes, headers: dict[str, str | bytes]) -> int:
    return httpx.post(f"{url}/slack/commands", content=body, headers=headers, timeout=60).status_code


@pytest.mark.parametrize("shape", sorted(BODIES))
def test_unsigned_forms_are_refused_before_they_are_parsed(bot, gateway_url, api_key, shape):
    body = BODIES[shape]
    forged: dict[str, str | bytes] = {
        "Content-Type": FORM,
        "X-Slack-Request-Timestamp": str(int(time.time())),
        "X-Slack-Signature": "v0=" + "0" * 64,
    }
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(lambda _: send(gateway_url, body, forged), range(4)))
    assert statuses == [401] * 4
    assert not SlackEvent.objects.exists()


@pytest.mark.slow
def test_unsigned_forms_leave_a_served_process_answering(tmp_path, api_key):
    """The same through ``python -m app.serve`` (the probe's setting: in the test process's own server
    the stall hid behind the test's threads). On the previous endpoint: 500s after 18 s."""
    env = {
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": "http://127.0.0.1:9/",
    }
    forged: dict[str, str | bytes] = {"Content-Type": FORM}
    with gateway_process("slack-unsigned", tmp_path, env=env, serve=APP_SERVE) as server:
        for body in BODIES.values():
            with models_keep_answering(server.url, api_key.raw), ThreadPoolExecutor(4) as pool:
                statuses = list(pool.map(send, [server.url] * 4, [body] * 4, [forged] * 4))
            assert statuses == [401] * 4


def test_a_malformed_signature_header_is_a_401_not_a_500(bot, gateway_url):
    for timestamp in (b"", b"abc", b"1" * 5000, "\u0661\u0662".encode(), b"-5"):
        headers: dict[str, str | bytes] = {"Content-Type": FORM, "X-Slack-Request-Timestamp": timestamp}
        headers["X-Slack-Signature"] = "v0=\u00e9".encode()
        assert send(gateway_url, b"payload=%7B%7D", headers) == 401, timestamp


def test_a_signed_request_is_still_read(bot, gateway_url):
    client = SlackClient(gateway_url)
    challenge = '{"type": "url_verification", "challenge": "c0ffee"}'
    answer = client.post(challenge, content_type="application/json")
    assert answer.status_code == 200 and answer.json() == {"challenge": "c0ffee"}
    assert client.secret == SECRET
