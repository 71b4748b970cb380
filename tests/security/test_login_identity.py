"""The login lockout keys on the real client (issue 37, class 4).

uvicorn's default trusts ``X-Forwarded-For`` from loopback, so six wrong passwords, each "from" a forged
address, then the right one, logged in: the lockout (django-axes, per username and address) never saw
two failures from one address. The service is served by app/serve.py (``make run`` -> ``manage.py
serve`` -> ``python -m app.serve``; supervisord, the image and Kubernetes the same), which turns
uvicorn's trust off; the app believes forwarded headers only from ``SKILLGATE_TRUSTED_PROXIES``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests
from axes.helpers import get_client_ip_address
from django.contrib.auth.models import User

from app.management.commands import serve as serve_command
from tests.support.gateway_process import APP_SERVE, gateway_process
from tests.support.raw_http import served

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
FORGED = [f"203.0.113.{n}" for n in range(1, 7)]  # six addresses, one per wrong guess


def attempt(url: str, password: str, forwarded_for: str | None = None) -> requests.Response:
    """One login through the form, as a browser would (GET the page, POST it with its CSRF token), with
    a forged X-Forwarded-For on both."""
    session = requests.Session()
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    page = session.get(f"{url}/accounts/login/", headers=headers, timeout=30)
    token = CSRF_INPUT.search(page.text)
    assert page.status_code == 200 and token is not None
    return session.post(
        f"{url}/accounts/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": "victim", "password": password, "next": "/"},
        headers={"Referer": f"{url}/accounts/login/", **headers},
        allow_redirects=False,
        timeout=30,
    )


def guess_from_forged_addresses_then_log_in(url: str) -> requests.Response:
    for n, address in enumerate(FORGED):
        wrong = attempt(url, f"guess-{n}", forwarded_for=address)
        assert wrong.status_code in (200, 429), wrong.status_code
    return attempt(url, PASSWORD, forwarded_for="198.51.100.7")


def test_make_run_serves_the_web_process_through_app_serve():
    """The command line ``manage.py serve`` gives its supervisor (what the next test starts)."""
    source = Path(serve_command.__file__).read_text()
    assert '"app.serve"' in source and '"uvicorn"' not in source


def test_forged_forwarded_addresses_do_not_escape_the_lockout(tmp_path, settings):
    assert settings.AXES_FAILURE_LIMIT == 5
    User.objects.create_user("victim", "victim@example.com", PASSWORD)
    with gateway_process("lockout", tmp_path, serve=APP_SERVE) as server:  # python -m app.serve
        url = server.url
        logged_in = guess_from_forged_addresses_then_log_in(url)
        # Every guess counted against the one real address: locked out, even with the right password.
        assert logged_in.status_code == 429 and "Too many failed logins" in logged_in.text
        assert "sessionid" not in logged_in.cookies


def test_a_configured_trusted_proxy_names_the_client(backends, settings):
    """The other side: behind a proxy in SKILLGATE_TRUSTED_PROXIES, each forwarded client is its own
    (so one client's guesses do not lock another out), and the rightmost address the proxy did not
    write is the one believed (a client cannot prepend its own)."""
    settings.SKILLGATE = {**settings.SKILLGATE, "TRUSTED_PROXIES": ("127.0.0.1",)}
    User.objects.create_user("victim", "victim@example.com", PASSWORD)
    with served() as url:
        welcome = guess_from_forged_addresses_then_log_in(url)
        assert welcome.status_code == 302 and "sessionid" in welcome.cookies
        # One forwarded client guessing five times is locked out, whatever it prepends.
        for n in range(5):
            attempt(url, f"guess-{n}", forwarded_for=f"10.9.9.{n}, 192.0.2.50")
        locked = attempt(url, PASSWORD, forwarded_for="10.9.9.99, 192.0.2.50")
        assert locked.status_code == 429


def test_lockouts_key_on_the_socket_peer_even_where_ipware_would_read_headers(rf):
    """axes asks django-ipware (when installed) before REMOTE_ADDR, and ipware believes X-Real-IP and
    the like; the configured callable answers first, with the socket's peer, so installing ipware later
    cannot hand the lockout key to the client."""
    request = rf.get(
        "/accounts/login/",
        REMOTE_ADDR="192.0.2.10",
        HTTP_X_REAL_IP="203.0.113.99",
        HTTP_X_FORWARDED_FOR="203.0.113.98",
        HTTP_CF_CONNECTING_IP="203.0.113.97",
    )
    assert get_client_ip_address(request, use_ipware=True) == "192.0.2.10"
