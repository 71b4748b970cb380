"""The Chat Completions API: ``POST /v1/chat/completions``. Its protocol is the gateway's own
(routing/protocol.py), its stream routing/call/streaming.py's."""
