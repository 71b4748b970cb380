"""Subjects in prose (issue 39, round nine): the explicit 'in namespace X' names a namespace even with a
word questions also use; a possessive before 'namespace' names none; what a release names before its
version is a candidate. And a setting a log says it carries on without is no missing setting."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.names import parse_free_text
from diagnostics.agent.request.subject import AlertContext


def test_in_namespace_names_a_namespace_called_like_a_question_word():
    assert parse_free_text("ingress docs-site in namespace status returns 404").namespace == "status"


def test_a_possessive_before_namespace_names_none():
    assert parse_free_text("we moved the wiki into its own namespace today").namespace == ""


def test_what_a_release_names_before_its_version():
    subject = parse_free_text("We deployed billing 3.2.0 an hour ago, the new pay-later option is missing")
    assert subject.names[0] == "billing"
    assert parse_free_text("we bumped python 3.12 in the base image").names[:1] != ["python"]


def test_a_setting_the_application_carries_on_without_is_no_missing_setting():
    def kinds(text: str) -> list[str]:
        out = ToolOutput("fetch_pod_logs", {"pod_name": "api-1", "namespace": "x"}, text)
        return [f.kind for f in analyze(out, AnalysisState(AlertContext()))]

    assert "missing_env_var" not in kinds("WARN CACHE_TTL_SECONDS not set, using default 60\n")
    assert "missing_env_var" in kinds("FATAL CACHE_TTL_SECONDS not set\n")
