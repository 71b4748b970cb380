#!/usr/bin/env bash
# Runs Skillgate on one machine under supervisord (infra/onebox/supervisord.conf):
#
#   infra/onebox/run.sh [ENV_FILE]        (default: /etc/skillgate/env; see infra/onebox/env.example)
#
# Loads the environment file, makes the folders, empties the metrics folder (the per-process files of a
# previous run would be summed into this one's), migrates, then execs supervisord in the foreground, so a
# systemd unit (infra/onebox/skillgate.service) or a terminal owns it. WEB_PROCESSES defaults to the
# number of cores. SIGTERM stops every program, each as a process group.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ENV_FILE="${1:-/etc/skillgate/env}"
if [[ ! -r "$ENV_FILE" ]]; then
    echo "onebox: cannot read the environment file $ENV_FILE (see infra/onebox/env.example)" >&2
    exit 2
fi
set -a
# shellcheck disable=SC1090
source "$ENV_FILE"
set +a

export SKILLGATE_ROOT="$ROOT"
export SKILLGATE_PYTHON="${SKILLGATE_PYTHON:-$ROOT/.venv/bin/python}"
export SKILLGATE_VAR_DIR="${SKILLGATE_VAR_DIR:-$ROOT/var}"
export WEB_PROCESSES="${WEB_PROCESSES:-$(nproc)}"
export WEB_HOST="${WEB_HOST:-127.0.0.1}"
export WEB_PORT="${WEB_PORT:-8000}"
export CELERY_DEFAULT_QUEUE="${CELERY_DEFAULT_QUEUE:-default}"
export CELERY_GPU_QUEUE="${CELERY_GPU_QUEUE:-gpu}"
export SKILLGATE_DIAGNOSTICS_QUEUE="${SKILLGATE_DIAGNOSTICS_QUEUE:-diagnostics}"
export SKILLGATE_CYCLE_QUEUE="${SKILLGATE_CYCLE_QUEUE:-learning}"
export SKILLGATE_EVOLVER_QUEUE="${SKILLGATE_EVOLVER_QUEUE:-$SKILLGATE_CYCLE_QUEUE}"
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-app.settings}"
export LITELLM_OFFLINE_MODE="${LITELLM_OFFLINE_MODE:-true}"

if [[ ! -x "$SKILLGATE_PYTHON" ]]; then
    echo "onebox: no python at $SKILLGATE_PYTHON (make setup, or set SKILLGATE_PYTHON)" >&2
    exit 2
fi
mkdir -p "$SKILLGATE_VAR_DIR/logs"
if [[ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]]; then
    rm -rf "$PROMETHEUS_MULTIPROC_DIR"
    mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
fi

cd "$ROOT"
"$SKILLGATE_PYTHON" manage.py migrate --noinput
exec "$SKILLGATE_PYTHON" -m supervisor.supervisord -c "$ROOT/infra/onebox/supervisord.conf"
