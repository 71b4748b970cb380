"""Replay evaluation of the diagnosis agent: cases, grading, metrics."""
