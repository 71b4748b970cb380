"""Security: edge limits, login throttling, TLS and the ledger's retention (design.md section 8)."""

from __future__ import annotations

from datetime import timedelta

from app.settings.base import INSTALLED_APPS, MIDDLEWARE
from app.settings.gateway import SKILLGATE
from core.env import env_bool, env_float, env_int, env_optional

# --- Security: edge limits, login throttling, TLS, ledger retention (design.md section 8) ---------
# Request bodies: SKILLGATE MAX_BODY_BYTES is enforced in front of Django (app/edge.py, a 413), JSON
# nesting by MAX_JSON_DEPTH; ledger bodies' retention: LEDGER_RETENTION_DAYS, LEDGER_STORE_BODIES (all
# declared in routing/conf/). Django's own cap on request.body (2.5 MB by default) would refuse a body
# the edge let through with an HTML 400; one limit, one answer.
DATA_UPLOAD_MAX_MEMORY_SIZE = SKILLGATE["MAX_BODY_BYTES"]
# Nothing a request sends is written to disk (issue 37, class 5): Django's ASGI handler spools a body past
# FILE_UPLOAD_MAX_MEMORY_SIZE to a temporary file before any view runs, and the temporary-file upload
# handler writes a multipart file part to another. The edge bounds every body, so both stay in memory;
# a caller who has not authenticated may send 64 KB at most (app/anonymous.py).
FILE_UPLOAD_MAX_MEMORY_SIZE = SKILLGATE["MAX_BODY_BYTES"]
FILE_UPLOAD_HANDLERS = ["django.core.files.uploadhandler.MemoryFileUploadHandler"]

# Login throttling (django-axes): AXES_FAILURE_LIMIT failed logins of one username from one IP lock that
# pair out for AXES_COOLOFF_MINUTES, even with the right password; a success resets the count. Axes
# reads the client IP from REMOTE_ADDR, the socket's peer: X-Forwarded-For replaces it only from a proxy
# in SKILLGATE_TRUSTED_PROXIES (app/edge.py; uvicorn's own trust of loopback is off, app/serve.py), so a
# client cannot pick a fresh address per guess. No per-username lockout across addresses: it would let
# anyone who knows a username lock its owner out; many real addresses guessing one account are left to
# the password validators and the front proxy's rate limit (docs/operations/security.md).
INSTALLED_APPS.append("axes")
MIDDLEWARE.append("axes.middleware.AxesMiddleware")  # last, as axes asks
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out login before any check
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env_bool("AXES_ENABLED", True)
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("AXES_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_USERNAME_CALLABLE = "app.edge.login_username"  # the username tried, cut to a username's length
AXES_CLIENT_IP_CALLABLE = "app.edge.socket_client"  # the socket's peer, never ipware's header guesses
AXES_VERBOSE = False  # no "AXES: BEGIN version" banner on every manage.py command
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"  # a 429, in the login page's layout

# TLS. All off by default, for the local demo over plain HTTP; behind TLS set:
#   SESSION_COOKIE_SECURE=1 CSRF_COOKIE_SECURE=1   cookies only over HTTPS
#   SECURE_HSTS_SECONDS=31536000                    Strict-Transport-Security (start low, e.g. 3600)
#   SECURE_HSTS_INCLUDE_SUBDOMAINS=1                HSTS for every subdomain too
#   SECURE_SSL_REDIRECT=1                           http:// dashboard requests redirect to https://
#   SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO  a TLS-terminating proxy says so in this header
#                                                   ("HEADER" means the value https; or "HEADER,value")
# Only set SECURE_PROXY_SSL_HEADER when the proxy always sets (or strips) that header, and list the
# proxy in SKILLGATE_TRUSTED_PROXIES: from any other peer app/edge.py removes the header. The redirect and
# HSTS come from SecurityMiddleware, so they apply to the dashboard and /api/, not to /v1/ or /slack/
# (served without the browser middleware, app/asgi.py): terminate TLS in front of those.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
if _proxy_ssl_header := env_optional("SECURE_PROXY_SSL_HEADER"):
    _header, _, _value = _proxy_ssl_header.partition(",")
    SECURE_PROXY_SSL_HEADER = (_header.strip(), _value.strip() or "https")
