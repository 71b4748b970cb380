"""Who may call: API keys (``keys``), the per-key rate limits (``ratelimit``) and the cached lookups of keys,
backends, profiles and router versions that every call makes (``lookups``)."""

__all__ = ["keys", "lookups", "ratelimit"]
