#!/usr/bin/env bash
# The duration-bias study on a 3-armed bandit (CPU, one core, ~1-2 minutes).
# Writes experiments/results/duration_bandit.{md,png,json}. Extra flags pass through,
# e.g. launch/duration_bandit.sh --seeds=48 --staleness=1
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -f .venv/bin/activate ]]; then . .venv/bin/activate; fi
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec python experiments/duration_bandit.py --out_dir=experiments/results "$@"
