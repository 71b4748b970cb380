"""Learned router versions of a task profile: train from the ledger, admit on held-out replay,
activate (one active per profile), roll back, and watch for drift.

    services.router_version_train(*, profile, target=None)   -> candidate (or RouterTrainingError)
    services.router_version_admit(*, version)                -> active, or rejected with the reason
    services.router_version_rollback(*, profile, to_version) -> that earlier version active again
    drift.router_version_drift_check(*, version)             -> live numbers, drift_flag (SPRT, PSI, ...)
    truth.verifier_precision(profile), truth.fixed_choice(profile), truth.profile_truth(profile)
                                                             -> measured precision; the measured fallback

The gateway's ``learned`` policy (routing/router/policies.py) reads the active version; Celery tasks in
routing/tasks.py run these on demand and on the beat schedule.
"""
