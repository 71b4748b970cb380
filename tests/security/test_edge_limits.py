"""One request must not stall a process: bodies, JSON nesting, patterns and logins are bounded at the edge.

Driven through the running server (uvicorn on app.asgi) with real clients: raw sockets where the test
must control what is sent and when (a Content-Length that is a lie, a chunked upload that never ends),
httpx, the openai SDK and a requests session elsewhere. Every attack ends with a normal call that works.
"""

from __future__ import annotations

import json
import re
import select
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import openai
import pytest
import requests
from django.contrib.auth.models import Group, User

from app.web import roles
from bench.support.openai_stub import Reply
from routing import scopes
from routing.models import Invocation
from tests.factories import KeyPair, TaskProfileFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
LIMIT = 64 * 1024  # the body limit these tests run with (SKILLGATE MAX_BODY_BYTES)


@pytest.fixture
def small_limit(settings) -> int:
    settings.SKILLGATE = {**settings.SKILLGATE, "MAX_BODY_BYTES": LIMIT}
    return LIMIT


def chat(gateway_url: str, key: str, body: bytes | None = None, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}/v1/chat/completions",
        content=json.dumps(HELLO).encode() if body is None else body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", **headers},
        timeout=30,
    )


def assert_serving(gateway_url: str, key: str) -> None:
    """The service still answers a normal call."""
    response = chat(gateway_url, key)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "ok"


def openai_error(response: httpx.Response | tuple[int, dict[str, str], bytes]) -> dict[str, object]:
    body = response.content if isinstance(response, httpx.Response) else response[2]
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


# --- raw HTTP/1.1 ----------------------------------------------------------------------------------


def connect(gateway_url: str) -> socket.socket:
    url = urlsplit(gateway_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    return sock


def request_head(path: str, key: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {key}", *headers]
    lines.append("Content-Type: application/json")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the response body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def test_a_declared_oversized_body_is_refused_before_a_byte_of_it_is_read(
    gateway_url, backends, api_key, stub
):
    """Content-Length says 10 GB and no byte follows: the 413 comes at once, the upload is never awaited."""
    assert_serving(gateway_url, api_key.raw)  # a fresh server's first call loads litellm
    stub.requests.clear()
    Invocation.objects.all().delete()
    limit = 4 * 1024 * 1024
    with connect(gateway_url) as sock:
        sock.sendall(request_head("/v1/chat/completions", api_key.raw, "Content-Length: 10000000000"))
        started = time.monotonic()
        status, headers, body = read_response(sock)
        assert time.monotonic() - started < 2
        # The server closes the connection instead of reading (or waiting for) the rest.
        assert headers["connection"] == "close" and sock.recv(1) == b""
    assert status == 413
    error = openai_error((status, headers, body))
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "request_too_large",
        None,
    )
    assert str(limit) in str(error["message"])
    assert stub.requests == [] and not Invocation.objects.exists()
    assert_serving(gateway_url, api_key.raw)


def test_a_body_over_the_limit_with_its_length_gets_the_openai_413(
    gateway_url, backends, api_key, stub, small_limit
):
    """httpx sends the whole oversized body (the server stops reading it): the SDKs see a clean 413."""
    response = chat(gateway_url, api_key.raw, b'{"pad": "' + b"x" * (4 * LIMIT) + b'"}')
    assert response.status_code == 413
    assert openai_error(response)["code"] == "request_too_large"
    with pytest.raises(openai.APIStatusError) as refused:
        openai.OpenAI(
            base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0
        ).chat.completions.create(
            model="auto",
            messages=[{"role": "user", "content": "x" * (2 * LIMIT)}],
        )
    assert refused.value.status_code == 413
    assert isinstance(refused.value.body, dict) and refused.value.body["code"] == "request_too_large"
    assert stub.requests == [] and not Invocation.objects.exists()
    assert_serving(gateway_url, api_key.raw)


def test_a_chunked_upload_is_cut_off_as_soon_as_it_passes_the_limit(
    gateway_url, backends, api_key, stub, small_limit
):
    """No Content-Length: the server counts what arrives and answers 413 while the client still sends."""
    planned = 256 * LIMIT  # 16 MiB, far more than the server will take
    chunk = b"[" + b"0," * 4095 + b"0]"  # 8 KiB of valid JSON text, sent over and over
    sent = 0
    with connect(gateway_url) as sock:
        sock.sendall(request_head("/v1/chat/completions", api_key.raw, "Transfer-Encoding: chunked"))
        answered = False
        while sent < planned:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                answered = True
                break
            try:
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                answered = True  # closed after answering: the 413 waits in our receive buffer
                break
            sent += len(chunk)
        assert answered, "the server read the whole upload without answering"
        status, headers, body = read_response(sock)
    assert status == 413 and headers["connection"] == "close"
    assert openai_error((status, headers, body))["code"] == "request_too_large"
    # Answered mid-upload: what was sent is the limit plus what the sockets' buffers held.
    assert LIMIT < sent < planned / 2
    assert stub.requests == [] and not Invocation.objects.exists()
    assert_serving(gateway_url, api_key.raw)


def test_a_chunked_upload_to_the_api_and_the_dashboard_gets_their_own_413(
    gateway_url, backends, api_key, small_limit
):
    """httpx streams a generator (chunked): it is stopped early, in each interface's error shape."""
    produced = {"chunks": 0}

    def upload() -> Iterator[bytes]:
        for _ in range(2000):  # 16 MB if it were all read
            produced["chunks"] += 1
            yield b" " * 8192

    for path, kind in [("/api/incidents", "api"), ("/accounts/login/", "text"), ("/slack/events", "text")]:
        produced["chunks"] = 0
        response = httpx.post(
            gateway_url + path,
            content=upload(),
            headers={
                "Authorization": f"Bearer {api_key.raw}",
                "Content-Type": "application/json",
                # headers Slack could have sent (else a 401 before the body: app/anonymous.py)
                "X-Slack-Request-Timestamp": str(int(time.time())),
                "X-Slack-Signature": "v0=" + "0" * 64,
            },
            timeout=30,
        )
        assert response.status_code == 413, (path, response.text)
        assert produced["chunks"] < 1000, f"{path}: the server read {produced['chunks']} chunks"
        if kind == "api":
            assert response.json() == {
                "error": {
                    "message": f"Request body is larger than {LIMIT} bytes.",
                    "code": "request_too_large",
                }
            }
        else:
            assert response.headers["content-type"].startswith("text/plain")
            assert response.text.strip() == f"Request body is larger than {LIMIT} bytes."
    assert_serving(gateway_url, api_key.raw)


# --- JSON nesting ----------------------------------------------------------------------------------

DEEP_BODIES = {
    "arrays": b"[" * 200_000,
    "objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "inside messages": (
        b'{"model": "auto", "messages": [{"role": "user", "content": "hi", "x": '
        + b"[" * 50_000
        + b"]" * 50_000
        + b"}]}"
    ),
}


