"""Adapters and the training runs that produce them."""

__all__: list[str] = []
