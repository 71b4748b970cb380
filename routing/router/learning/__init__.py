"""The learned, cost-calibrated router (MERA), offline core: records, features, model, calibration.

Pure Python + numpy at inference; scikit-learn to train; onnxruntime + tokenizers for MiniLM.
Nothing here touches the database except ``records.record_from_invocation`` (given a row).

Train and calibrate (a Celery job, the ``router_eval`` command, the benchmark)::

    from routing.router.learning.calibration import Target
    from routing.router.learning.evaluate import train_router
    from routing.router.learning.features import default_spec, make_featurizer
    from routing.router.learning.records import record_from_invocation

    records = [record_from_invocation(inv) for inv in invocations]
    featurizer = make_featurizer(default_spec())
    trained = train_router(records, featurizer=featurizer, target=Target(0.98, relative=True))
    fields = trained.version_fields()  # model, feature_spec, threshold, target, calibration: all JSON

Route a live call (the gateway)::

    from routing.router.learning.features import CallInput
    from routing.router.learning.runtime import loaded_router

    router = loaded_router(version.pk, model=version.model, threshold=version.threshold)
    decision = router.decide(CallInput.from_call(call))  # .route "teacher"/"student", .score, .reason

Evaluate per profile as deployed (a threshold per profile; pooled, separate or global models)::

    from routing.router.learning.profiles import evaluate_profiles, markdown

    print(markdown(evaluate_profiles(records, featurizer=featurizer, target=Target(0.98))))
"""
