from django.contrib import admin
from django.urls import include, path

from app import health
from app.observability.views import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("metrics", metrics),
    path("api/", include(("app.api.urls", "ninja"), namespace="api")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("app.web.urls")),
    path("slack/", include("diagnostics.slack.urls")),
]
