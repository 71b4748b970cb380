"""Diagnostic skills as SkillBook text: what the Evolver writes is what the Observer reads back, and
only entries whose signature matches the incident reach its prompt."""

from __future__ import annotations

from diagnostics.agent.findings import Finding, Severity
from diagnostics.agent.investigation.skills import (
    HEADER,
    Signature,
    SkillEntry,
    incident_signature,
    matching,
    parse_skillbook,
    render_skillbook,
    with_skills,
)
from diagnostics.agent.request.subject import AlertContext, from_text

PLAN = {
    "discover": "Read the worker's log | and its config",
    "diagnose": "Name the key the OOM line shows.",
    "fix": "Revert batch_size.",
    "verify": "Workers stay RUNNING.",
}


def entry(
    key: str, *, alert: str = "", services: set[str] | None = None, kinds: set[str] | None = None
) -> SkillEntry:
    signature = Signature(alert, frozenset(services or set()), frozenset(kinds or set()))
    return SkillEntry(key, signature, "missing_fix", PLAN)


def test_rendered_entries_parse_back_to_the_same_skills():
    entries = [
        entry("7", alert="kubepodoomkilled", services={"worker", "api-7f9"}, kinds={"oom_killed"}),
        entry("3", kinds={"missing_env_var", "crash_loop"}),
    ]
    text = render_skillbook(entries, max_chars=4000)
    assert text.startswith(HEADER)
    assert parse_skillbook(text) == entries
    assert parse_skillbook("Some other SkillBook advice.\n" + text) == entries
    assert parse_skillbook("") == []


def test_the_size_cap_keeps_whole_entries_newest_first():
    entries = [entry(str(i), kinds={"oom_killed"}) for i in range(10)]
    one = len(entries[0].render())
    text = render_skillbook(entries, max_chars=len(HEADER) + 3 * (one + 2))
    assert [e.key for e in parse_skillbook(text)] == ["0", "1", "2"]
    assert render_skillbook(entries, max_chars=10) == ""


def test_only_entries_alike_enough_match_best_first():
    incident = Signature("kubepodoomkilled", frozenset({"worker"}), frozenset({"oom_killed", "crash_loop"}))
    same_alert = entry("alert", alert="kubepodoomkilled")
    two_kinds = entry("kinds", kinds={"oom_killed", "crash_loop"})
    service_only = entry("service", services={"worker"})
    other = entry("other", alert="watchdog", kinds={"dns_failure"})
    assert [e.key for e in matching([service_only, same_alert, other, two_kinds], incident)] == [
        "kinds",
        "alert",
    ]
    assert matching([two_kinds] * 5, incident, limit=2) == [two_kinds, two_kinds]


def test_an_incident_signature_comes_from_its_alert_and_problem_findings():
    alert = AlertContext(
        title="OOM", labels={"alertname": "KubePodOOMKilled"}, subject=from_text("worker").subject
    )
    findings = [
        Finding("oom_killed", "killed", Severity.CRITICAL, "process/worker_1"),
        Finding("config_change", "changed", Severity.INFO, "worker"),
        Finding("pod_healthy", "fine", Severity.INFO, "pod/ns/api"),
    ]
    signature = incident_signature(alert, findings)
    assert signature.alert == "kubepodoomkilled" and signature.kinds == {"oom_killed"}
    assert "worker" in signature.services and "api" not in signature.services


def test_the_skills_block_replaces_only_itself_in_a_profiles_skillbook():
    first = render_skillbook([entry("1", kinds={"oom_killed"})], max_chars=4000)
    second = render_skillbook([entry("2", kinds={"oom_killed"})], max_chars=4000)
    text = with_skills("Cycle advice.", first)
    assert text == f"Cycle advice.\n\n{first}"
    assert with_skills(text, second) == f"Cycle advice.\n\n{second}"
    assert with_skills("", second) == second and with_skills(text, "") == "Cycle advice."
