from django.urls import path

from routing import api

urlpatterns = [
    path("chat/completions", api.chat_completions, name="chat-completions"),
    path("models", api.models, name="models"),
    path("openapi.json", api.openapi_document, name="v1-openapi"),
]
