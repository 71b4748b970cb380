"""The operations API (``/api/``) on django-ninja: one API, one auth and error layer, an OpenAPI document.

- ``app/api/api.py``: the ``NinjaAPI`` (the app routers mounted, the bounded JSON parser, the docs page);
- ``app/api/errors.py``: every refusal (a service's ``ServiceError``, a validation error, a malformed
  body) as ``{"error": {"message", "code"}}`` with a 4xx status;
- ``app/api/urls.py``: the URL patterns, with JSON 404 and 405 answers and each view's ``access``.

The routers (``diagnostics/api.py``, ``training/api.py``) and what they share (auth, paging, the error
schema: ``diagnostics/api_auth.py``) live below ``app`` in the layer order.
"""
