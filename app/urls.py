from django.contrib import admin
from django.urls import include, path

from app import health

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("v1/", include("routing.urls")),
    path("api/", include("training.urls")),
    path("api/", include("diagnostics.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("app.web.urls")),
    path("slack/", include("diagnostics.slack.urls")),
]
