#!/usr/bin/env bash
# The full warm start on CPU: build the default policy from nothing (~17 min on 2 cores),
# then evaluate it (32 samples per task). Writes experiments/results/warm_start.{md,json}
# and warm_start_sft_loss.png. Extra flags pass through, e.g. --force or --holdout_tasks=...
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cpu_only
exec "$PY" experiments/warm_start.py --flagfile=experiments/warm_start.flags "$@"
