"""The local diagnosis lab: a small system (web front, API, workers, Redis store, synthetic
traffic) run by its own supervisord under var/lab/, with real fault injection.

- config.py      LabConfig (paths, ports, thresholds) from SKILLGATE_LAB_* variables
- supervisor.py  supervisord.conf, and the read-only / full XML-RPC clients
- control.py     Lab: up, down, status, heal, and the operations actions are built from
- faults.py      Fault ABC + registry: inject, target service, symptoms, the remedy action
- health.py      is a service really serving (state, /healthz, live probes, CPU, job round trip)
- services/      the services themselves (standard library only)

`manage.py lab up|down|status|inject FAULT|heal|faults`; toolsets in diagnostics/toolsets/local.py.
"""
