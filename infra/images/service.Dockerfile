# The service image: web (uvicorn), Celery workers of the CPU queues, and beat. One image, three commands
# (infra/k8s/base: web.yaml, workers.yaml, beat.yaml).
#
#   docker build -f infra/images/service.Dockerfile -t skillgate:dev .      (context: the repository root)
#
# Not built on the project's machines (no base image is reachable from them): kept minimal and
# conventional. The versions come from constraints.txt, the lock of the whole environment; the heavy ML
# extra is not installed (training runs in trainer.Dockerfile, the student in student.Dockerfile).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=app.settings \
    LITELLM_OFFLINE_MODE=true \
    SKILLGATE_VAR_DIR=/var/lib/skillgate

# bubblewrap: the python_tests verifiers run untrusted code under it and refuse to run without it
# (design.md section 8); the pod must then allow unprivileged user namespaces.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin skillgate

WORKDIR /app
# Dependencies first (a layer that changes only with the lock), then the source.
COPY pyproject.toml constraints.txt ./
RUN pip install -c constraints.txt ".[otel]" && rm -rf build *.egg-info
COPY --chown=skillgate:skillgate . .

RUN mkdir -p /var/lib/skillgate && chown skillgate:skillgate /var/lib/skillgate
USER 10001
EXPOSE 8000
# One ASGI process per container; scale with replicas (the HPA), not with --workers. app/serve.py is
# uvicorn without its own forwarded-header trust (SKILLGATE_TRUSTED_PROXIES decides) and with a header
# deadline.
CMD ["python", "-m", "app.serve", "--host", "0.0.0.0", "--port", "8000", "--timeout-graceful-shutdown", "25"]
