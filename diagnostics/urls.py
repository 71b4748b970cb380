from django.urls import path

from diagnostics import api

urlpatterns = [
    path("incidents", api.incidents, name="diagnostics-incidents"),
    path("incidents/<int:incident_id>", api.incident_detail, name="diagnostics-incident"),
    path("actions/<int:action_id>/approve", api.action_approve, name="diagnostics-action-approve"),
    path("actions/<int:action_id>/deny", api.action_deny, name="diagnostics-action-deny"),
]
