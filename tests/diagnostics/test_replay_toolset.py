"""The replay environment answers from recorded tool outputs only."""

from __future__ import annotations

import builtins
import io
import json
import pathlib
from pathlib import Path

import pytest

from diagnostics.toolsets.registry import UnknownEnvironment, build_environment
from diagnostics.toolsets.replay import ReplayEnvironment, ReplayToolset
from tests.support.fake_environment import CASES


def record(
    folder: Path, name: str, tool: str, match: dict[str, object] | None, body: str, status: str = "success"
) -> None:
    header: dict[str, object] = {"toolset_name": "kubernetes/core", "tool_name": tool}
    if match is not None:
        header["match_params"] = match
    meta = {"status": status, "error": "boom" if status == "error" else None, "params": match or {}}
    (folder / name).write_text(f"{json.dumps(header)}\n{json.dumps(meta)}\n{body}\n")


@pytest.fixture
def case(tmp_path: Path) -> Path:
    record(
        tmp_path,
        "a.txt",
        "kubectl_describe",
        {"kind": "pod", "name": "*", "namespace": "ns1"},
        "any pod in ns1",
    )
    record(
        tmp_path,
        "b.txt",
        "kubectl_describe",
        {"kind": "pod", "name": "web-1", "namespace": "ns1"},
        "stdout:\nName: web-1\n\nstderr:\n",
    )
    record(tmp_path, "c.txt", "fetch_pod_logs", {"pod_name": "web-1", "namespace": "ns1"}, "", status="error")
    record(tmp_path, "d.txt", "list_clusters", None, "cluster-a")
    (tmp_path / "manifest.yaml").write_text("apiVersion: v1\nkind: Secret\n# the answer is here\n")
    (tmp_path / "notes.txt").write_text("not a recording\n")
    return tmp_path


def test_the_most_specific_recording_wins_and_wildcards_match_anything(case):
    toolset = ReplayToolset(case)
    exact = toolset.call("kubectl_describe", {"kind": "pod", "name": "web-1", "namespace": "ns1"})
    other = toolset.call("kubectl_describe", {"kind": "Pod", "name": "api-2", "namespace": "ns1"})
    assert (exact.ok, exact.output) == (True, "Name: web-1")
    assert other.output == "any pod in ns1"  # kinds compare case-insensitively, as kubectl does
    assert toolset.call("list_clusters", {"anything": 1}).output == "cluster-a"  # no match_params: any call


def test_a_call_with_no_recording_is_a_counted_no_data_result_not_an_exception(case):
    toolset = ReplayToolset(case)
    missing = toolset.call("kubectl_describe", {"kind": "pod", "name": "web-1", "namespace": "other"})
    unknown = toolset.call("no_such_tool", {})
    assert missing.no_data and not missing.ok and "No data" in missing.output
    assert unknown.no_data
    assert (toolset.calls, toolset.misses) == (2, 2)


def test_a_recorded_error_is_a_failed_result_with_its_message(case):
    result = ReplayToolset(case).call("fetch_pod_logs", {"pod_name": "web-1", "namespace": "ns1"})
    assert not result.ok and not result.no_data and "boom" in result.output


def test_replay_reads_only_recordings_never_manifests(case, monkeypatch):
    opened: list[str] = []
    real_open = builtins.open
    real_path_open = pathlib.Path.open

    def spy_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def spy_path_open(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(str(self))
        return real_path_open(self, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(pathlib.Path, "open", spy_path_open)
    toolset = ReplayToolset(case)
    toolset.tools()
    toolset.call("kubectl_describe", {"kind": "pod", "name": "web-1", "namespace": "ns1"})
    assert opened and all(path.endswith(".txt") for path in opened)
    assert not any("manifest" in path for path in opened)


def test_tools_offer_the_standard_kubernetes_reads_and_the_recorded_ones_with_their_parameters(case):
    specs = {spec.name: spec for spec in ReplayToolset(case).tools()}
    assert {"kubectl_describe", "fetch_pod_logs", "kubectl_find_resource", "list_clusters"} <= set(specs)
    assert specs["kubectl_describe"].parameters["required"] == ["kind", "name", "namespace"]


def test_namespace_listing_is_derived_from_recorded_calls_and_labelled(case):
    result = ReplayToolset(case).call("kubectl_get_by_kind_in_cluster", {"kind": "namespace"})
    assert result.ok and "ns1" in result.output and "derived" in result.output


def test_replay_environment_takes_a_case_under_the_replay_root_only(settings, tmp_path):
    settings.DIAGNOSTICS_REPLAY_ROOT = str(CASES)
    env = build_environment("replay", {"case": "test_ask_holmes/09_crashpod"})
    assert isinstance(env, ReplayEnvironment) and env.write_toolsets() == []
    with pytest.raises(UnknownEnvironment):
        build_environment("replay", {"case": "../../../etc"})
    with pytest.raises(UnknownEnvironment):
        build_environment("replay", {})
    with pytest.raises(UnknownEnvironment):
        build_environment("no-such-environment", {})


def test_a_recorded_holmesgpt_case_replays(settings):
    toolset = ReplayToolset(CASES / "test_ask_holmes" / "09_crashpod")
    logs = toolset.call(
        "fetch_pod_logs", {"pod_name": "payment-processing-worker-747ccfb9db-78qds", "namespace": "default"}
    )
    assert logs.ok and "DEPLOY_ENV" in logs.output
