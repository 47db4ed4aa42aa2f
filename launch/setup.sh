#!/usr/bin/env bash
# Set up a fresh machine for mle_rl: bubblewrap (the sandbox), a virtualenv, the package
# with its test extras. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing bubblewrap (the sandbox for generated code)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "[setup] WARNING: bubblewrap (bwrap) is missing and cannot be installed here;" \
         "generated code will run with the weaker rlimit fallback." >&2
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch==2.13.0 (CPU wheel) is only used by tests and benchmarks as a reference.
python -m pip install -q -e '.[test]'
python - <<'PY'
import jax
print(f"[setup] ok: jax {jax.__version__} on {jax.devices()[0].platform}, {jax.device_count()} device(s)")
PY
