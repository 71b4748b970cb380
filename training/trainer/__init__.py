"""Pure training code (no Django): data sets, LoRA SFT, GRPO with a verifier reward, progress reports.

Modules: ``config`` (Hyperparameters), ``datasets`` (Example, TRL data sets), ``results``
(TrainResult), ``sft`` (train_sft), ``distributed`` (SFT in several processes under accelerate) and
``rank`` (one of those processes), ``grpo`` (train_grpo), ``progress`` (ProgressCallback), ``evaluate``
(greedy generation, pass rate).
The Celery task (``training.services.adapters.training_run_execute``) turns database rows into the plain
values these functions take, and the progress report function writes back to the run's row. torch,
transformers, peft and trl are imported by ``sft``, ``distributed``, ``rank``, ``grpo``, ``progress`` and
``evaluate`` only, so ``config``, ``datasets`` and ``results`` stay cheap to import in the web process.
"""
