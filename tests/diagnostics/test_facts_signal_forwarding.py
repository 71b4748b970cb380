"""A shell that stays PID 1 and does not pass SIGTERM to the program it started (issue 39, round eight):
the wrapper from a describe (one argument per line, or inline) or a manifest, the stop that runs out
the grace period (Terminating, or an exit 137 that is no OOM kill), the work redelivered to the other
pods. ``exec`` or an init in the command, or a pod that stops in time, says nothing. Names appear in no
case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_POD = "billing-sync-7d8e9f0a1b-kk2mm"


def _describe(command: str, status: str = "Terminating (lasts 55s)", grace: int = 60) -> str:
    return f"""Name:                      {_POD}
Namespace:                 billing
Status:                    {status}
Termination Grace Period:  {grace}s
Containers:
  sync:
    Image:         registry.example/billing/sync:2.0.1
{command}    State:          Running
"""


_ARGS = """    Command:
      bash
      -c
      /app/migrate.sh; node /app/consumer.js
"""


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind.startswith("shell_pid1")]


def _read(text: str) -> ToolOutput:
    return ToolOutput("kubectl_describe", {"kind": "pod", "name": _POD, "namespace": "billing"}, text)


def test_a_wrapping_shell_and_a_stop_that_runs_out_its_grace_period():
    (finding,) = _run(_read(_describe(_ARGS)))
    assert (
        "The sync container starts its node process through bash -c, so the shell is PID 1" in finding.summary
    )
    assert "stays Terminating for the whole 60s grace period (55s so far)" in finding.summary
    inline = "    Command:        /bin/ash -c cp /cfg/* /etc/app/ && java -jar /app/app.jar\n"
    killed = _describe(inline, "Running").replace(
        "    State:          Running\n",
        "    State:          Running\n    Last State:     Terminated\n      Reason:       Error\n"
        "      Exit Code:    137\n",
    )
    (other,) = _run(_read(killed))
    assert "starts its java process through /bin/ash -c" in other.summary and "exited 137" in other.summary


def test_a_template_manifest_and_the_redelivered_work():
    manifest = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: billing-sync
spec:
  template:
    spec:
      containers:
      - name: sync
        command: ["/bin/sh", "-c"]
        args: ["envsubst < /t > /c && ruby worker.rb"]
"""
    log = (
        "2027-03-01T10:00:00Z job=inv-31 attempt started delivery_count=2\n"
        "2027-03-01T10:00:01Z job=inv-31 done\n"
    )
    found = _run(
        ToolOutput("kubectl_get_yaml", {"kind": "deployment", "name": "billing-sync"}, manifest),
        _read(_describe("")),
        ToolOutput(
            "fetch_pod_logs", {"pod_name": "billing-sync-7d8e9f0a1b-nn3pp", "namespace": "billing"}, log
        ),
    )
    main, redone = found
    assert "starts its ruby process through /bin/sh -c" in main.summary
    assert "redelivered to the new pods" in redone.summary and "delivery_count=2" in redone.summary


def test_exec_an_init_or_a_pod_that_stops_in_time_says_nothing():
    exec_form = _ARGS.replace("; node", "; exec node")
    assert _run(_read(_describe(exec_form))) == []
    tini = _ARGS.replace("      bash\n      -c\n", "      tini\n      --\n      bash\n      -c\n")
    assert _run(_read(_describe(tini))) == []
    assert _run(_read(_describe(_ARGS, "Terminating (lasts 4s)"))) == []
    single = _ARGS.replace("/app/migrate.sh; node", "node")
    assert _run(_read(_describe(single))) == []
