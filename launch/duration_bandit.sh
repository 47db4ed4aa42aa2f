#!/usr/bin/env bash
# The duration-bias study on a 3-armed bandit (CPU, one core, ~1-2 minutes).
# Writes experiments/results/duration_bandit.{md,png,json}. Extra flags pass through,
# e.g. launch/duration_bandit.sh --seeds=48 --staleness=1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cpu_only
exec "$PY" experiments/duration_bandit.py --out_dir=experiments/results "$@"
