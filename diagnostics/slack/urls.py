from django.urls import path

from diagnostics.slack import views

# One view serves all three; a Slack app may point its request URLs at any of them.
urlpatterns = [
    path("events", views.slack_endpoint, name="slack-events"),
    path("commands", views.slack_endpoint, name="slack-commands"),
    path("interactions", views.slack_endpoint, name="slack-interactions"),
]
