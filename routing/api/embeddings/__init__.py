"""The Embeddings API: ``POST /v1/embeddings`` (the call itself is routing/call/embeddings.py)."""
