"""A urlencoded form costs Django's Python decoding no more than a bounded number of escapes (issue 37,
classes 1 and 5; round seven).

Django decodes a form body in Python (``QueryDict``: ``urllib.parse.unquote`` loops over every percent
escape) as soon as anything reads ``request.POST``, and the CSRF check does so on every POST of the
site, before any view or login: anyone with the login page's cookie could send a 3.8 MB form of 1.3
million ``%41`` to ``/accounts/login/``. Four at once held ``GET /v1/models`` for 1.4 s (probe,
``python -m app.serve``), each login answering after 5 s. Django's own bounds count fields (1,000) and
bytes (4 MB), not escapes. Now app/edge.py counts a form's escapes (and raw non-ASCII bytes) at C speed
as the body arrives; past ``SKILLGATE_MAX_FORM_ESCAPES`` (65,536: about 13 ms of decoding) it is a 400
``form_too_complex`` and Django never decodes it.

Round eight: a caller with no session of a logged-in user may send 64 KB at most (app/anonymous.py), so
an anonymous attack form is a 413 before its escapes are counted; the escape bound holds the forms of
logged-in users (the dashboard's), driven here with a session.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore

from app.edge import form_escapes
from tests.support.gateway_process import APP_SERVE, gateway_process
from tests.support.liveness import models_keep_answering

pytestmark = pytest.mark.django_db(transaction=True)

LOGIN = "/accounts/login/"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
ATTACKS = {
    "escapes": b"username=" + b"%41" * 1_300_000,
    "non-ASCII runs": b"username=%41" + "\u00e9a".encode() * 1_200_000,
    "escapes in many fields": b"&".join(b"f%d=" % i + b"%41" * 1_300 for i in range(990)),
}


@pytest.fixture
def session() -> str:
    """The key of a logged-in user's session (the escape bound is theirs; app/anonymous.py's is first
    for everyone else)."""
    user = User.objects.create_user("forms", password="pw-not-used-here-123")
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.save()
    return str(store.session_key)


def login(url: str, body: bytes, session: str = "") -> int:
    cookies = {"sessionid": session} if session else None
    with httpx.Client(base_url=url, timeout=60, cookies=cookies) as client:
        client.get(LOGIN)
        token = client.cookies["csrftoken"].encode()
        headers = {**FORM, "Referer": url + LOGIN}
        return client.post(
            LOGIN, content=b"csrfmiddlewaretoken=" + token + b"&" + body, headers=headers
        ).status_code


@pytest.mark.parametrize("shape", sorted(ATTACKS))
def test_a_form_past_the_escape_bound_is_refused_before_django_decodes_it(
    gateway_url, api_key, session, shape
):
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(login, [gateway_url] * 4, [ATTACKS[shape]] * 4, [session] * 4))
        anonymous = list(pool.map(login, [gateway_url] * 4, [ATTACKS[shape]] * 4))
    assert statuses == [400] * 4
    assert anonymous == [413] * 4  # no session: past 64 KB, before its escapes are counted


def test_ordinary_forms_pass(gateway_url, session):
    assert login(gateway_url, b"username=alice&password=" + b"%21" * 60_000, session) == 200  # wrong login
    assert login(gateway_url, b"username=alice&password=" + b"%21" * 20_000) == 200  # 60 KB, no session
    cookies = {"sessionid": session}
    answer = httpx.post(
        f"{gateway_url}{LOGIN}", content=b"username=" + b"%41" * 70_000, headers=FORM, cookies=cookies
    )
    assert answer.status_code == 400 and "SKILLGATE_MAX_FORM_ESCAPES" in answer.text


def test_escapes_are_counted_at_c_speed():
    assert form_escapes(b"a=%41%42&b=c") == 2
    assert form_escapes("\u00e9".encode()) == 2  # two raw bytes past ASCII
    assert form_escapes(b"plain=text+with+spaces") == 0


@pytest.mark.slow
def test_forms_leave_a_served_process_answering(tmp_path, api_key):
    """Anonymous, as an attacker sends them: the 64 KB bound answers (the process has a database of its
    own, where no session is); the escape bound with a session is the tests' above."""
    with gateway_process("form-escapes", tmp_path, serve=APP_SERVE) as server:
        for body in ATTACKS.values():
            with models_keep_answering(server.url, api_key.raw), ThreadPoolExecutor(4) as pool:
                statuses = list(pool.map(login, [server.url] * 4, [body] * 4))
            assert statuses == [413] * 4
