"""Anthropic's Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``, translated to the chat
protocol and back (``protocol``), with Anthropic's stream events (``stream``)."""
