"""A caller who has not authenticated cannot make the server write its body to disk, or hold more than a
small one (issue 37, class 5, round eight; app/anonymous.py).

Django's ASGI handler spooled every body past 2.5 MB to a temporary file before any view ran, and the
multipart upload handler wrote file parts to another: 150 no-key 4 MB bodies at once took 560 MB on the
Slack endpoint, ``/api/``, the login page, the dashboard and the admin. Driven through the server as
app/serve.py configures it, in this process's thread, so every file it opens shows in ``/proc/self/fd``.
"""

from __future__ import annotations

import os
import select
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore

from app.anonymous import ANONYMOUS_BODY_BYTES
from tests.support.raw_http import connect, head, read_response, served
from tests.support.wall import bound

pytestmark = pytest.mark.django_db(transaction=True)

BODY_BYTES = 4 * 1024 * 1024 - 4096  # under SKILLGATE_MAX_BODY_BYTES: the edge lets it through
AT_ONCE = 24


@pytest.fixture(scope="module")
def served_url() -> Iterator[str]:
    with served() as url:
        yield url


@pytest.fixture
def spool(tmp_path: Path, settings) -> Iterator[Path]:
    """The folder every temporary file of the process goes to, for the test."""
    folder = tmp_path / "spool"
    folder.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = str(folder)
    before = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = before


def files_under(folder: Path) -> int:
    """Files of this process open under ``folder`` (an unlinked ``O_TMPFILE`` too) or left in it."""
    opened = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            opened += os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
        except OSError:
            continue
    return opened + len(os.listdir(folder))


def multipart(size: int) -> tuple[str, bytes]:
    boundary = "sgboundary"
    part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="csrfmiddlewaretoken"\r\n\r\n{"a" * 32}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", part + b"x" * (size - len(part) - len(tail)) + tail


def answer_of(sock) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and first bytes of the answer (framed by Content-Length or not)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def post_whole(url: str, path: str, *headers: str) -> tuple[int, dict[str, str], bytes, float]:
    """Sends a 4 MB multipart body with a CSRF cookie, as much of it as the server takes; the answer and
    how long it took."""
    content_type, body = multipart(BODY_BYTES)
    started = time.monotonic()
    with connect(url, timeout=20) as sock:
        sock.sendall(
            head(
                "POST",
                path,
                f"Content-Type: {content_type}",
                f"Content-Length: {len(body)}",
                "Cookie: csrftoken=" + "a" * 32,
                *headers,
            )
        )
        answered, _, _ = select.select([sock], [], [], 1.0)  # a refusal from the headers comes first
        if not answered:
            sock.sendall(body)
        status, response_headers, answer = answer_of(sock)
    return status, response_headers, answer, time.monotonic() - started


STALE_SIGNATURE = "X-Slack-Signature: v0=" + "0" * 64  # well-formed, but an hour old
ATTACKS = [
    ("/accounts/login/", (), 413),
    ("/admin/login/", (), 413),
    ("/", (), 413),
    ("/api/diagnoses", (), 413),
    ("/api/diagnoses", ("Authorization: Bearer sg-not-a-key",), 401),
    ("/slack/events", (), 401),
    (
        "/slack/events",
        (f"X-Slack-Request-Timestamp: {int(time.time()) - 3600}", "X-Slack-Signature: v0=" + "0" * 64),
        401,
    ),
]


def test_no_key_bodies_are_refused_before_they_are_read(served_url, spool, api_key) -> None:
    highest = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal highest
        while not stop.is_set():
            highest = max(highest, files_under(spool))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    models_s: list[float] = []
    try:
        with ThreadPoolExecutor(AT_ONCE) as pool:
            runs = [
                pool.submit(post_whole, served_url, path, *headers)
                for n in range(AT_ONCE)
                for path, headers, _ in [ATTACKS[n % len(ATTACKS)]]
            ]
            while not all(run.done() for run in runs):
                started = time.monotonic()
                response = httpx.get(
                    f"{served_url}/v1/models", headers={"Authorization": f"Bearer {api_key.raw}"}, timeout=10
                )
                assert response.status_code == 200
                models_s.append(time.monotonic() - started)
            answers = [run.result() for run in runs]
    finally:
        stop.set()
        watcher.join()
    assert highest == 0, f"{highest} temporary files opened for bodies of callers with no key"
    for n, (status, headers, body, took) in enumerate(answers):
        path, _, expected = ATTACKS[n % len(ATTACKS)]
        assert status == expected, (path, status, body[:200])
        assert headers.get("connection") == "close"
        assert took < bound(2.0), (path, took)
    assert max(models_s, default=0) < bound(1.0)


def test_a_chunked_anonymous_body_is_cut_at_the_bound(served_url, spool) -> None:
    with connect(served_url, timeout=10) as sock:
        sock.sendall(
            head("POST", "/accounts/login/", "Transfer-Encoding: chunked", "Content-Type: text/plain")
        )
        chunk = b"x" * 16384
        try:
            for _ in range(ANONYMOUS_BODY_BYTES // len(chunk) + 4):
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        except OSError:
            pass
        status, headers, body = read_response(sock)
    assert status == 413 and headers.get("connection") == "close"
    assert str(ANONYMOUS_BODY_BYTES).encode() in body
    assert files_under(spool) == 0


def test_callers_who_authenticated_keep_their_bodies(served_url, spool, api_key) -> None:
    user = User.objects.create_user("reader", password="pw-not-used-here-123")
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    body = b"x" * (ANONYMOUS_BODY_BYTES * 4)
    logged_in = httpx.post(
        f"{served_url}/", content=body, cookies={"sessionid": str(session.session_key)}, timeout=10
    )
    assert logged_in.status_code not in (401, 413), logged_in.text[:200]
    keyed = httpx.post(
        f"{served_url}/api/diagnoses",
        content=body,
        headers={"Authorization": f"Bearer {api_key.raw}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert keyed.status_code not in (401, 413), keyed.text[:200]
    slack = httpx.post(
        f"{served_url}/slack/events",
        content=body,
        headers={"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=" + "0" * 64},
        timeout=10,
    )
    assert slack.status_code != 413  # headers Slack could have sent: the view checks the HMAC
    assert files_under(spool) == 0


@pytest.mark.parametrize("path", ["/v1/messages/count_tokens", "/v1/responses/resp_1/cancel"])
def test_v1_writes_that_are_not_calls_check_the_key_first(served_url, api_key, path) -> None:
    """Counting tokens and cancelling read their body only for a valid key, like the LLM calls."""
    with connect(served_url, timeout=10) as sock:
        sock.sendall(head("POST", path, f"Content-Length: {BODY_BYTES}", "Content-Type: application/json"))
        answered, _, _ = select.select([sock], [], [], 2.0)  # nothing of the body is sent
        assert answered, f"{path}: no answer before the body"
        status, headers, _body = answer_of(sock)
    assert status == 401 and headers.get("connection") == "close"
    keyed = httpx.post(
        f"{served_url}{path}",
        json={"model": "x", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {api_key.raw}", "x-api-key": api_key.raw},
        timeout=10,
    )
    assert keyed.status_code not in (401, 403, 413), keyed.text[:200]
