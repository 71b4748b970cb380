"""The one ``NinjaAPI`` of ``/api/``: the app routers, the bounded JSON parser, errors and docs.

``/api/openapi.json`` is the OpenAPI 3 document; ``/api/docs`` the interactive Swagger UI, served from
django-ninja's own static files (``ninja`` in ``INSTALLED_APPS``; whitenoise serves them), so the page
works offline: ninja falls back to a CDN only when it is not an installed app.
"""

from __future__ import annotations

from ninja import NinjaAPI
from ninja.openapi.docs import Swagger

from app.api import errors
from diagnostics.api import router as incidents
from diagnostics.mcp.api import router as mcp
from diagnostics.mcp.api_manage import router as mcp_manage
from training.api import router as learning

api = NinjaAPI(
    title="Skillgate operations API",
    version="1",
    description=(
        "Incidents, their diagnoses and approvals; learning cycles, training runs, admissions and the "
        "Evolver; MCP servers, their tools' classes and the gateway's grants (docs/guides/mcp.md). "
        "Authenticate with an API key that holds the operation's scope "
        "(`Authorization: Bearer sg-...`, created with `manage.py create_api_key --scope ...` or on the "
        "dashboard's keys page), whose owner's role has the operation's permission; or with a logged-in "
        "dashboard session. Lists page with `limit` (at most 200) and `offset`; errors are "
        '`{"error": {"message", "code"}}`.'
    ),
    urls_namespace="api",
    parser=errors.BoundedJsonParser(),
    docs=Swagger(settings={"persistAuthorization": False}),
    docs_url="/docs",
    openapi_url="/openapi.json",
)
errors.install(api)
api.add_router("", incidents)
api.add_router("", learning)
api.add_router("", mcp)
api.add_router("", mcp_manage)
