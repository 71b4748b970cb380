"""``GET /v1/models``."""
