"""Verifiers: each kind is a small class registered by name."""

from routing.verifiers import json_schema, python_tests, regex, tool_args  # noqa: F401  (registration)
from routing.verifiers.base import Verdict, Verifier, VerifierConfigError, build_verifier, verifier_kinds

__all__ = ["Verdict", "Verifier", "VerifierConfigError", "build_verifier", "verifier_kinds"]
