"""The lean edge: the OpenAI-compatible API under ``/v1`` on raw ASGI (routing/api/app.py)."""
