"""Corrective plans and diagnostic skills (the AOI Evolver)."""

__all__: list[str] = []