@pytest.mark.parametrize("name", list(DEEP_BODIES))
def test_deeply_nested_json_is_a_400_not_a_500_on_the_gateway(gateway_url, backends, api_key, stub, name):
    response = chat(gateway_url, api_key.raw, DEEP_BODIES[name])
    assert response.status_code == 400, response.text[:300]
    error = openai_error(response)
    assert error["code"] == "invalid_json" and error["type"] == "invalid_request_error"
    assert "at most 64" in str(error["message"])  # names the limit (SKILLGATE_MAX_JSON_DEPTH)
    assert stub.requests == [] and not Invocation.objects.exists()
    assert_serving(gateway_url, api_key.raw)


@pytest.mark.parametrize(
    "body",
    [b'"' + b'\\"' * 1_500_000, b'"' + b'\\"' * 1_500_000 + b"\\", b'["' + b"\\" * 3_000_000],
    ids=["escaped quotes", "trailing backslash", "backslashes"],
)
def test_a_body_built_to_make_the_depth_scan_backtrack_is_answered_at_once(
    gateway_url, backends, api_key, stub, body
):
    """The depth check itself must stay linear: an unterminated string of escaped quotes (3 MB)."""
    started = time.monotonic()
    response = chat(gateway_url, api_key.raw, body)
    assert time.monotonic() - started < 2
    assert response.status_code == 400 and openai_error(response)["code"] == "invalid_json"
    assert_serving(gateway_url, api_key.raw)


def test_json_within_the_depth_limit_is_served(gateway_url, backends, api_key, stub):
    """64 levels are allowed: a request with a nested (but sane) field still reaches pydantic."""
    nested: object = 1
    for _ in range(60):
        nested = {"a": nested}
    response = chat(gateway_url, api_key.raw, json.dumps({**HELLO, "metadata": {"deep": nested}}).encode())
    assert response.status_code == 200, response.text[:300]
    assert_serving(gateway_url, api_key.raw)


@pytest.fixture
def operations_key(transactional_db: None) -> KeyPair:
    """A key allowed to open incidents: every scope, owned by a superuser (every permission)."""
    owner = User.objects.create_superuser("root", "root@example.com", "unused-password-1")
    return make_key(name="ops", owner=owner, scopes=list(scopes.ALL))


@pytest.mark.parametrize("name", ["arrays", "objects"])
def test_deeply_nested_json_is_a_400_on_the_incidents_api(
    gateway_url, backends, api_key, operations_key, name
):
    response = httpx.post(
        f"{gateway_url}/api/incidents",
        content=DEEP_BODIES[name],
        headers={"Authorization": f"Bearer {operations_key.raw}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "invalid_json" and "at most 64" in error["message"]
    # The API still parses a normal body (here: an environment it does not know, a 400 of its own).
    normal = httpx.post(
        f"{gateway_url}/api/incidents",
        json={"title": "t", "environment": "no-such-environment"},
        headers={"Authorization": f"Bearer {operations_key.raw}"},
        timeout=30,
    )
    assert normal.status_code == 400 and normal.json()["error"]["code"] != "invalid_json"
    assert_serving(gateway_url, api_key.raw)


# --- a pattern that backtracks ---------------------------------------------------------------------

EVIL = "(a+)+$"


@pytest.mark.parametrize("owner", ["profile", "caller"])
def test_a_catastrophically_backtracking_pattern_does_not_hold_the_server(
    gateway_url, backends, api_key, stub, owner
):
    """``(a+)+$`` on "a" x 40 + "!" is 2^40 steps for a backtracking engine: the call must return at once."""
    metadata: dict[str, object] = {"task": "redos"}
    if owner == "profile":
        TaskProfileFactory.create(name="redos", verifier={"kind": "regex", "pattern": EVIL})
        key = api_key
    else:
        TaskProfileFactory.create(name="redos", allow_call_verifier=True)
        key = make_key(name="caller", scopes=[scopes.LLM, scopes.CALL_VERIFIER])
        metadata["verifier"] = {"kind": "regex", "pattern": EVIL}
    assert_serving(gateway_url, key.raw)  # warm: the first call of a fresh server loads litellm
    stub.responder = lambda body: Reply(content="a" * 40 + "!")
    started = time.monotonic()
    response = chat(gateway_url, key.raw, json.dumps({**HELLO, "metadata": metadata}).encode())
    assert time.monotonic() - started < 2
    assert response.status_code == 200, response.text
    assert response.headers["x-skillgate-verdict"] in ("fail", "error")
    stub.responder = lambda body: Reply()
    assert_serving(gateway_url, api_key.raw)


# --- login throttling ------------------------------------------------------------------------------

PASSWORD = "correct horse battery staple"
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def attempt(session: requests.Session, gateway_url: str, username: str, password: str) -> requests.Response:
    """Logs in through the login form, as a browser would: GET the page, POST it with its CSRF token."""
    page = session.get(f"{gateway_url}/accounts/login/", timeout=30)
    assert page.status_code == 200
    token = CSRF_INPUT.search(page.text)
    assert token is not None
    return session.post(
        f"{gateway_url}/accounts/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password, "next": "/"},
        headers={"Referer": f"{gateway_url}/accounts/login/"},
        allow_redirects=False,
        timeout=30,
    )


def test_failed_logins_lock_the_account_out_even_for_the_right_password(
    gateway_url, backends, api_key, settings
):
    limit = settings.AXES_FAILURE_LIMIT
    assert limit == 5  # the default (AXES_FAILURE_LIMIT)
    User.objects.create_user("victim", "victim@example.com", PASSWORD)
    bystander = User.objects.create_user("bystander", "bystander@example.com", PASSWORD)
    bystander.groups.add(Group.objects.get(name=roles.VIEWER))
    attacker = requests.Session()
    for n in range(1, limit):
        response = attempt(attacker, gateway_url, "victim", f"guess-{n}")
        assert response.status_code == 200 and "Please enter a correct username" in response.text
    locked = attempt(attacker, gateway_url, "victim", f"guess-{limit}")
    assert locked.status_code == 429
    assert "Too many failed logins" in locked.text and "15 minutes" in locked.text

    owner = requests.Session()  # a fresh session does not help: username + address are locked
    refused = attempt(owner, gateway_url, "victim", PASSWORD)
    assert refused.status_code == 429 and "Too many failed logins" in refused.text
    assert "sessionid" not in owner.cookies
    assert owner.get(f"{gateway_url}/", allow_redirects=False, timeout=30).status_code == 302  # still out

    # Another username from the same address is not affected; a success starts from zero again.
    other = requests.Session()
    assert attempt(other, gateway_url, "bystander", "wrong").status_code == 200
    welcome = attempt(other, gateway_url, "bystander", PASSWORD)
    assert welcome.status_code == 302 and "sessionid" in other.cookies
    assert other.get(f"{gateway_url}/", allow_redirects=False, timeout=30).status_code == 200
    assert_serving(gateway_url, api_key.raw)


@pytest.mark.parametrize(
    ("verifier", "answer"),
    [
        ({"kind": "json_schema", "schema": {"type": "array"}}, "[" * 100_000),
        ({"kind": "json_schema", "schema": {"type": "object"}}, '{"a":' * 50_000),
    ],
    ids=["arrays", "objects"],
)
def test_a_deeply_nested_model_answer_fails_verification_instead_of_a_500(
    gateway_url, backends, api_key, stub, verifier, answer
):
    """A model's answer is as untrusted as a request: its nesting is bounded before it is parsed."""
    TaskProfileFactory.create(name="nested", policy="always_teacher", verifier=verifier)
    stub.responder = lambda body: Reply(content=answer)
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "metadata": {"task": "nested"}}
    resp = chat(gateway_url, api_key.raw, json.dumps(body).encode())
    assert resp.status_code == 200 and resp.headers["x-skillgate-verdict"] == "fail"
    assert "levels" in Invocation.objects.get().verdict_detail
    stub.responder = lambda body: Reply()
    assert_serving(gateway_url, api_key.raw)
